// Package safefile reads the files an operator names on the command line
// or in a rule file (rules, TLS certificates and keys, CA bundles, JWKS,
// secrets and passwords): only a regular file, only up to a stated size,
// and never for longer than a timeout. A FIFO, a device such as
// /dev/zero or /dev/stdin, a directory or a huge file named by mistake
// (or by whoever can edit a rule file) is refused with an error that
// names it, instead of hanging the command, the start or a reload.
//
// It must not be used for streams the gateway is meant to follow
// (access logs being replayed): those are read as they come.
package safefile

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"syscall"
	"time"
)

// DefaultTimeout bounds one Read: far longer than reading a megabyte from
// any local disk, short enough that a file on a stalled network mount
// fails the start or the reload with an error rather than hanging it.
const DefaultTimeout = 10 * time.Second

// ErrTooLarge is wrapped by the error of a file larger than its bound.
var ErrTooLarge = errors.New("file too large")

// ErrNotRegular is wrapped by the error of a path that is not a regular
// file (or a symbolic link to one).
var ErrNotRegular = errors.New("not a regular file")

// Read returns the contents of path, which must be a regular file (or a
// symbolic link to one) of at most maxBytes bytes, read within
// DefaultTimeout. Errors name path; a missing file's error wraps
// fs.ErrNotExist.
func Read(path string, maxBytes int64) ([]byte, error) {
	return ReadTimeout(path, maxBytes, DefaultTimeout)
}

// ReadTimeout is Read with a timeout of its own.
func ReadTimeout(path string, maxBytes int64, timeout time.Duration) ([]byte, error) {
	type result struct {
		data []byte
		err  error
	}
	// Buffered: a read that ends after the timeout must not leak its
	// goroutine. The read itself cannot be interrupted (a stalled
	// network mount holds the thread until the kernel gives up), but
	// its caller no longer waits for it.
	done := make(chan result, 1)
	go func() {
		data, err := read(path, maxBytes)
		done <- result{data, err}
	}()
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case r := <-done:
		return r.data, r.err
	case <-t.C:
		return nil, fmt.Errorf("reading %s: no answer within %s; is it on a stalled network mount?", path, timeout)
	}
}

func read(path string, maxBytes int64) ([]byte, error) {
	// Stat first: opening a FIFO for reading blocks until a writer
	// comes, and Stat does not.
	fi, err := os.Stat(path)
	if pe, ok := err.(*fs.PathError); ok {
		pe.Op = "open" // what a reader of the message expects: "open x: no such file or directory"
		return nil, pe
	}
	if err != nil {
		return nil, err
	}
	if err := check(path, fi, maxBytes); err != nil {
		return nil, err
	}
	// O_NONBLOCK, in case the file was swapped for a FIFO since the
	// Stat: the open then returns at once, and the check below refuses
	// it. It changes nothing for a regular file.
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if fi, err = f.Stat(); err != nil {
		return nil, err
	}
	if err := check(path, fi, maxBytes); err != nil {
		return nil, err
	}
	data, err := io.ReadAll(io.LimitReader(f, maxBytes+1))
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	if int64(len(data)) > maxBytes {
		return nil, tooLarge(path, maxBytes) // it grew since the Stat
	}
	return data, nil
}

// check refuses what is not a regular file of at most maxBytes.
func check(path string, fi fs.FileInfo, maxBytes int64) error {
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("%s is %w (%s): name a file", path, ErrNotRegular, kind(fi.Mode()))
	}
	if fi.Size() > maxBytes {
		return tooLarge(path, maxBytes)
	}
	return nil
}

func tooLarge(path string, maxBytes int64) error {
	return fmt.Errorf("%s is larger than %d bytes: %w", path, maxBytes, ErrTooLarge)
}

// kind names a file mode that is not a regular file's.
func kind(m fs.FileMode) string {
	switch {
	case m.IsDir():
		return "a directory"
	case m&fs.ModeNamedPipe != 0:
		return "a FIFO"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m&fs.ModeDevice != 0:
		return "a device"
	}
	return "a special file"
}

// MaxSecretBytes is the largest token, password or secret file read: far
// above any real one.
const MaxSecretBytes = 64 << 10
