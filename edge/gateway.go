package edge

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ratelab/ratelab/internal/plural"
	"github.com/ratelab/ratelab/limiter"
	"github.com/ratelab/ratelab/rules"
)

// GatewayConfig configures a gateway.
type GatewayConfig struct {
	// Listen is the address clients connect to, such as ":8080".
	Listen string
	// Admin is the address of /metrics, /healthz and /__ratelab/forwarded;
	// none when empty. /healthz answers 200 with "ok" while Redis answers,
	// and 200 with a line that says since when and why it fails otherwise.
	Admin string
	// Upstream is the URL requests are proxied to, or "builtin" for a fast
	// 200 responder that counts what it received per consumer.
	Upstream string
	// UpstreamDelay holds each request the built-in upstream serves for
	// this long (see Builtin.Delay).
	UpstreamDelay time.Duration
	// UpstreamTimeout bounds a proxied request's wait for response headers; 30s by default.
	UpstreamTimeout time.Duration
	// Limit configures the middleware in front of the upstream.
	Limit Config
	// Off serves the upstream with no limiter, to measure what the limiter adds.
	Off bool
	// Log receives the start-up and shutdown lines; none when nil.
	Log io.Writer
}

// Gateway serves the middleware in front of an upstream.
type Gateway struct {
	cfg     GatewayConfig
	main    *http.Server
	admin   *http.Server
	lnMain  net.Listener
	lnAdmin net.Listener
	builtin *Builtin
	metrics *limiter.Metrics
	limiter *Handler // nil with Off
}

// NewGateway binds the listeners (so that their addresses are known) and
// builds the handlers; Serve starts serving.
func NewGateway(cfg GatewayConfig) (*Gateway, error) {
	g := &Gateway{cfg: cfg, metrics: cfg.Limit.Metrics}
	if g.metrics == nil {
		g.metrics = limiter.NewMetrics()
		g.cfg.Limit.Metrics = g.metrics
	}
	var upstream http.Handler
	if cfg.Upstream == "builtin" {
		g.builtin = &Builtin{KeyBy: cfg.Limit.KeyBy, Delay: cfg.UpstreamDelay}
		upstream = g.builtin
	} else {
		u, err := url.Parse(cfg.Upstream)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("upstream %q: want an http:// or https:// URL, or builtin", cfg.Upstream)
		}
		proxy := httputil.NewSingleHostReverseProxy(u)
		timeout := cfg.UpstreamTimeout
		if timeout <= 0 {
			timeout = 30 * time.Second
		}
		proxy.Transport = &http.Transport{
			Proxy:                 nil,
			DialContext:           (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
			MaxIdleConnsPerHost:   256,
			IdleConnTimeout:       90 * time.Second,
			ResponseHeaderTimeout: timeout,
		}
		upstream = proxy
	}
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return nil, fmt.Errorf("listen %s: %w", cfg.Listen, err)
	}
	g.lnMain = ln
	handler := upstream
	if !cfg.Off {
		g.limiter = Middleware(g.cfg.Limit, upstream)
		handler = g.limiter
	}
	g.main = &http.Server{
		Handler:           handler,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
	}
	if cfg.Admin != "" {
		aln, err := net.Listen("tcp", cfg.Admin)
		if err != nil {
			ln.Close()
			return nil, fmt.Errorf("admin listen %s: %w", cfg.Admin, err)
		}
		g.lnAdmin = aln
		mux := http.NewServeMux()
		mux.Handle("GET /metrics", g.metrics.Handler())
		mux.HandleFunc("GET /__ratelab/forwarded", func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			if g.builtin == nil {
				w.WriteHeader(http.StatusNotFound)
				_ = json.NewEncoder(w).Encode(map[string]string{"error": "the upstream is not builtin"})
				return
			}
			_ = json.NewEncoder(w).Encode(g.builtin.Snapshot())
		})
		mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
			if g.limiter == nil {
				_, _ = io.WriteString(w, "ok\n")
				return
			}
			g.limiter.core.ReportHealth(w)
			if rs := g.limiter.cfg.Rules; rs.Source() != "" {
				cur := rs.Current()
				fmt.Fprintf(w, "rules: version %s, %s, loaded %s\n", cur.Version, cur.Source, cur.At.UTC().Format(time.RFC3339Nano))
			}
		})
		g.admin = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	}
	return g, nil
}

// Addr is the address clients connect to.
func (g *Gateway) Addr() string { return g.lnMain.Addr().String() }

// AdminAddr is the admin listener's address; empty without one.
func (g *Gateway) AdminAddr() string {
	if g.lnAdmin == nil {
		return ""
	}
	return g.lnAdmin.Addr().String()
}

// Metrics are the gateway's counters.
func (g *Gateway) Metrics() *limiter.Metrics { return g.metrics }

// Rules are the rules the gateway serves; nil with Off.
func (g *Gateway) Rules() *limiter.Rules { return g.cfg.Limit.Rules }

// Builtin is the built-in upstream; nil when proxying.
func (g *Gateway) Builtin() *Builtin { return g.builtin }

// Serve serves until ctx is done, then shuts down gracefully: it stops
// accepting and waits up to 10 seconds for requests in flight, then closes
// the connections still open. It returns once the goroutines it started
// have ended, the limiter's probe of Redis among them.
func (g *Gateway) Serve(ctx context.Context) error {
	l := g.cfg.Limit
	if g.cfg.Log != nil {
		fmt.Fprintf(g.cfg.Log, "ratelab edge: listening on %s, upstream %s, admin %s\n", g.Addr(), g.cfg.Upstream, orNone(g.AdminAddr()))
		if g.cfg.Off {
			fmt.Fprintln(g.cfg.Log, "ratelab edge: --limit off: no limiter, every request goes to the upstream")
		} else {
			set := l.Rules.Current().Set()
			fmt.Fprintf(g.cfg.Log, "ratelab edge: %s; %s's clock; Redis timeout %s; on a Redis error: fail %s%s%s%s\n",
				rulesText(set), l.Clock.Owner(), l.Timeout, onErrorText(l), breakerText(l.BreakerFailures),
				map[bool]string{true: "; shadow mode: nothing is blocked"}[l.Shadow],
				map[bool]string{true: "; deny cache on"}[l.DenyCache])
		}
	}
	var watching sync.WaitGroup
	if g.limiter != nil {
		wctx, stop := context.WithCancel(ctx)
		defer func() { stop(); watching.Wait() }()
		watching.Go(func() {
			if err := g.cfg.Limit.Rules.Watch(wctx); err != nil && g.cfg.Log != nil {
				fmt.Fprintf(g.cfg.Log, "ratelab edge: rules do not reload when the file changes: %v\n", err)
			}
		})
	}
	type server struct {
		srv *http.Server
		ln  net.Listener
	}
	servers := []server{{g.main, g.lnMain}}
	if g.admin != nil {
		servers = append(servers, server{g.admin, g.lnAdmin})
	}
	// Each server's goroutine ends once its server is shut down, or when it
	// fails first; Serve waits for them all before it returns.
	var wg sync.WaitGroup
	ended := make(chan error, len(servers))
	for _, s := range servers {
		wg.Go(func() { ended <- s.srv.Serve(s.ln) })
	}
	var errs []error
	select {
	case <-ctx.Done():
	case e := <-ended:
		errs = append(errs, e)
	}
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, s := range servers {
		if err := s.srv.Shutdown(sctx); err != nil {
			// Requests still in flight after the grace period: cut them off.
			errs = append(errs, err, s.srv.Close())
		}
	}
	wg.Wait()
	close(ended)
	for e := range ended {
		errs = append(errs, e)
	}
	if g.limiter != nil {
		_ = g.limiter.Close()
	}
	if g.cfg.Log != nil {
		fmt.Fprintln(g.cfg.Log, "ratelab edge: stopped")
	}
	// Every server's Serve returns http.ErrServerClosed once it is shut down.
	errs = slices.DeleteFunc(errs, func(e error) bool { return errors.Is(e, http.ErrServerClosed) })
	return errors.Join(errs...)
}

// rulesText says what decides: the rules file, or the --limit shorthand,
// with every limit and its algorithm.
func rulesText(set *rules.Set) string {
	if set.Domain == rules.ShorthandDomain && len(set.Descriptors) == 1 {
		by := set.Descriptors[0].Attribute()
		trust := ""
		if by.Kind == rules.KindHeader {
			trust = " (trusted as sent: put the gateway behind what authenticates it)"
		}
		return fmt.Sprintf("%s, by %s%s", set.Summary(), by.Words(), trust)
	}
	return fmt.Sprintf("rules %s (domain %s, version %s): %s", set.File, set.Domain, set.Version, set.Summary())
}

// onErrorText says what the gateway does while Redis fails.
func onErrorText(c Config) string {
	if c.OnError == limiter.FailLocal && c.Local != nil {
		return "local (this gateway's share of each limit)"
	}
	return string(c.OnError)
}

// breakerText says when the circuit opens.
func breakerText(n int) string {
	if n <= 0 {
		return "; no circuit breaker"
	}
	return "; circuit opens after " + plural.Count(n, "failure") + " in a row"
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

// Builtin is a fast upstream that answers 200 and counts the requests it
// received per consumer, for benchmarks and tests.
type Builtin struct {
	// KeyBy names the consumer of each request.
	KeyBy KeyBy
	// Delay holds each request before it is answered, as a slow upstream
	// would (a request in flight all along); a client that goes away ends
	// its hold early, and gets no answer. None when zero.
	Delay time.Duration

	mu    sync.Mutex
	per   map[string]*atomic.Int64
	total atomic.Int64
}

// maxConsumers bounds the built-in upstream's table of counts.
const maxConsumers = 100_000

// Forwarded is what the built-in upstream received.
type Forwarded struct {
	Total     int64            `json:"total"`
	Consumers map[string]int64 `json:"consumers"`
}

func (b *Builtin) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	label := b.KeyBy.Identify(r).Label
	b.mu.Lock()
	if b.per == nil {
		b.per = map[string]*atomic.Int64{}
	}
	c, ok := b.per[label]
	if !ok {
		if len(b.per) >= maxConsumers {
			label = "(others)" // hostile or countless identities stay bounded
		}
		if c, ok = b.per[label]; !ok {
			c = &atomic.Int64{}
			b.per[label] = c
		}
	}
	b.mu.Unlock()
	c.Add(1)
	b.total.Add(1)
	if b.Delay > 0 {
		t := time.NewTimer(b.Delay)
		select {
		case <-t.C:
		case <-r.Context().Done():
			t.Stop()
			return
		}
	}
	w.Header().Set("Content-Type", "text/plain")
	_, _ = io.WriteString(w, "ok\n")
}

// Snapshot returns the counts so far.
func (b *Builtin) Snapshot() Forwarded {
	b.mu.Lock()
	defer b.mu.Unlock()
	f := Forwarded{Total: b.total.Load(), Consumers: map[string]int64{}}
	for k, v := range b.per {
		f.Consumers[k] = v.Load()
	}
	return f
}
