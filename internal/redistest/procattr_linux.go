package redistest

import (
	"os/exec"
	"syscall"
)

// dieWithParent makes the server die with the test process, so that a test
// binary that crashes or is killed leaves no server behind.
func dieWithParent(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
