package race

import (
	"context"
	"math"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratelab/ratelab/algorithms"
	"github.com/ratelab/ratelab/internal/field"
)

// Faults are what befalls the holders of in-flight limiters' slots, each
// a share of the admitted requests, from 0 to 1, at most 1 together. They
// are dealt in the order the admissions come: after n admissions,
// ⌈n × Kill⌉ holders were killed (the first holder of every trial is, when
// Kill is above 0), and the releases lost and retried follow their own
// shares the same way, a kill first, then a lost release, when two are
// owed at once.
type Faults struct {
	// Kill is the share of holders killed halfway through their hold:
	// their connection is closed, their release never sent, and their
	// goroutine makes no more requests in the trial.
	Kill float64 `json:"kill"`
	// LoseRelease is the share of holders whose release is never sent,
	// as when it times out before it is written.
	LoseRelease float64 `json:"lose_release"`
	// RetryRelease is the share of holders whose release is sent twice,
	// as a client does whose first reply was lost.
	RetryRelease float64 `json:"retry_release"`
}

// Validate checks each share and their sum. Errors are *field.Error naming
// Faults.Kill, Faults.LoseRelease or Faults.RetryRelease.
func (f Faults) Validate() error {
	for _, s := range []struct {
		name  string
		share float64
	}{{"Kill", f.Kill}, {"LoseRelease", f.LoseRelease}, {"RetryRelease", f.RetryRelease}} {
		if math.IsNaN(s.share) || s.share < 0 || s.share > 1 {
			return field.Errorf("Faults."+s.name, "must be a share between 0 and 1 (got %g)", s.share)
		}
	}
	if sum := f.Kill + f.LoseRelease + f.RetryRelease; sum > 1+1e-9 {
		return field.Errorf("Faults.Kill", "+ {Faults.LoseRelease} + {Faults.RetryRelease} must be at most 1: "+
			"each holder meets one fault at most (got %g)", sum)
	}
	return nil
}

// fault is what befalls one holder.
type fault int

const (
	faultNone fault = iota
	faultKill
	faultLose
	faultRetry
)

// faultDealer deals the faults of one trial, in the order of admissions.
type faultDealer struct {
	shares [3]float64 // kill, lose, retry
	mu     sync.Mutex
	dealt  int64
	given  [3]int64
}

func newFaultDealer(f Faults) *faultDealer {
	return &faultDealer{shares: [3]float64{f.Kill, f.LoseRelease, f.RetryRelease}}
}

// next is the fault of the next admission: the first kind owed one more.
func (d *faultDealer) next() fault {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.dealt++
	for i, s := range d.shares {
		owed := int64(math.Ceil(float64(d.dealt)*s-1e-9)) - d.given[i]
		if owed > 0 {
			d.given[i]++
			return fault(i + 1)
		}
	}
	return faultNone
}

// request is one acquire of a trial and, when admitted, its hold.
type request struct {
	// sent and replied bound the acquire.
	sent, replied time.Time
	admitted      bool
	failed        bool
	fault         fault
	// end is when the holder stopped holding: its release sent, its kill,
	// or, for a lost release, when it would have been sent. released is
	// the first release's reply; zero when none came back.
	end, released time.Time
}

// holder is one goroutine of an in-flight race: a client of its own, whose
// connection a kill closes, and what it did in the trial.
type holder struct {
	client redis.UniversalClient // nil once killed
	sem    algorithms.Semaphore
	log    *clientLog
	// reqs are this trial's requests, in order; one per decision of log.
	reqs      []request
	latencies []int64
	errs      int64
	err       error
}

// run makes n requests at key, each held for hold when admitted or
// followed by a pause as long when not, meeting the faults dealt; first,
// when not nil, holds the first round's holders together.
func (h *holder) run(ctx context.Context, key string, n int, hold time.Duration, faults *faultDealer, first *firstRound) {
	failed := func(err error) {
		h.errs++
		if h.err == nil {
			h.err = err
		}
	}
	for i := range n {
		if ctx.Err() != nil {
			return
		}
		r := request{sent: time.Now()}
		from := h.log.mark()
		s, err := h.sem.Acquire(ctx, key)
		r.replied = time.Now()
		h.log.decided(from, s.Admitted, err)
		if i == 0 {
			first.replied(key)
		}
		h.latencies = append(h.latencies, r.replied.Sub(r.sent).Microseconds())
		switch {
		case err != nil:
			r.failed = true
			failed(err)
		case s.Admitted:
			r.admitted = true
			r.fault = faults.next()
		}
		if !r.admitted {
			h.reqs = append(h.reqs, r)
			pause(ctx, hold) // a client told no comes back after a while
			continue
		}
		if r.fault == faultKill {
			pause(ctx, hold/2)
			if i == 0 {
				first.wait(ctx, key)
			}
			r.end = time.Now()
			h.client.Close() // the holder dies with its connection
			h.client = nil
			h.reqs = append(h.reqs, r)
			return
		}
		pause(ctx, hold)
		if i == 0 {
			first.wait(ctx, key)
		}
		r.end = time.Now()
		if r.fault != faultLose {
			if err := h.sem.Release(ctx, key, s); err != nil {
				failed(err)
			} else {
				r.released = time.Now()
			}
			if r.fault == faultRetry {
				if err := h.sem.Release(ctx, key, s); err != nil {
					failed(err)
				}
			}
		}
		h.reqs = append(h.reqs, r)
	}
}

// firstRound, which tests set, holds each admitted request of a trial's
// first round in its slot until every goroutine's first acquire has
// replied: every holder of the first round then holds at the same instant,
// whatever the scheduling.
type firstRound struct {
	n     int
	mu    sync.Mutex
	byKey map[string]*roundTally
}

// roundTally counts one trial's first replies; all closes at n.
type roundTally struct {
	replied int
	all     chan struct{}
}

func (f *firstRound) tally(key string) *roundTally {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.byKey == nil {
		f.byKey = map[string]*roundTally{}
	}
	t := f.byKey[key]
	if t == nil {
		t = &roundTally{all: make(chan struct{})}
		f.byKey[key] = t
	}
	return t
}

// replied counts a goroutine's first reply at key.
func (f *firstRound) replied(key string) {
	if f == nil {
		return
	}
	t := f.tally(key)
	f.mu.Lock()
	defer f.mu.Unlock()
	t.replied++
	if t.replied == f.n {
		close(t.all)
	}
}

// wait returns once every goroutine's first acquire at key has replied,
// or ctx ends.
func (f *firstRound) wait(ctx context.Context, key string) {
	if f == nil {
		return
	}
	select {
	case <-f.tally(key).all:
	case <-ctx.Done():
	}
}

// pause waits d, or until ctx ends.
func pause(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}
