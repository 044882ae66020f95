//go:build !linux

package bench

import "time"

// startPacer does nothing here: the open model's sends wait on the
// runtime's timers alone.
func startPacer(time.Duration) (func(), error) { return func() {}, nil }
