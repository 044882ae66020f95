package bench

import (
	"bufio"
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
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
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
	req           *mix
	// names are the audit's limits by the names a response may give them.
	names         map[string]int16
	head          bool // HEAD: responses have no body
	audit         bool
	keepResponses bool // KeepResponses
	sampleCap     int  // samples (and responses) one connection keeps
	addr          string
	sources       []netip.Addr // consumer i's connections are sent from sources[i]; nil: any address
	tls           *tls.Config
	tally         *tally
	// probes is when the Retry-After probes will be over (Unix ns), while
	// they run; 0 otherwise.
	probes atomic.Int64
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

// conn is one connection's loop: it sends a request, reads the response,
// and sends the next when it is due (open model) or at once (closed). Only
// its own goroutine touches it, but for nc, which the cancel hook reads.
type conn struct {
	p  *plan
	id int

	mu        sync.Mutex // guards nc and cancelled against the cancel hook
	nc        net.Conn
	cancelled bool
	deadline  time.Time // nc's deadline
	from      int       // with sources, the consumer whose address nc is sent from

	br      *bufio.Reader
	buf     []byte
	resp    response
	timer   *time.Timer
	batch   []event
	bytes   int64
	unsent  int64
	first   [numKinds]string // the first message of each error kind
	samples []sample
	advs    []advert // the samples' adverts
	// source is the address the connection was first opened from.
	source string
	// responses are kept with KeepResponses.
	responses []Response
	// cappedAt is when this connection stopped keeping samples, since the
	// measured run began; -1 while it keeps them.
	cappedAt time.Duration
	// warmUntil is when its last warm-up request ended, since the measured
	// run began (0 when that was before it began).
	warmUntil time.Duration
}

func newConn(p *plan, id int) *conn {
	return &conn{p: p, id: id, batch: make([]event, 0, batchSize), cappedAt: -1}
}

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
		route := p.req.route(j, consumer, p.ownConsumers())
		err := c.roundTrip(ctx, sentAt, consumer, route)
		doneAt := time.Now()
		if err != nil && ctx.Err() != nil {
			return // cut short by the cancel, not by the server
		}
		e := event{done: doneAt.Sub(p.start) - p.warmup, latency: (doneAt.Sub(p.start) - due).Microseconds(),
			lag: (sent - due).Microseconds(), warm: warm}
		if p.keepResponses && !warm && len(c.responses) < p.sampleCap {
			c.responses = append(c.responses, c.response(consumer, due, sentAt, doneAt, err))
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
			e.status = int32(c.resp.status)
			c.bytes += c.resp.body
			if c.resp.close {
				c.hangUp()
			}
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

// roundTrip sends one request, of consumer to route, on the connection,
// opening it first when needed, and reads the response into c.resp.
func (c *conn) roundTrip(ctx context.Context, sentAt time.Time, consumer, route int) error {
	p := c.p
	deadline := sentAt.Add(p.timeout)
	if c.nc != nil && p.sources != nil && c.from != consumer {
		c.hangUp() // sent from another consumer's address
	}
	if c.nc == nil {
		if err := c.dial(ctx, deadline, consumer); err != nil {
			return err
		}
	}
	// Moving a deadline costs a timer update: move it only when it would
	// cut this request more than the slack short of its timeout.
	if c.deadline.Before(deadline.Add(-p.slack)) {
		if err := c.nc.SetDeadline(deadline); err != nil {
			return err
		}
		c.deadline = deadline
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	r := p.req.request(route, consumer)
	req := r.render(&c.buf, consumer)
	var err error
	if r.body != nil {
		bufs := net.Buffers{req, r.body}
		_, err = bufs.WriteTo(c.nc)
	} else {
		_, err = c.nc.Write(req)
	}
	if err != nil {
		return err
	}
	// Let the goroutines whose responses are in run first: by the time
	// this one reads, its own is more often there, and the read that would
	// only have found nothing (and a trip through the poller) is saved.
	runtime.Gosched()
	return readResponse(c.br, p.head, p.audit || p.keepResponses, &c.resp)
}

// dial opens the connection for consumer, from its source address when
// it has one, with TLS for https.
func (c *conn) dial(ctx context.Context, deadline time.Time, consumer int) error {
	p := c.p
	d := net.Dialer{Deadline: deadline, LocalAddr: p.localAddr(consumer)}
	c.from = consumer
	nc, err := d.DialContext(ctx, "tcp", p.addr)
	if err != nil {
		return err
	}
	if p.tls != nil {
		tc := tls.Client(nc, p.tls)
		_ = tc.SetDeadline(deadline)
		if err := tc.HandshakeContext(ctx); err != nil {
			nc.Close()
			return &tlsError{err}
		}
		nc = tc
	}
	if c.br == nil {
		c.br = bufio.NewReaderSize(nc, 8<<10)
	} else {
		c.br.Reset(nc)
	}
	c.deadline = time.Time{}
	if c.source == "" {
		c.source = localAddress(nc)
	}
	c.mu.Lock()
	c.nc = nc
	if c.cancelled {
		_ = nc.SetDeadline(time.Unix(1, 0))
	}
	c.mu.Unlock()
	return nil
}

// cancel unblocks the connection's read or write when the run is cancelled.
func (c *conn) cancel() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.cancelled = true
	if c.nc != nil {
		_ = c.nc.SetDeadline(time.Unix(1, 0))
	}
}

// hangUp closes the connection; the next request opens a new one.
func (c *conn) hangUp() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.nc != nil {
		c.nc.Close()
		c.nc = nil
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

// keepSample keeps the request as a sample for the audit, the response in
// c.resp when answered, a transport error when not, up to the
// connection's share of the samples; past it, it notes from when samples
// are missing.
func (c *conn) keepSample(consumer, route int, sent, done time.Duration, answered bool) {
	consumer = max(consumer, 0) // one anonymous client: the audit's consumer 0
	if len(c.samples) >= c.p.sampleCap {
		if c.cappedAt < 0 {
			c.cappedAt = sent
		}
		return
	}
	if !answered {
		s := newSample(consumer, sent, done, 0, &limitFields{})
		s.route = uint16(route)
		c.samples = append(c.samples, s)
		return
	}
	s := newSample(consumer, sent, done, c.resp.status, &c.resp.limits)
	s.route = uint16(route)
	at := len(c.advs)
	c.advs = parseAdverts(c.advs, &c.resp.limits, c.p.names)
	s.advAt, s.advN = uint32(at), uint8(len(c.advs)-at)
	c.samples = append(c.samples, s)
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

// response makes the Response of one request, with what c.resp read.
func (c *conn) response(consumer int, due time.Duration, sent, done time.Time, err error) Response {
	r := Response{Consumer: consumer, Due: c.p.start.Add(due), Sent: sent, Done: done}
	if err != nil {
		r.Error = kindNames[classify(err)]
		return r
	}
	f := &c.resp.limits
	r.Status = c.resp.status
	r.Limited = f.policy != "" || f.rateLimit != "" || f.limit != "" || f.remaining != "" || f.xLimit != "" || f.xRemaining != ""
	return r
}

// tlsError marks a failed TLS handshake.
type tlsError struct{ err error }

func (e *tlsError) Error() string { return "tls: " + e.err.Error() }
func (e *tlsError) Unwrap() error { return e.err }

// classify names the kind of a transport error.
func classify(err error) errKind {
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

// newPlan builds what the connections share, from a validated cfg.
func newPlan(cfg HTTPConfig, t *tally) (*plan, error) {
	req, u, err := newMix(cfg)
	if err != nil {
		return nil, err
	}
	p := &plan{
		warmup:          cfg.Warmup,
		timeout:         cfg.Timeout,
		shard:           int64(cfg.Shard),
		shards:          int64(cfg.Shards),
		sharedConsumers: cfg.SharedConsumers,
		slack:           min(cfg.Timeout/100, 10*time.Millisecond),
		conns:           cfg.Connections,
		open:            cfg.Rate > 0,
		requests:        cfg.Requests,
		consumers:       cfg.Consumers,
		req:             req,
		head:            cfg.Method == http.MethodHead,
		audit:           cfg.auditing(),
		keepResponses:   cfg.KeepResponses,
		addr:            u.Host,
		sources:         cfg.SourceIPs,
		tally:           t,
	}
	if u.Port() == "" {
		p.addr = net.JoinHostPort(u.Hostname(), map[string]string{"http": "80", "https": "443"}[u.Scheme])
	}
	if u.Scheme == "https" {
		p.tls = &tls.Config{ServerName: u.Hostname(), InsecureSkipVerify: cfg.Insecure, NextProtos: []string{"http/1.1"}} //nolint:gosec // --insecure is the user's choice, for test gateways
	}
	if cfg.Duration > 0 {
		p.end = cfg.Warmup + cfg.Duration
	}
	if p.open {
		p.every = float64(time.Second) / cfg.Rate
		p.firstMeasured = int64(math.Ceil(float64(cfg.Warmup) / p.every))
	}
	p.sampleCap = max(maxSamples/cfg.Connections, 1)
	p.names = map[string]int16{}
	for k, exp := range cfg.expectations() {
		for _, name := range exp.names {
			p.names[name] = int16(k)
		}
	}
	return p, nil
}
