package bench

import (
	"bufio"
	"context"
	"crypto/tls"
	"net"
	"runtime"
	"sync"
	"time"

	"github.com/ratelab/ratelab/audit"
)

// httpWire is a connection's HTTP/1.1: it renders each request's bytes,
// writes them, and reads only the response fields it needs.
type httpWire struct {
	p *plan

	mu        sync.Mutex // guards nc and cancelled against the cancel hook
	nc        net.Conn
	cancelled bool
	deadline  time.Time // nc's deadline
	from      int       // with sources, the consumer whose address nc is sent from
	// from0 is the address the connection was first opened from.
	from0 string

	br   *bufio.Reader
	buf  []byte
	resp response
}

var _ wire = (*httpWire)(nil)

// exchange sends one request and reads its response; one that closes the
// connection hangs it up.
func (c *httpWire) exchange(ctx context.Context, sentAt time.Time, consumer, route int) (int, int64, error) {
	if err := c.roundTrip(ctx, sentAt, consumer, route); err != nil {
		return 0, 0, err
	}
	if c.resp.close {
		c.hangUp()
	}
	return c.resp.status, c.resp.body, nil
}

// record keeps s with the status of the last response, what its
// rate-limit fields advertised, and the policies a 429's problem body
// named as violated.
func (c *httpWire) record(rec *audit.Record, s audit.Sample) {
	s.Status = int16(c.resp.status)
	var problem []byte
	if c.resp.problem {
		problem = c.resp.kept
	}
	rec.AddResponse(s, &c.resp.limits, problem, c.p.names)
}

// limited says the last response carried rate-limit fields
// (RateLimit-Policy, RateLimit, RateLimit-Limit/-Remaining, or their
// X-RateLimit- forms).
func (c *httpWire) limited() bool { return c.resp.limits.Advertised() }

func (c *httpWire) source() string { return c.from0 }

// roundTrip sends one request, of consumer to route, on the connection,
// opening it first when needed, and reads the response into c.resp.
func (c *httpWire) roundTrip(ctx context.Context, sentAt time.Time, consumer, route int) error {
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
func (c *httpWire) dial(ctx context.Context, deadline time.Time, consumer int) error {
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
	if c.from0 == "" {
		c.from0 = localAddress(nc)
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
func (c *httpWire) cancel() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.cancelled = true
	if c.nc != nil {
		_ = c.nc.SetDeadline(time.Unix(1, 0))
	}
}

// hangUp closes the connection; the next request opens a new one.
func (c *httpWire) hangUp() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.nc != nil {
		c.nc.Close()
		c.nc = nil
	}
}

// tlsError marks a failed TLS handshake.
type tlsError struct{ err error }

func (e *tlsError) Error() string { return "tls: " + e.err.Error() }
func (e *tlsError) Unwrap() error { return e.err }
