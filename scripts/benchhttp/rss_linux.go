package main

import (
	"os"
	"syscall"
)

// maxRSS is a finished process's largest resident set, in MiB.
func maxRSS(p *os.ProcessState) (float64, bool) {
	ru, ok := p.SysUsage().(*syscall.Rusage)
	if !ok {
		return 0, false
	}
	return float64(ru.Maxrss) / 1024, true // Linux reports KiB
}
