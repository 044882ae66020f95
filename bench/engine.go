package bench

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"math"
	"net"
	"net/http"
	"net/netip"
	"os"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/ratelab/ratelab/audit"
)

// plan is what every connection of a run shares, read-only once built.
type plan struct {
	start   time.Time     // when the run began, warm-up included
	warmup  time.Duration // the measured run begins at start + warmup
	end     time.Duration // no request is sent at or after start + end; 0: no end
	timeout time.Duration
	// shard of shards: this run sends the requests whose index is
	// ≡ shard (mod shards) of the whole schedule.
	shard, shards   int64
	sharedConsumers bool
	// slack is how much sooner than timeout a request may be cut: 1% of
	// it, at most 10 ms, so that a connection's deadline moves at most
	// once per slack rather than once per request.
	slack time.Duration
	conns int
	// open is the open model: request i is due at start + i × every.
	open  bool
	every float64 // ns between requests, over all connections
	// firstMeasured is the open model's first request due after the
	// warm-up; requests bounds the measured requests (0: no bound).
	firstMeasured int64
	requests      int64
	consumers     int
	audit         bool
	keepResponses bool // KeepResponses
	sampleCap     int  // samples (and responses) one connection keeps
	tally         *tally
	// wire makes a connection's transport.
	wire func() wire
	// What HTTP's wire reads: the requests, HEAD (responses have no
	// body), the address, each consumer's source address (nil: any) and
	// TLS.
	req     *mix
	head    bool
	addr    string
	sources []netip.Addr
	tls     *tls.Config
	// identities name the consumers when no request does (bench rls's
	// Identities); nil for consumer-N.
	identities []string
	// sets spreads bench rls's descriptor sets by their weights, as a
	// mix's schedule spreads its routes; nil for one set.
	sets []uint16
	// pseudonyms name the consumers in place of their identities, when
	// the result may not show them (pseudonyms.go); nil otherwise.
	pseudonyms []string
	// names are the audit's limits by the names a response may give them.
	names map[string]int16
	// probes is when the Retry-After probes will be over (Unix ns), while
	// they run; 0 otherwise.
	probes atomic.Int64
	// wholeAfter says a denied consumer is surely admitted only once every
	// limit its request met is whole again (a sample's reset), not at its
	// Retry-After alone: a rate limit service's duration_until_reset.
	wholeAfter bool
}

// probesUntil is when the probes will be over; zero when none run.
func (p *plan) probesUntil() time.Time {
	if n := p.probes.Load(); n != 0 {
		return time.Unix(0, n)
	}
	return time.Time{}
}

// consumer is the consumer of this shard's j-th request; -1 for none.
// One shard sends consumer j mod K; a shard of several, the consumers whose
// index is ≡ shard (mod shards) in turn, or with sharedConsumers every one,
// from its own offset.
func (p *plan) consumer(j int64) int {
	k := int64(p.consumers)
	switch {
	case k == 0:
		return -1
	case p.shards == 1:
		return int(j % k)
	case p.sharedConsumers:
		return int((p.shard + j) % k)
	}
	return int(p.shard + p.shards*(j%int64(p.ownConsumers())))
}

// ownConsumers is how many consumers this shard sends: every one, unless
// it is one of several shards that do not share them, when it sends those
// whose index is ≡ shard (mod shards). consumer(j) for j below it are
// those, each once.
func (p *plan) ownConsumers() int {
	k := int64(p.consumers)
	if p.shards == 1 || p.sharedConsumers {
		return int(k)
	}
	return int((k - p.shard + p.shards - 1) / p.shards)
}

// due is when request i should be sent, since start.
func (p *plan) due(i int64) time.Duration { return time.Duration(float64(i) * p.every) }

// conn is one connection's loop: it sends a request, waits for its answer,
// and sends the next when it is due (open model) or at once (closed). It
// owns the schedule, the measurements and the samples; its wire talks to
// the target. Only its own goroutine touches it, but for the wire's
// cancel, which the cancel hook calls.
type conn struct {
	p  *plan
	id int
	w  wire

	timer  *time.Timer
	batch  []event
	bytes  int64
	unsent int64
	first  [numKinds]string // the first message of each error kind
	// rec keeps the samples, for the audit.
	rec audit.Record
	// responses are kept with KeepResponses.
	responses []Response
	// cappedAt is when this connection stopped keeping samples, since the
	// measured run began; -1 while it keeps them.
	cappedAt time.Duration
	// warmUntil is when its last warm-up request ended, since the measured
	// run began (0 when that was before it began).
	warmUntil time.Duration
}

// wire is a connection's transport: it sends one request and reads its
// answer, opening the connection when it needs one. HTTP/1.1 (httpWire)
// and gRPC (rlsWire) are the two.
type wire interface {
	// exchange sends consumer's request to route, sent at sentAt and cut
	// at sentAt plus the run's timeout, and reads the answer: its status
	// (for gRPC, as sample statuses read it) and the bytes of its body.
	exchange(ctx context.Context, sentAt time.Time, consumer, route int) (status int, body int64, err error)
	// record keeps s, the request of the last exchange, in rec with what
	// its answer said (its status, and what it advertised).
	record(rec *audit.Record, s audit.Sample)
	// limited says the last answer carried rate-limit fields: the limiter
	// decided it.
	limited() bool
	// cancel unblocks an exchange in progress, and every later one: the
	// run is cancelled.
	cancel()
	// hangUp drops the connection; the next exchange opens a new one.
	hangUp()
	// source is the address, without its port, that the connection was
	// first opened from; "" when not known.
	source() string
}

func newConn(p *plan, id int) *conn {
	return &conn{p: p, id: id, w: p.wire(), batch: make([]event, 0, batchSize), cappedAt: -1}
}

// cancel unblocks the connection's exchange when the run is cancelled.
func (c *conn) cancel() { c.w.cancel() }

// hangUp drops the connection; the next request opens a new one.
func (c *conn) hangUp() { c.w.hangUp() }

// run sends until the run's bound, ctx's end, or this connection's share of
// --requests is done.
func (c *conn) run(ctx context.Context) {
	p := c.p
	stop := context.AfterFunc(ctx, c.cancel)
	defer stop()
	defer c.hangUp()
	defer c.flush()
	// The closed model's share of --requests.
	share := int64(-1)
	if !p.open && p.requests > 0 {
		share = p.requests / int64(p.conns)
		if int64(c.id) < p.requests%int64(p.conns) {
			share++
		}
	}
	var measured int64
	for k := int64(0); ; k++ {
		j := int64(c.id) + k*int64(p.conns) // this shard's sequence number
		i := p.shard + p.shards*j           // the whole run's
		var due time.Duration
		if p.open {
			due = p.due(i)
			if (p.end > 0 && due >= p.end) || (p.requests > 0 && i >= p.firstMeasured+p.requests) {
				return
			}
			if wait := due - time.Since(p.start); wait > 0 && !c.sleep(ctx, wait) {
				c.countUnsent(i, time.Since(p.start))
				return
			}
		} else if share >= 0 && measured >= share {
			return
		}
		sentAt := time.Now()
		sent := sentAt.Sub(p.start)
		if ctx.Err() != nil || (p.end > 0 && sent >= p.end) {
			if p.open {
				c.countUnsent(i, sent)
			}
			return
		}
		if !p.open {
			due = sent
		}
		warm := due < p.warmup
		if p.open {
			warm = i < p.firstMeasured
		}
		if !warm {
			measured++
		}
		consumer := p.consumer(j)
		route := p.route(j, consumer)
		status, body, err := c.w.exchange(ctx, sentAt, consumer, route)
		doneAt := time.Now()
		if err != nil && ctx.Err() != nil {
			return // cut short by the cancel, not by the server
		}
		e := event{done: doneAt.Sub(p.start) - p.warmup, latency: (doneAt.Sub(p.start) - due).Microseconds(),
			lag: (sent - due).Microseconds(), warm: warm}
		if p.keepResponses && !warm && len(c.responses) < p.sampleCap {
			c.responses = append(c.responses, c.response(consumer, due, sentAt, doneAt, status, err))
		}
		if err != nil {
			e.kind = classify(err)
			if c.first[e.kind] == "" {
				c.first[e.kind] = err.Error()
			}
			c.hangUp()
			if p.audit && !warm { // it may have been admitted: the audit weighs it
				c.keepSample(consumer, route, sent-p.warmup, e.done, false)
			}
		} else {
			e.status = int32(status)
			c.bytes += body
			if p.audit && !warm {
				c.keepSample(consumer, route, sent-p.warmup, e.done, true)
			}
		}
		if warm {
			c.warmUntil = max(c.warmUntil, e.done)
		}
		c.record(e)
	}
}

// sleep waits d, and reports false when ctx ended first.
func (c *conn) sleep(ctx context.Context, d time.Duration) bool {
	if c.timer == nil {
		c.timer = time.NewTimer(d)
	} else {
		c.timer.Reset(d)
	}
	select {
	case <-c.timer.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// countUnsent counts this connection's measured requests, from i on, that
// were due before now but were never sent: the run ended or was cancelled
// while the connection was still busy with earlier ones.
func (c *conn) countUnsent(i int64, now time.Duration) {
	p := c.p
	if p.end > 0 {
		now = min(now, p.end)
	}
	hi := int64(math.Ceil(float64(now) / p.every)) // requests before hi were due
	if p.requests > 0 {
		hi = min(hi, p.firstMeasured+p.requests)
	}
	lo := max(i, p.firstMeasured)
	c.unsent += congruent(lo, hi, p.shard+p.shards*int64(c.id), p.shards*int64(p.conns))
}

// congruent counts the j in [lo, hi) with j ≡ r (mod m).
func congruent(lo, hi, r, m int64) int64 {
	if hi <= lo {
		return 0
	}
	first := lo + ((r-lo)%m+m)%m
	if first >= hi {
		return 0
	}
	return (hi-1-first)/m + 1
}

func (c *conn) record(e event) {
	c.batch = append(c.batch, e)
	if len(c.batch) == batchSize || e.done-c.batch[0].done > batchAge {
		c.flush()
	}
}

func (c *conn) flush() {
	if len(c.batch) > 0 {
		c.p.tally.add(c.batch)
		c.batch = c.batch[:0]
	}
}

// keepSample keeps the request as a sample for the audit, the answer its
// wire read when answered, a transport error when not, up to the
// connection's share of the samples; past it, it notes from when samples
// are missing.
func (c *conn) keepSample(consumer, route int, sent, done time.Duration, answered bool) {
	consumer = max(consumer, 0) // one anonymous client: the audit's consumer 0
	if len(c.rec.Samples) >= c.p.sampleCap {
		if c.cappedAt < 0 {
			c.cappedAt = sent
		}
		return
	}
	s := audit.NewSample(consumer, sent, done, 0)
	s.Route = uint16(route)
	if !answered {
		c.rec.Add(s)
		return
	}
	c.w.record(&c.rec, s)
}

// response makes the Response of one request, with what its wire read.
func (c *conn) response(consumer int, due time.Duration, sent, done time.Time, status int, err error) Response {
	r := Response{Consumer: consumer, Due: c.p.start.Add(due), Sent: sent, Done: done}
	if err != nil {
		r.Error = kindNames[classify(err)]
		return r
	}
	r.Status, r.Limited = status, c.w.limited()
	return r
}

// Response is one measured request as KeepResponses keeps it.
type Response struct {
	// Consumer is the consumer's number (consumer-N); -1 for none.
	Consumer int
	// Due, Sent and Done are when the request was due (the open model's
	// schedule; Sent in the closed model), sent, and answered or failed.
	Due, Sent, Done time.Time
	// Status is the response's status; 0 for a transport error.
	Status int
	// Error is the kind of transport error (refused, reset, timeout, tls,
	// protocol, other); empty for a response.
	Error string
	// Limited is set when the response carried rate-limit fields
	// (RateLimit-Policy, RateLimit, RateLimit-Limit/-Remaining, or their
	// X-RateLimit- forms): the limiter decided it.
	Limited bool
}

// classify names the kind of a transport error.
func classify(err error) errKind {
	if k, ok := kindOf(err); ok {
		return k
	}
	var pe *protocolError
	var te *tlsError
	var ce *tls.CertificateVerificationError
	var ue x509.UnknownAuthorityError
	var he x509.HostnameError
	var rh tls.RecordHeaderError
	var ne net.Error
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return kindRefused
	case errors.As(err, &te), errors.As(err, &ce), errors.As(err, &ue), errors.As(err, &he), errors.As(err, &rh):
		return kindTLS
	case errors.Is(err, os.ErrDeadlineExceeded), errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return kindTimeout
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE), errors.Is(err, io.EOF),
		errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, net.ErrClosed):
		return kindReset
	case errors.As(err, &pe):
		return kindProtocol
	}
	return kindOther
}

// newPlan builds what the connections share, from a validated cfg with
// its defaults.
func newPlan(cfg HTTPConfig, t *tally) (*plan, error) {
	req, u, err := newMix(cfg)
	if err != nil {
		return nil, err
	}
	p := newSchedule(cfg.load(), t, cfg.auditing())
	p.wire = func() wire { return &httpWire{p: p} }
	p.req, p.head, p.addr, p.sources = req, cfg.Method == http.MethodHead, u.Host, cfg.SourceIPs
	if u.Port() == "" {
		p.addr = net.JoinHostPort(u.Hostname(), map[string]string{"http": "80", "https": "443"}[u.Scheme])
	}
	if u.Scheme == "https" {
		p.tls = &tls.Config{ServerName: u.Hostname(), InsecureSkipVerify: cfg.Insecure, NextProtos: []string{"http/1.1"}} //nolint:gosec // --insecure is the user's choice, for test gateways
	}
	p.names = audit.Names(cfg.expectations())
	return p, nil
}
