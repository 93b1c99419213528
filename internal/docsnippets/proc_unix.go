//go:build unix

package docsnippets

import (
	"os/exec"
	"syscall"
)

// ownGroup starts the block in its own process group and makes a timeout
// kill the whole group, so no command a block started outlives it.
func ownGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error {
		if cmd.Process == nil {
			return nil
		}
		return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
}
