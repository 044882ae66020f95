//go:build !linux

package main

import "os"

// maxRSS is not measured here.
func maxRSS(*os.ProcessState) (float64, bool) { return 0, false }
