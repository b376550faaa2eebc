package observe

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestLoadKeyHashSecret checks that a missing secret file is created with
// a random secret only its owner reads, that the next load (a restart)
// reads the same secret, so that hashes stay stable, and that a secret
// too short to resist guessing is refused.
func TestLoadKeyHashSecret(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "access.log.key")
	first, created, err := LoadKeyHashSecret(path)
	if err != nil || !created || len(first) < MinKeyHashSecret {
		t.Fatalf("first load: got %d bytes, created %v, %v; want a new secret", len(first), created, err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("secret file: %v, %v; want mode 0600", fi.Mode(), err)
	}
	again, created, err := LoadKeyHashSecret(path)
	if err != nil || created || string(again) != string(first) {
		t.Fatalf("second load: created %v, %v, same secret %v; want the kept secret", created, err, string(again) == string(first))
	}
	if NewKeyHasher(first).Hash("alice") != NewKeyHasher(again).Hash("alice") {
		t.Error("the same secret gave two hashes")
	}
	if NewKeyHasher(first).Hash("alice") == KeyHash("alice") {
		t.Error("the keyed hash equals the hash under no secret")
	}
	short := filepath.Join(dir, "short.key")
	if err := os.WriteFile(short, []byte("  too short  \n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := LoadKeyHashSecret(short); err == nil || !strings.Contains(err.Error(), "fewer than 32") {
		t.Errorf("short secret: got %v, want an error saying it is too short", err)
	}
	if _, _, err := LoadKeyHashSecret(filepath.Join(dir, "no-such-dir", "x.key")); err == nil {
		t.Error("secret in a missing directory: got no error")
	}
}
