package bench

import (
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// startPacer makes the Go runtime look at its timers every period, so that
// the open model's sends, which wait on timers, are sent when due. Go waits
// for network events and timers in epoll_wait, whose timeout is in whole
// milliseconds: an idle runtime wakes a timer up to a millisecond late, and
// that lateness is send lag. A timerfd expiring every period wakes epoll_wait
// itself, as any socket does, and the runtime then runs the timers that are
// due. It costs one wake-up and one read per period. stop ends it.
func startPacer(period time.Duration) (stop func(), err error) {
	if period <= 0 {
		return func() {}, nil
	}
	fd, err := unix.TimerfdCreate(unix.CLOCK_MONOTONIC, unix.TFD_NONBLOCK|unix.TFD_CLOEXEC)
	if err != nil {
		return nil, err
	}
	ts := unix.NsecToTimespec(int64(period))
	if err := unix.TimerfdSettime(fd, 0, &unix.ItimerSpec{Interval: ts, Value: ts}, nil); err != nil {
		unix.Close(fd)
		return nil, err
	}
	f := os.NewFile(uintptr(fd), "pacer") // non-blocking: read through the runtime's poller
	done := make(chan struct{})
	go func() {
		defer close(done)
		var buf [8]byte
		for {
			if _, err := f.Read(buf[:]); err != nil {
				return
			}
		}
	}()
	return func() { f.Close(); <-done }, nil
}
