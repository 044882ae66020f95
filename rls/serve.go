package rls

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"slices"
	"time"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	grpchealth "google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/ratelab/ratelab/algorithms"
	"github.com/ratelab/ratelab/internal/field"
	"github.com/ratelab/ratelab/internal/pemfile"
	"github.com/ratelab/ratelab/internal/plural"
	"github.com/ratelab/ratelab/limiter"
	"github.com/ratelab/ratelab/rules"
)

// Options are the settings of ratelab rls.
type Options struct {
	// GRPC is the address of the gRPC service (RateLimitService and
	// grpc.health.v1), such as ":8081".
	GRPC string
	// TLSCertFile and TLSKeyFile, when set (both or neither), are the PEM
	// files of the certificate and key the gRPC service is served with over
	// TLS (1.2 or later); else it is plaintext. They are read once, at
	// start. /json, /healthz and /metrics on HTTP stay plaintext.
	TLSCertFile, TLSKeyFile string
	// TLSClientCAFile, when set, is the PEM file of the CAs that sign the
	// clients' certificates: the gRPC service then asks every client for a
	// certificate and refuses one without a certificate they sign (mutual
	// TLS). It needs TLSCertFile.
	TLSClientCAFile string
	// TLS, when set, is the TLS configuration of the gRPC service as
	// GRPCTLS read it from the files above, used as it is: the files are
	// then not read again.
	TLS *tls.Config
	// HTTP is the address of /json (envoyproxy/ratelimit's), /healthz and
	// /metrics, such as ":8080"; none when empty.
	HTTP string
	// ConfigDir is the directory of envoyproxy/ratelimit YAML files, one
	// domain each, unless MergeDomains.
	ConfigDir string
	// MergeDomains merges the files of one domain into one configuration of
	// it, as envoyproxy/ratelimit's MERGE_DOMAIN_CONFIG (rules.MergeDomains);
	// else a domain in two files is refused.
	MergeDomains bool
	// Timeout bounds one decision in Redis.
	Timeout time.Duration
	// Pool is the most Redis connections.
	Pool int
	// Batch is the most decisions sent to Redis in one round trip:
	// concurrent calls' EVALSHAs go out together as one pipeline
	// (internal/batch), as edge's Options.Batch. 0 or 1: one call per
	// decision.
	Batch int
	// OnError is FailOpen or FailClosed.
	OnError limiter.OnError
	// BreakerFailures is the Redis failures in a row that open the circuit.
	BreakerFailures int
	// ResponseHeaders adds the draft-10 RateLimit fields to the response.
	ResponseHeaders bool
	// DenyCache answers a call over a limit known to refuse it from memory
	// (limiter.Config.DenyCache).
	DenyCache bool
	// Bounds are what one call may carry (Config.Bounds).
	Bounds limiter.Bounds
	// Clock is where the limiter takes the time from.
	Clock algorithms.Clock
	// Log receives the start-up, reload and failure lines.
	Log io.Writer
	// Ready, when set, receives the addresses served once they listen.
	Ready func(grpcAddr, httpAddr string)

	redisAddr string // named in the start-up line
}

// Validate checks the options; errors are *field.Error.
func (o Options) Validate() error {
	switch {
	case o.GRPC == "":
		return field.Errorf("GRPC", "must not be empty")
	case o.ConfigDir == "":
		return field.Errorf("ConfigDir", "must name a directory of envoyproxy/ratelimit YAML files")
	case o.Timeout <= 0:
		return field.Errorf("Timeout", "must be positive (got %s)", o.Timeout)
	case o.Pool < 1:
		return field.Errorf("Pool", "must be at least 1 (got %d)", o.Pool)
	case o.Batch < 1 || o.Batch > limiter.MaxBatch:
		return field.Errorf("Batch", "must be between 1 and %d (got %d)", limiter.MaxBatch, o.Batch)
	case o.OnError != limiter.FailOpen && o.OnError != limiter.FailClosed:
		return field.Errorf("OnError", "%q is not open or closed", o.OnError)
	case o.BreakerFailures < 0:
		return field.Errorf("BreakerFailures", "must be 0 or more (got %d)", o.BreakerFailures)
	case o.TLSCertFile != "" && o.TLSKeyFile == "":
		return field.Errorf("TLSCertFile", "needs {TLSKeyFile}, the certificate's key")
	case o.TLSKeyFile != "" && o.TLSCertFile == "":
		return field.Errorf("TLSKeyFile", "needs {TLSCertFile}, the certificate it is the key of")
	case o.TLSClientCAFile != "" && o.TLSCertFile == "":
		return field.Errorf("TLSClientCAFile", "needs {TLSCertFile} and {TLSKeyFile}: client certificates are asked for over TLS")
	}
	if err := o.Bounds.Validate(); err != nil {
		return field.Within("Bounds", err)
	}
	return nil
}

// RulesConfig is how the service reads its configuration directory: the
// *.yaml and *.yml files, as envoyproxy/ratelimit's (rules.ForService),
// a limit with no algorithm a fixed window aligned to its unit, as the
// reference's.
func (o Options) RulesConfig() limiter.RulesConfig {
	opts := []rules.Option{rules.ForService(), rules.WithDefaultAlgorithm("fixed-window")}
	if o.MergeDomains {
		opts = append(opts, rules.MergeDomains())
	}
	return limiter.RulesConfig{Path: o.ConfigDir, Dir: true, Options: opts, Log: o.Log, Name: "ratelab rls"}
}

// GRPCTLS reads the TLS configuration of the gRPC service from its files:
// nil when it is plaintext. Errors are *field.Error naming the file.
func (o Options) GRPCTLS() (*tls.Config, error) {
	if o.TLSCertFile == "" {
		return nil, nil
	}
	cert, err := pemfile.KeyPair(o.TLSCertFile, o.TLSKeyFile)
	if err != nil {
		return nil, field.Errorf("TLSCertFile", ": %v", err)
	}
	c := &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{cert}}
	if o.TLSClientCAFile != "" {
		pool, err := pemfile.CertPool(o.TLSClientCAFile)
		if err != nil {
			return nil, field.Errorf("TLSClientCAFile", ": %v", err)
		}
		c.ClientCAs, c.ClientAuth = pool, tls.RequireAndVerifyClientCert
	}
	return c, nil
}

// Serve serves the rate limit service until ctx is done, on the Redis
// of r (addr names it in the log). The configuration is read before
// anything listens: a file that does not parse is an error naming its line
// and field.
func Serve(ctx context.Context, o Options, r *redis.UniversalOptions, addr string) error {
	if err := o.Validate(); err != nil {
		return err
	}
	served, err := limiter.LoadRules(ctx, o.RulesConfig())
	if err != nil {
		return err
	}
	if o.TLS == nil {
		if o.TLS, err = o.GRPCTLS(); err != nil {
			return err
		}
	}
	metrics := limiter.NewMetrics()
	decider, closeClient := limiter.OpenDecider(limiter.RedisConfig{Options: r, Timeout: o.Timeout, Pool: o.Pool, Batch: o.Batch,
		Clock: o.Clock, Metrics: metrics})
	defer closeClient()
	svc := New(Config{Rules: served, ResponseHeaders: o.ResponseHeaders, Bounds: o.Bounds,
		Config: limiter.Config{Decider: decider, Timeout: o.Timeout, OnError: o.OnError, BreakerFailures: o.BreakerFailures,
			DenyCache: o.DenyCache, Metrics: metrics, Log: o.Log}})
	defer svc.Close()
	o.redisAddr = addr
	if err := limiter.LoadScript(ctx, decider, o.Timeout*5, addr); err != nil && o.Log != nil {
		fmt.Fprintf(o.Log, "ratelab rls: %v (decisions fail %s until it answers)\n", err, o.OnError)
	}

	return svc.Serve(ctx, o)
}

// Serve serves the service on o's addresses (GRPC, HTTP; Log, Ready)
// until ctx is done, and reloads its configuration meanwhile.
func (svc *Service) Serve(ctx context.Context, o Options) error {
	served, metrics := svc.cfg.Rules, svc.Metrics()
	if o.TLS == nil {
		var err error
		if o.TLS, err = o.GRPCTLS(); err != nil {
			return err
		}
	}
	gl, err := net.Listen("tcp", o.GRPC)
	if err != nil {
		return fmt.Errorf("grpc listen: %w", err)
	}
	// Calls are served by long-lived workers, whose stacks stay grown,
	// rather than by a goroutine per call, whose stack grew on every call
	// through the decision (runtime.newstack was 14 % of the service's CPU
	// under load). A call that finds every worker busy gets a goroutine of
	// its own, as without workers.
	opts := []grpc.ServerOption{grpc.NumStreamWorkers(streamWorkers)}
	if o.TLS != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(o.TLS)))
	}
	gs := grpc.NewServer(opts...)
	pb.RegisterRateLimitServiceServer(gs, svc)
	hs := grpchealth.NewServer()
	hs.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	hs.SetServingStatus(pb.RateLimitService_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_SERVING)
	healthpb.RegisterHealthServer(gs, hs)

	var hl net.Listener
	var hsrv *http.Server
	if o.HTTP != "" {
		if hl, err = net.Listen("tcp", o.HTTP); err != nil {
			gl.Close()
			return fmt.Errorf("http listen: %w", err)
		}
		mux := http.NewServeMux()
		mux.Handle("/json", JSONHandler(svc))
		mux.Handle("/metrics", metrics.Handler())
		health := func(w http.ResponseWriter, _ *http.Request) { svc.core.ReportHealth(w) }
		mux.HandleFunc("/healthz", health)
		// envoyproxy/ratelimit's path, so that probes written for it work.
		mux.HandleFunc("/healthcheck", health)
		hsrv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	}
	if o.Log != nil {
		d := served.Current()
		fmt.Fprintf(o.Log, "ratelab rls: gRPC%s on %s, /json on %s; config %s version %s (%s); Redis %s, clock %s, timeout %s, on error %s\n",
			grpcSecurity(o.TLS), gl.Addr(), cmp.Or(listenerAddr(hl), "none"), d.Source, d.Version, plural.Count(len(d.Sets), "domain"), o.redisAddr,
			o.Clock.Owner(), o.Timeout, o.OnError)
		for _, domain := range slices.Sorted(maps.Keys(d.Sets)) {
			fmt.Fprintf(o.Log, "ratelab rls: domain %s: %s\n", domain, d.Sets[domain].Summary())
		}
	}
	if o.Ready != nil {
		o.Ready(gl.Addr().String(), listenerAddr(hl))
	}
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		// A watch that cannot be set up (the system's limit of watches, say)
		// leaves the configuration serving as it is, reloaded on SIGHUP no
		// more: said, not fatal, as the gateway's.
		if err := served.Watch(gctx); err != nil && o.Log != nil {
			fmt.Fprintf(o.Log, "ratelab rls: config %s does not reload when its files change: %v\n", o.ConfigDir, err)
		}
		return nil
	})
	g.Go(func() error {
		if err := gs.Serve(gl); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			return fmt.Errorf("grpc: %w", err)
		}
		return nil
	})
	if hsrv != nil {
		g.Go(func() error {
			if err := hsrv.Serve(hl); err != nil && !errors.Is(err, http.ErrServerClosed) {
				return fmt.Errorf("http: %w", err)
			}
			return nil
		})
	}
	g.Go(func() error {
		<-gctx.Done()
		hs.Shutdown()
		stopped := make(chan struct{})
		go func() { gs.GracefulStop(); close(stopped) }()
		select {
		case <-stopped:
		case <-time.After(5 * time.Second):
			gs.Stop()
			<-stopped
		}
		if hsrv != nil {
			sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = hsrv.Shutdown(sctx)
		}
		return nil
	})
	return g.Wait()
}

// grpcSecurity says in the start-up line how the gRPC service is served.
func grpcSecurity(c *tls.Config) string {
	switch {
	case c == nil:
		return " (plaintext)"
	case c.ClientAuth == tls.RequireAndVerifyClientCert:
		return " (TLS, client certificates required)"
	}
	return " (TLS)"
}

func listenerAddr(l net.Listener) string {
	if l == nil {
		return ""
	}
	return l.Addr().String()
}

// maxJSONBody bounds a /json request.
const maxJSONBody = 1 << 20

// streamWorkers is how many goroutines serve the gRPC calls: more than the
// calls a service has in flight at once under the heaviest load measured
// here (50 streams, each waiting on Redis), and idle they cost a stack each.
const streamWorkers = 128

// JSONHandler is envoyproxy/ratelimit's /json endpoint: a RateLimitRequest
// in protobuf's JSON, POSTed; the RateLimitResponse in JSON, with 429 when
// over the limit and 400 for a request that does not decode or is
// malformed.
func JSONHandler(svc *Service) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxJSONBody))
		if err != nil {
			svc.Metrics().Invalid(limiter.InvalidMalformed)
			http.Error(w, "reading the request: "+err.Error(), http.StatusBadRequest)
			return
		}
		var req pb.RateLimitRequest
		if err := protojson.Unmarshal(body, &req); err != nil {
			svc.Metrics().Invalid(limiter.InvalidMalformed)
			http.Error(w, "decoding the request: "+err.Error(), http.StatusBadRequest)
			return
		}
		resp, err := svc.ShouldRateLimit(r.Context(), &req)
		if err != nil {
			code := http.StatusInternalServerError
			if status.Code(err) == codes.InvalidArgument {
				code = http.StatusBadRequest
			}
			http.Error(w, status.Convert(err).Message(), code)
			return
		}
		out, err := protojson.Marshal(resp)
		if err != nil {
			http.Error(w, "encoding the response: "+err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		if resp.GetOverallCode() == pb.RateLimitResponse_OVER_LIMIT {
			w.WriteHeader(http.StatusTooManyRequests)
		}
		_, _ = w.Write(out)
	})
}
