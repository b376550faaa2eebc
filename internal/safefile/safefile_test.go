package safefile

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestRead checks that Read returns a regular file's contents, and
// refuses at once, with an error naming the path, what is not a regular
// file or is larger than its bound. A FIFO nobody writes to would block
// a plain open forever.
func TestRead(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	file := filepath.Join(dir, "ok.pem")
	if err := os.WriteFile(file, []byte("hello"), 0o600); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "fifo.pem")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link.pem")
	if err := os.Symlink(fifo, link); err != nil {
		t.Fatal(err)
	}
	goodLink := filepath.Join(dir, "good-link.pem")
	if err := os.Symlink(file, goodLink); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, path string
		max        int64
		want       string // the contents, or a part of the error
		is         error
	}{
		{name: "regular", path: file, max: 5, want: "hello"},
		{name: "symlink to regular", path: goodLink, max: 5, want: "hello"},
		{name: "fifo", path: fifo, max: 5, want: "is not a regular file (a FIFO)", is: ErrNotRegular},
		{name: "symlink to fifo", path: link, max: 5, want: "is not a regular file (a FIFO)", is: ErrNotRegular},
		{name: "device", path: "/dev/zero", max: 5, want: "is not a regular file (a device)", is: ErrNotRegular},
		{name: "directory", path: dir, max: 5, want: "is not a regular file (a directory)", is: ErrNotRegular},
		{name: "too large", path: file, max: 4, want: "is larger than 4 bytes", is: ErrTooLarge},
		{name: "missing", path: filepath.Join(dir, "nope"), max: 5, want: "no such file", is: fs.ErrNotExist},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data, err := Read(tc.path, tc.max)
			if tc.is == nil {
				if err != nil || string(data) != tc.want {
					t.Fatalf("Read: got %q, %v; want %q", data, err, tc.want)
				}
				return
			}
			if err == nil {
				t.Fatalf("Read: got %q, want an error", data)
			}
			if !errors.Is(err, tc.is) || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), tc.path) {
				t.Errorf("Read: got error %q, want one that is %v, names %s and says %q", err, tc.is, tc.path, tc.want)
			}
		})
	}
}
