package limiter

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratelab/ratelab/internal/plural"
)

// errorKind names what a failed Redis call ran into: one of the
// RedisError constants.
func errorKind(err error) string {
	var rerr redis.Error
	var op *net.OpError
	switch {
	case isTimeout(err):
		return RedisErrorTimeout
	case errors.As(err, &rerr) && strings.HasPrefix(rerr.Error(), "OOM"):
		return RedisErrorOOM
	case errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE),
		errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, net.ErrClosed), errors.As(err, &op):
		return RedisErrorUnreachable
	}
	return RedisErrorOther
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout())
}

// causes say, in the 503 body, the log and /healthz, what each kind of
// failure means.
var causes = map[string]string{
	RedisErrorTimeout:     "the rate limiter's store did not answer in time",
	RedisErrorOOM:         "the rate limiter's store is full: Redis refused the decision (OOM, maxmemory reached)",
	RedisErrorUnreachable: "the rate limiter cannot reach its store",
	RedisErrorOther:       "the rate limiter's store answered with an error",
}

// failure is the state of Redis as the middleware last saw it.
type failure struct {
	kind  string
	since time.Time
}

// logEvery bounds the failure lines: at most one per kind per interval.
const logEvery = 10 * time.Second

// probeEvery is how often an open circuit asks Redis whether it answers.
const probeEvery = 100 * time.Millisecond

// health tracks whether Redis answers, opens the circuit after
// consecutive failures, probes Redis in the background while it is open,
// and writes rate-limited lines about it.
type health struct {
	log       io.Writer
	name      string // starts every line
	threshold int    // consecutive failures that open the circuit; 0: never
	probe     func(ctx context.Context) error
	timeout   time.Duration
	metrics   *Metrics

	consecutive atomic.Int64
	open        atomic.Bool
	failing     atomic.Pointer[failure]

	mu     sync.Mutex
	logged map[string]time.Time // kind -> when its last line was written
	quiet  map[string]int64     // kind -> failures since then, not written
	failed int64                // failures since Redis last answered

	// ctx ends when the middleware is closed; it bounds the prober's calls.
	ctx     context.Context
	stop    context.CancelFunc
	stopped bool // under mu: no prober starts any more
	probing sync.WaitGroup
}

func newHealth(log io.Writer, name string, threshold int, timeout time.Duration, m *Metrics, probe func(ctx context.Context) error) *health {
	ctx, stop := context.WithCancel(context.Background())
	return &health{log: log, name: name, threshold: threshold, timeout: timeout, metrics: m, probe: probe,
		logged: map[string]time.Time{}, quiet: map[string]int64{}, ctx: ctx, stop: stop}
}

// circuitOpen reports whether decisions skip Redis for now, and why.
func (h *health) circuitOpen() (string, bool) {
	if !h.open.Load() {
		return "", false
	}
	if f := h.failing.Load(); f != nil {
		return f.kind, true
	}
	return RedisErrorOther, true
}

// failedWith records a failed call of kind, and opens the circuit after
// threshold of them in a row.
func (h *health) failedWith(kind string, err error) {
	now := time.Now()
	if f := h.failing.Load(); f == nil || f.kind != kind {
		since := now
		if f != nil {
			since = f.since
		}
		h.failing.Store(&failure{kind: kind, since: since})
		h.metrics.setRedisUp(false)
	}
	h.note(kind, err, now)
	n := h.consecutive.Add(1)
	if h.threshold <= 0 || n < int64(h.threshold) || h.open.Load() {
		return
	}
	// The circuit opens only with a prober to close it again: never once
	// the middleware is closed.
	h.mu.Lock()
	opened := !h.stopped && h.open.CompareAndSwap(false, true)
	if opened {
		h.probing.Add(1)
		go h.probeUntilAnswered()
	}
	h.mu.Unlock()
	if opened {
		h.metrics.setCircuitOpen(true)
		h.line("circuit open after %s in a row: decisions skip Redis, which is asked every %s", plural.Count(n, "failure"), probeEvery)
	}
}

// answered records a call Redis answered.
func (h *health) answered() {
	h.consecutive.Store(0)
	if f := h.failing.Swap(nil); f != nil {
		h.metrics.setRedisUp(true)
		h.mu.Lock()
		n := h.failed
		h.failed = 0
		clear(h.quiet)
		clear(h.logged)
		h.mu.Unlock()
		h.line("redis answers again after %s (%d failed decisions)", time.Since(f.since).Round(time.Millisecond), n)
	}
}

// note writes a line about a failure of kind, at most one per kind per
// logEvery, with the count of those it did not write.
func (h *health) note(kind string, err error, now time.Time) {
	h.mu.Lock()
	h.failed++
	last, seen := h.logged[kind]
	if seen && now.Sub(last) < logEvery {
		h.quiet[kind]++
		h.mu.Unlock()
		return
	}
	quiet := h.quiet[kind]
	h.logged[kind], h.quiet[kind] = now, 0
	h.mu.Unlock()
	more := ""
	if quiet > 0 {
		more = fmt.Sprintf(" (and %d more in the last %s)", quiet, now.Sub(last).Round(time.Second))
	}
	h.line("redis %s: %s: %v%s", kind, causes[kind], err, more)
}

func (h *health) line(format string, a ...any) {
	if h.log != nil {
		fmt.Fprintf(h.log, h.name+": "+format+"\n", a...)
	}
}

// probeUntilAnswered asks Redis every probeEvery until it answers, then
// closes the circuit; it returns early when the middleware is closed.
func (h *health) probeUntilAnswered() {
	defer h.probing.Done()
	t := time.NewTicker(probeEvery)
	defer t.Stop()
	for {
		select {
		case <-h.ctx.Done():
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(h.ctx, h.timeout)
		err := h.probe(ctx)
		cancel()
		switch {
		case h.ctx.Err() != nil:
			return // closed while asking: not Redis's failure
		case err == nil:
			h.closeCircuit()
			h.answered()
			return
		}
		h.failedWith(errorKind(err), err)
	}
}

func (h *health) closeCircuit() {
	if h.open.CompareAndSwap(true, false) {
		h.metrics.setCircuitOpen(false)
	}
}

// close stops the prober and waits for it (for a call in flight, at most
// the timeout), then closes the circuit for good: with no prober, every
// decision asks Redis again.
func (h *health) close() {
	h.mu.Lock()
	h.stopped = true
	h.mu.Unlock()
	h.stop()
	h.probing.Wait()
	h.closeCircuit()
}

// ReportHealth answers a health check: see health.report.
func (l *Limiter) ReportHealth(w http.ResponseWriter) { l.health.report(w, l.cfg.OnError) }

// report answers /healthz: 200 and "ok" while Redis answers; while it
// fails, still 200 (the gateway serves, in its fail mode, and every
// gateway sharing the Redis fails alike: a balancer that took them out
// would take the service down), with a line saying since when, why, what
// the gateway does meanwhile, and whether the circuit is open.
func (h *health) report(w http.ResponseWriter, mode OnError) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	f := h.failing.Load()
	if f == nil {
		_, _ = io.WriteString(w, "ok\n")
		return
	}
	circuit := "circuit closed"
	if h.open.Load() {
		circuit = "circuit open, Redis asked every " + probeEvery.String()
	}
	fmt.Fprintf(w, "degraded: redis failing for %s (%s: %s); failing %s; %s\n",
		time.Since(f.since).Round(time.Millisecond), f.kind, causes[f.kind], mode, circuit)
}
