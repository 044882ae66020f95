package edge

import "syscall"

// Signals that stop nginx: gracefully, and fast.
const (
	syscallQuit = syscall.SIGQUIT
	syscallTerm = syscall.SIGTERM
	syscallHup  = syscall.SIGHUP // nginx: reload the configuration
)
