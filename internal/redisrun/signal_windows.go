package redisrun

import "os"

// pauseSignals are none: Windows has no signal that pauses a process.
func pauseSignals() (stop, cont os.Signal) { return nil, nil }
