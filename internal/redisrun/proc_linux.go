package redisrun

import "syscall"

// sysProcAttr has the kernel kill the server if ratelab dies without stopping it.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
