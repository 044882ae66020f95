//go:build !linux

package redisrun

import "syscall"

func sysProcAttr() *syscall.SysProcAttr { return nil }
