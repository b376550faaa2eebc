package observe

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/ratelimit-gateway/gateway/internal/safefile"
)

// MinKeyHashSecret is the shortest key-hash secret accepted, in bytes of
// the file's trimmed contents: 32, as for an HS256 secret (RFC 7518,
// section 3.2), so that it cannot be guessed either.
const MinKeyHashSecret = 32

// LoadKeyHashSecret returns the secret of a KeyHasher kept in the file at
// path: its contents, trimmed of white space. When the file does not
// exist it writes a new random one there (64 hex digits, mode 0600) and
// reports created; a file another process created meanwhile is read
// instead. A file shorter than MinKeyHashSecret, or that is not a
// regular file, is an error.
func LoadKeyHashSecret(path string) (secret []byte, created bool, err error) {
	secret, err = readKeyHashSecret(path)
	if !errors.Is(err, fs.ErrNotExist) {
		return secret, false, err
	}
	var raw [32]byte
	rand.Read(raw[:])
	if err := writeNew(path, hex.EncodeToString(raw[:])+"\n"); err != nil {
		if errors.Is(err, fs.ErrExist) {
			secret, err = readKeyHashSecret(path)
			return secret, false, err
		}
		return nil, false, fmt.Errorf("creating the key-hash secret %s: %w", path, err)
	}
	secret, err = readKeyHashSecret(path)
	return secret, err == nil, err
}

func readKeyHashSecret(path string) ([]byte, error) {
	data, err := safefile.Read(path, safefile.MaxSecretBytes)
	if err != nil {
		return nil, err
	}
	s := strings.TrimSpace(string(data))
	if len(s) < MinKeyHashSecret {
		return nil, fmt.Errorf("the key-hash secret %s holds %d bytes, fewer than %d: write a longer random secret, or remove the file to have one made", path, len(s), MinKeyHashSecret)
	}
	return []byte(s), nil
}

// writeNew writes data to the new file path, whole or not at all: a
// temporary file beside it, linked into place, so that no reader sees it
// half-written and two writers cannot both win.
func writeNew(path, data string) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.WriteString(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Link(tmp.Name(), path)
}

// OpenKeyHasher returns the hasher of the access log's and /top's key
// values (`gateway serve`'s keyed limits, `gateway rls`'s descriptor
// values), under the secret of file (--key-hash-secret-file), or of the
// file beside a file access log (accessLog with ".key" appended),
// created if missing; without either, under a random secret of this
// process. logged reports whether the access log writes hashes, to say
// so when they will not survive a restart.
func OpenKeyHasher(file, accessLog string, logged bool, log *slog.Logger) (*KeyHasher, error) {
	file = keyHashSecretPath(file, accessLog)
	if file == "" {
		var secret [32]byte
		rand.Read(secret[:])
		if logged {
			log.Info("the access log's key hashes use a secret of this process: set --key-hash-secret-file to keep them stable across restarts")
		}
		return NewKeyHasher(secret[:]), nil
	}
	secret, created, err := LoadKeyHashSecret(file)
	if err != nil {
		return nil, fmt.Errorf("--key-hash-secret-file: %w", err)
	}
	if created {
		log.Info("key-hash secret created; keep it to keep the access log's key hashes stable", "file", file)
	}
	return NewKeyHasher(secret), nil
}

// keyHashSecretPath returns where the key-hash secret is kept: file, or
// when it is empty the file access log's path with ".key" appended; ""
// when neither is a file.
func keyHashSecretPath(file, accessLog string) string {
	switch {
	case file != "":
		return file
	case accessLog == "" || accessLog == "stdout" || accessLog == "stderr":
		return ""
	}
	return accessLog + ".key"
}
