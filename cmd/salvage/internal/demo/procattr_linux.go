package demo

import (
	"os/exec"
	"syscall"
)

// DieWithParent makes the kernel SIGKILL cmd's process when this one
// dies, however it dies: no worker or server outlives a killed demo or
// bench, holding its pipes open.
func DieWithParent(cmd *exec.Cmd) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
}
