//go:build !windows

package redisrun

import (
	"os"
	"syscall"
)

// pauseSignals are the signals that pause and resume a process.
func pauseSignals() (stop, cont os.Signal) { return syscall.SIGSTOP, syscall.SIGCONT }
