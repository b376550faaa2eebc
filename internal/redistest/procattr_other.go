//go:build !linux

package redistest

import "os/exec"

// dieWithParent does nothing where the kernel cannot kill a child with its
// parent; t.Cleanup stops the servers of tests that end normally.
func dieWithParent(*exec.Cmd) {}
