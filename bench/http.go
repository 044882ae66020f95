// Package bench generates load against a live HTTP endpoint and records
// what came back: latency from when each request should have been sent (an
// open model, as giltene/wrk2 does, so stalls are not hidden), or back to
// back from a fixed number of workers (a closed model), into HDR histograms
// per worker, merged at the end. It returns plain results and never prints.
package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// HTTPConfig is one load run.
type HTTPConfig struct {
	// Target is the URL requested.
	Target string
	// Method is the HTTP method; GET by default.
	Method string
	// Header is sent with every request.
	Header http.Header
	// Body is sent with every request.
	Body []byte
	// Rate is the requests per second of the open model, in total; 0 runs
	// the closed model.
	Rate float64
	// Connections is the closed model's number of workers, each with its own
	// keep-alive connection; 10 by default.
	Connections int
	// MaxInFlight bounds the open model's requests in flight; 1,000 by default.
	MaxInFlight int
	// Duration bounds the run (after Warmup); Requests bounds it by count.
	// At least one is set.
	Duration time.Duration
	Requests int64
	// Warmup runs before the measured part; its responses are counted apart.
	Warmup time.Duration
	// Consumers spreads requests over this many identities, sent in
	// ConsumerHeader as consumer-0 … consumer-K-1; none when 0.
	Consumers      int
	ConsumerHeader string
	// Timeout bounds one request; 10s by default.
	Timeout time.Duration
	// ExpectLimit and ExpectWindow, when set, audit the endpoint: no
	// consumer may get more than ExpectLimit successes in any ExpectWindow.
	ExpectLimit  int64
	ExpectWindow time.Duration
	// NoProbes skips the audit's Retry-After probes (they can take up to a
	// Retry-After plus 10 seconds after the run).
	NoProbes bool
	// Progress, when set, is called about once a second during the run.
	Progress func(Progress)
}

// Progress is the state of a run, for a live line.
type Progress struct {
	Elapsed time.Duration
	// Sent counts requests sent so far, warm-up included.
	Sent int64
	// RatePerSec is the completions per second over the last interval.
	RatePerSec float64
	// P99Micros is the p99 latency over the last interval, in µs.
	P99Micros int64
	// LimitedShare is the share of 429s over the last interval.
	LimitedShare float64
}

// live keeps the last interval's figures for Progress.
type live struct {
	mu      sync.Mutex
	hist    *hdrhistogram.Histogram
	limited int64
	sent    atomic.Int64
}

func (l *live) record(lat int64, status int) {
	l.mu.Lock()
	_ = l.hist.RecordValue(lat)
	if status == http.StatusTooManyRequests {
		l.limited++
	}
	l.mu.Unlock()
}

// report hands the interval's figures to fn and starts a new interval.
func (l *live) report(fn func(Progress), began time.Time, since time.Duration) {
	l.mu.Lock()
	n := l.hist.TotalCount()
	p := Progress{Elapsed: time.Since(began), Sent: l.sent.Load(), P99Micros: l.hist.ValueAtPercentile(99)}
	if since > 0 {
		p.RatePerSec = float64(n) / since.Seconds()
	}
	if n > 0 {
		p.LimitedShare = float64(l.limited) / float64(n)
	}
	l.hist.Reset()
	l.limited = 0
	l.mu.Unlock()
	fn(p)
}

// Limits keep every run bounded.
const (
	MaxDuration = 24 * time.Hour
	MaxRate     = 1_000_000
)

// Validate checks cfg before anything is sent. Errors name the flag.
func (c HTTPConfig) Validate() error {
	u, err := url.Parse(c.Target)
	switch {
	case err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "":
		return fmt.Errorf("target %q: want an http:// or https:// URL", c.Target)
	case c.Rate < 0 || c.Rate > MaxRate:
		return fmt.Errorf("--rate must be between 0 (closed model) and %d per second (got %g)", MaxRate, c.Rate)
	case c.Connections < 0 || c.Connections > 10_000:
		return fmt.Errorf("--connections must be between 1 and 10000 (got %d)", c.Connections)
	case c.MaxInFlight < 0 || c.MaxInFlight > 100_000:
		return fmt.Errorf("--max-in-flight must be between 1 and 100000 (got %d)", c.MaxInFlight)
	case c.Duration < 0 || c.Duration > MaxDuration:
		return fmt.Errorf("--duration must be between 0 and %s (got %s)", MaxDuration, c.Duration)
	case c.Requests < 0:
		return fmt.Errorf("--requests must not be negative (got %d)", c.Requests)
	case c.Duration == 0 && c.Requests == 0:
		return errors.New("--duration or --requests must bound the run")
	case c.Warmup < 0 || c.Warmup > time.Hour:
		return fmt.Errorf("--warmup must be between 0 and 1h (got %s)", c.Warmup)
	case c.Consumers < 0 || c.Consumers > 10_000_000:
		return fmt.Errorf("--consumers must be between 0 and 10000000 (got %d)", c.Consumers)
	case c.Consumers > 0 && c.ConsumerHeader == "":
		return errors.New("--consumers needs --consumer-header")
	case c.Timeout < 0:
		return fmt.Errorf("--timeout must be positive (got %s)", c.Timeout)
	case c.ExpectLimit < 0 || (c.ExpectLimit > 0) != (c.ExpectWindow > 0):
		return fmt.Errorf("--expect-limit needs a positive limit and window (got %d per %s)", c.ExpectLimit, c.ExpectWindow)
	case c.ExpectLimit > 0 && c.Consumers == 0:
		return errors.New("--expect-limit audits per consumer: it needs --consumer-header")
	}
	return nil
}

func (c *HTTPConfig) defaults() {
	if c.Method == "" {
		c.Method = http.MethodGet
	}
	if c.Connections == 0 {
		c.Connections = 10
	}
	if c.MaxInFlight == 0 {
		c.MaxInFlight = 1000
	}
	if c.Timeout == 0 {
		c.Timeout = 10 * time.Second
	}
}

// Histogram range: 1 µs to 1 hour, three significant digits.
func newHist() *hdrhistogram.Histogram {
	return hdrhistogram.New(1, int64(time.Hour/time.Microsecond), 3)
}

// recorder is one worker's measurements.
type recorder struct {
	all, ok, limited, other, failed, lag *hdrhistogram.Histogram
	status                               map[int]int64
	errors                               int64
	bytes                                int64
	warmup                               int64
}

func newRecorder() *recorder {
	return &recorder{all: newHist(), ok: newHist(), limited: newHist(), other: newHist(), failed: newHist(),
		lag: newHist(), status: map[int]int64{}}
}

func (r *recorder) merge(o *recorder) {
	for _, p := range [][2]*hdrhistogram.Histogram{{r.all, o.all}, {r.ok, o.ok}, {r.limited, o.limited},
		{r.other, o.other}, {r.failed, o.failed}, {r.lag, o.lag}} {
		p[0].Merge(p[1])
	}
	for k, v := range o.status {
		r.status[k] += v
	}
	r.errors += o.errors
	r.bytes += o.bytes
	r.warmup += o.warmup
}

// RunHTTP runs the load and returns what it measured. Cancelling ctx stops
// the run early; what was measured so far is returned with ctx's error.
func RunHTTP(ctx context.Context, cfg HTTPConfig) (Result, error) {
	if err := cfg.Validate(); err != nil {
		return Result{}, err
	}
	cfg.defaults()
	workers := cfg.Connections
	if cfg.Rate > 0 {
		workers = cfg.MaxInFlight
	}
	client := &http.Client{
		Timeout: cfg.Timeout,
		Transport: &http.Transport{
			Proxy:               nil,
			DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
			MaxIdleConns:        workers,
			MaxIdleConnsPerHost: workers,
			IdleConnTimeout:     90 * time.Second,
		},
	}
	defer client.CloseIdleConnections()

	began := time.Now()
	measured := began.Add(cfg.Warmup)
	var end time.Time
	if cfg.Duration > 0 {
		end = measured.Add(cfg.Duration)
	}
	interval := time.Duration(0)
	if cfg.Rate > 0 {
		interval = time.Duration(float64(time.Second) / cfg.Rate)
	}
	var seq, issued atomic.Int64
	recs := make([]*recorder, workers)
	auditing := cfg.ExpectLimit > 0
	lv := &live{hist: newHist()}
	stopProgress := make(chan struct{})
	var progressDone sync.WaitGroup
	if cfg.Progress != nil {
		progressDone.Add(1)
		go func() {
			defer progressDone.Done()
			tick := time.NewTicker(time.Second)
			defer tick.Stop()
			last := time.Now()
			for {
				select {
				case <-stopProgress:
					return
				case now := <-tick.C:
					lv.report(cfg.Progress, began, now.Sub(last))
					last = now
				}
			}
		}()
	}
	var samplesMu sync.Mutex
	var samples []sample
	var wg sync.WaitGroup
	for w := range recs {
		recs[w] = newRecorder()
		wg.Add(1)
		go func() {
			defer wg.Done()
			rec := recs[w]
			for {
				i := seq.Add(1) - 1
				var intended time.Time
				if interval > 0 {
					intended = began.Add(time.Duration(i) * interval)
				} else {
					intended = time.Now()
				}
				if !end.IsZero() && !intended.Before(end) {
					return
				}
				// --requests counts measured requests only.
				if cfg.Requests > 0 && !intended.Before(measured) && issued.Add(1) > cfg.Requests {
					return
				}
				if d := time.Until(intended); d > 0 {
					select {
					case <-time.After(d):
					case <-ctx.Done():
						return
					}
				}
				if ctx.Err() != nil {
					return
				}
				consumer := -1
				if cfg.Consumers > 0 {
					consumer = int(i % int64(cfg.Consumers))
				}
				sent := time.Now()
				lv.sent.Add(1)
				status, header, n, err := do(ctx, client, cfg, consumer)
				done := time.Now()
				if cfg.Progress != nil {
					lv.record(max(done.Sub(intended).Microseconds(), 1), status)
				}
				if intended.Before(measured) { // a warm-up request, by when it was due
					rec.warmup++
					continue
				}
				lat := max(done.Sub(intended).Microseconds(), 1)
				_ = rec.lag.RecordValue(max(sent.Sub(intended).Microseconds(), 1))
				_ = rec.all.RecordValue(lat)
				rec.bytes += n
				switch {
				case err != nil:
					if ctx.Err() != nil {
						return
					}
					rec.errors++
					_ = rec.failed.RecordValue(lat)
				case status >= 200 && status < 300:
					rec.status[status]++
					_ = rec.ok.RecordValue(lat)
				case status == http.StatusTooManyRequests:
					rec.status[status]++
					_ = rec.limited.RecordValue(lat)
				default:
					rec.status[status]++
					_ = rec.other.RecordValue(lat)
				}
				if auditing && err == nil {
					s := readSample(consumer, sent.Sub(measured), done.Sub(measured), status, header)
					samplesMu.Lock()
					if len(samples) < maxSamples {
						samples = append(samples, s)
					}
					samplesMu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	close(stopProgress)
	progressDone.Wait()
	elapsed := time.Since(measured)
	total := newRecorder()
	for _, r := range recs {
		total.merge(r)
	}
	res := newResult(cfg, total, elapsed)
	if auditing {
		a := audit(samples, cfg.ExpectLimit, cfg.ExpectWindow, cfg.Consumers)
		if cfg.NoProbes {
			a.RetryAfter.Skipped = "probes turned off"
		} else if ctx.Err() == nil {
			probeRetryAfter(ctx, client, cfg, samples, measured, &a)
		}
		res.Audit = &a
	}
	if interval > 0 && !end.IsZero() {
		// Every request whose time came inside the run should have been sent.
		due := int64(cfg.Duration / interval)
		res.Unsent = max(due-res.Requests, 0)
	}
	return res, ctx.Err()
}

// do sends one request and drains the response.
func do(ctx context.Context, client *http.Client, cfg HTTPConfig, consumer int) (int, http.Header, int64, error) {
	var body io.Reader
	if len(cfg.Body) > 0 {
		body = bytes.NewReader(cfg.Body)
	}
	req, err := http.NewRequestWithContext(ctx, cfg.Method, cfg.Target, body)
	if err != nil {
		return 0, nil, 0, err
	}
	for k, v := range cfg.Header {
		req.Header[k] = v
	}
	if consumer >= 0 {
		req.Header.Set(cfg.ConsumerHeader, "consumer-"+strconv.Itoa(consumer))
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, nil, 0, err
	}
	n, err := io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, resp.Header, n, err
}
