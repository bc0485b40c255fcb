package localcluster

import "syscall"

// dieWithParentAttr has the kernel SIGKILL the child when this process dies.
func dieWithParentAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
