package redisrun

import (
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratelab/ratelab/internal/field"
)

// Timeouts on every connection to a target.
const (
	DialTimeout = 3 * time.Second
	IOTimeout   = 3 * time.Second
)

// protocol is RESP2 unless a URL asks otherwise: ratelab uses no push
// messages, and go-redis checks for them on every RESP3 reply.
const protocol = 2

// TargetConfig says which Redis a command runs against. The zero value
// starts a private server.
type TargetConfig struct {
	// URL is a redis://, rediss:// or unix:// URL, or comma-separated
	// redis:// URLs of one Redis Cluster; empty starts a private server.
	URL string
	// Cluster treats a single URL as a seed of a Redis Cluster.
	Cluster bool
	// ClusterLocal starts a private three-master Redis Cluster.
	ClusterLocal bool
	// Sentinel is NAME@HOST:PORT,HOST:PORT…: the primary that the
	// redis-sentinels at those addresses know as NAME, followed through
	// failovers (go-redis's FailoverClient). No TLS or AUTH.
	Sentinel string
	// CAFile holds the certificates that sign the server's (PEM), for
	// rediss://; the system's by default.
	CAFile string
	// CertFile and KeyFile are a client certificate and its key (PEM), for
	// servers that ask for one.
	CertFile, KeyFile string
	// Insecure skips the verification of the server's certificate.
	Insecure bool
	// NoEmbedded refuses the in-process fallback: with no redis-server on
	// PATH, Open fails instead.
	NoEmbedded bool
}

// Info names the Redis a run was measured on, in results.
type Info struct {
	// Mode is "external", "ephemeral" or "embedded".
	Mode string `json:"mode"`
	// Version is the server's version.
	Version string `json:"version"`
	// Addr is where it listens (comma-separated for a Cluster; NAME@ and
	// the sentinels for a primary found through redis-sentinel), without
	// credentials.
	Addr string `json:"addr"`
	// Cluster is set for a Redis Cluster.
	Cluster bool `json:"cluster"`
}

// Target is an open Redis: who it is and how to reach it.
type Target struct {
	Info
	// Options reach it, with ratelab's timeouts and no automatic retries (a
	// retried decision could be counted twice). Callers copy them.
	Options *redis.UniversalOptions
	stop    func()
}

// Close stops the target's server when ratelab started it.
func (t *Target) Close() {
	if t.stop != nil {
		t.stop()
	}
}

// String names the target for a start-up line.
func (t *Target) String() string {
	what := map[string]string{
		string(External):  "",
		string(Ephemeral): ", a private redis-server stopped on exit",
		string(Embedded):  ", the embedded in-process Redis",
	}[t.Mode]
	kind := "Redis " + t.Version
	if strings.HasPrefix(t.Version, "miniredis") {
		kind = t.Version
	}
	if t.Cluster {
		kind += " Cluster"
		if t.Mode == string(Ephemeral) {
			what = ", private redis-servers stopped on exit"
		}
	}
	return kind + " at " + t.Addr + what
}

// Validate checks c without touching the network. Errors are *field.Error.
func (c TargetConfig) Validate() error {
	_, err := c.options()
	return err
}

// ClientOptions are the options that reach the Redis c names, parsed
// without touching the network; nil when ratelab starts the server.
func (c TargetConfig) ClientOptions() (*redis.UniversalOptions, error) { return c.options() }

// options parses c into client options; nil when ratelab starts the server.
func (c TargetConfig) options() (*redis.UniversalOptions, error) {
	if c.Sentinel != "" {
		return c.sentinelOptions()
	}
	switch {
	case c.ClusterLocal && c.URL != "":
		return nil, field.Errorf("ClusterLocal", "starts its own cluster: it cannot be combined with {URL}")
	case c.ClusterLocal && c.Cluster:
		return nil, field.Errorf("ClusterLocal", "starts its own cluster: {Cluster} names one of yours")
	case c.URL == "" && c.Cluster:
		return nil, field.Errorf("Cluster", "needs {URL}: the address of a cluster node")
	case c.URL == "" && (c.CAFile != "" || c.CertFile != "" || c.KeyFile != "" || c.Insecure):
		return nil, field.Errorf(firstTLSField(c), "needs a rediss:// {URL}")
	case c.CertFile != "" && c.KeyFile == "":
		return nil, field.Errorf("CertFile", "needs {KeyFile}")
	case c.KeyFile != "" && c.CertFile == "":
		return nil, field.Errorf("KeyFile", "needs {CertFile}")
	}
	if c.URL == "" {
		return nil, nil
	}
	if hint, ok := withScheme(c.URL); ok {
		return nil, field.Errorf("URL", "%q: want a URL: %s", Redact(c.URL), Redact(hint))
	}
	var u *redis.UniversalOptions
	for _, part := range strings.Split(c.URL, ",") {
		o, err := redis.ParseURL(strings.TrimSpace(part))
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // url.Error quotes the URL, password and all
		}
		if err != nil {
			return nil, field.Errorf("URL", "%q: %v", Redact(c.URL), err)
		}
		if u != nil {
			if o.TLSConfig == nil != (u.TLSConfig == nil) {
				return nil, field.Errorf("URL", "%q: mixes redis:// and rediss://", Redact(c.URL))
			}
			u.Addrs = append(u.Addrs, o.Addr)
			continue
		}
		u = &redis.UniversalOptions{
			Addrs:         []string{o.Addr},
			Username:      o.Username,
			Password:      o.Password,
			DB:            o.DB,
			TLSConfig:     o.TLSConfig,
			Protocol:      cmp.Or(o.Protocol, protocol),
			ClientName:    o.ClientName,
			DialTimeout:   cmp.Or(o.DialTimeout, DialTimeout),
			ReadTimeout:   cmp.Or(o.ReadTimeout, IOTimeout),
			WriteTimeout:  cmp.Or(o.WriteTimeout, IOTimeout),
			MaxRetries:    -1,
			IsClusterMode: c.Cluster,
		}
		if o.Network == "unix" {
			u.Dialer = func(ctx context.Context, _, addr string) (net.Conn, error) {
				var d net.Dialer
				return d.DialContext(ctx, "unix", addr)
			}
		}
	}
	if len(u.Addrs) > 1 {
		u.IsClusterMode = true
	}
	if u.IsClusterMode && u.DB != 0 {
		return nil, field.Errorf("URL", "%q: a Redis Cluster has only database 0", Redact(c.URL))
	}
	if c.CAFile != "" || c.CertFile != "" || c.Insecure {
		if u.TLSConfig == nil {
			return nil, field.Errorf(firstTLSField(c), "needs a rediss:// {URL} (got %q)", Redact(c.URL))
		}
		if err := c.applyTLS(u.TLSConfig); err != nil {
			return nil, err
		}
	}
	return u, nil
}

// sentinelOptions parses Sentinel.
func (c TargetConfig) sentinelOptions() (*redis.UniversalOptions, error) {
	switch {
	case c.URL != "":
		return nil, field.Errorf("Sentinel", "finds the primary itself: it cannot be combined with {URL}")
	case c.Cluster || c.ClusterLocal:
		return nil, field.Errorf("Sentinel", "names a primary and its replicas, not a Cluster")
	case c.CAFile != "" || c.CertFile != "" || c.KeyFile != "" || c.Insecure:
		return nil, field.Errorf(firstTLSField(c), "needs a rediss:// {URL}: there is no TLS with {Sentinel}")
	}
	name, list, ok := strings.Cut(c.Sentinel, "@")
	if !ok || name == "" || list == "" {
		return nil, field.Errorf("Sentinel", "%q: want NAME@HOST:PORT[,HOST:PORT…]", c.Sentinel)
	}
	var addrs []string
	for _, a := range strings.Split(list, ",") {
		a = strings.TrimSpace(a)
		if _, port, err := net.SplitHostPort(a); err != nil || port == "" {
			return nil, field.Errorf("Sentinel", "%q: %q is not HOST:PORT", c.Sentinel, a)
		}
		addrs = append(addrs, a)
	}
	return &redis.UniversalOptions{Addrs: addrs, MasterName: name, Protocol: protocol, DialTimeout: DialTimeout,
		ReadTimeout: IOTimeout, WriteTimeout: IOTimeout, MaxRetries: -1}, nil
}

func firstTLSField(c TargetConfig) string {
	switch {
	case c.CAFile != "":
		return "CAFile"
	case c.CertFile != "":
		return "CertFile"
	case c.KeyFile != "":
		return "KeyFile"
	}
	return "Insecure"
}

// applyTLS adds the CA, the client certificate and Insecure to t.
func (c TargetConfig) applyTLS(t *tls.Config) error {
	if c.CAFile != "" {
		pem, err := os.ReadFile(c.CAFile)
		if err != nil {
			return field.Errorf("CAFile", ": %v", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return field.Errorf("CAFile", ": %s holds no PEM certificate", c.CAFile)
		}
		t.RootCAs = pool
	}
	if c.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(c.CertFile, c.KeyFile)
		if err != nil {
			return field.Errorf("CertFile", ": %v", err)
		}
		t.Certificates = []tls.Certificate{cert}
	}
	t.InsecureSkipVerify = c.Insecure //nolint:gosec // the user's choice, for test servers
	return nil
}

// withScheme is list with a scheme put before each of its addresses that
// has none (unix:// before a path, redis:// before the others): the URLs
// meant by "127.0.0.1:6379". It is false when every one has its scheme.
func withScheme(list string) (string, bool) {
	parts := strings.Split(list, ",")
	added := false
	for i, p := range parts {
		p = strings.TrimSpace(p)
		switch {
		case p == "", strings.Contains(p, "://"), strings.HasPrefix(p, "unix:"):
		case strings.HasPrefix(p, "/"):
			p, added = "unix://"+p, true
		default:
			p, added = "redis://"+p, true
		}
		parts[i] = p
	}
	return strings.Join(parts, ","), added
}

// Redact hides the password of a Redis URL, or of an address with
// credentials and no scheme, for messages.
func Redact(raw string) string {
	parts := strings.Split(raw, ",")
	for i, p := range parts {
		at := strings.LastIndex(p, "@")
		scheme := strings.Index(p, "://")
		switch {
		case at >= 0 && scheme >= 0 && at > scheme:
			parts[i] = p[:scheme+3] + "…" + p[at:]
		case at >= 0 && scheme < 0:
			parts[i] = "…" + p[at:]
		}
	}
	return strings.Join(parts, ",")
}

// ErrNoServer is returned by Open when no Redis was named, NoEmbedded is
// set, and there is no redis-server on PATH.
var ErrNoServer = errors.New("no redis-server on PATH: install it or pass a Redis URL")

// Open connects to the Redis c names, or starts a private redis-server, or
// (unless NoEmbedded) the embedded in-process server, and checks that it
// answers, within the timeouts, before it returns.
func Open(ctx context.Context, c TargetConfig) (*Target, error) {
	o, err := c.options()
	if err != nil {
		return nil, err
	}
	if o != nil {
		version, err := Ping(ctx, o)
		if err != nil {
			return nil, err
		}
		addr := strings.Join(o.Addrs, ",")
		if o.MasterName != "" {
			addr = o.MasterName + "@" + addr
		}
		return &Target{Options: o, Info: Info{Mode: string(External), Version: version, Addr: addr,
			Cluster: IsCluster(o)}}, nil
	}
	if c.ClusterLocal {
		cl, err := StartCluster(ctx, 3, Options{})
		if errors.Is(err, ErrNotFound) {
			return nil, fmt.Errorf("a local Redis Cluster needs redis-server on PATH: %w", err)
		}
		if err != nil {
			return nil, err
		}
		return &Target{Options: localOptions(cl.Addrs(), true), stop: cl.Stop,
			Info: Info{Mode: string(Ephemeral), Version: cl.Version(), Addr: strings.Join(cl.Addrs(), ","), Cluster: true}}, nil
	}
	srv, err := Start(ctx, Options{})
	if errors.Is(err, ErrNotFound) {
		if c.NoEmbedded {
			return nil, ErrNoServer
		}
		srv, err = StartEmbedded()
	}
	if err != nil {
		return nil, err
	}
	return &Target{Options: localOptions([]string{srv.Addr}, false), stop: srv.Stop,
		Info: Info{Mode: string(srv.Mode), Version: srv.Version, Addr: srv.Addr}}, nil
}

// IsCluster reports whether a client built from o by
// redis.NewUniversalClient reaches a Redis Cluster, where the keys of one
// command must share a slot: o sets IsClusterMode or lists several
// addresses, and names no MasterName (a primary found through
// redis-sentinel, whatever else is set, is one server). A nil o is no
// Cluster.
func IsCluster(o *redis.UniversalOptions) bool {
	return o != nil && o.MasterName == "" && (o.IsClusterMode || len(o.Addrs) > 1)
}

func localOptions(addrs []string, cluster bool) *redis.UniversalOptions {
	return &redis.UniversalOptions{Addrs: addrs, IsClusterMode: cluster, DialTimeout: DialTimeout,
		ReadTimeout: IOTimeout, WriteTimeout: IOTimeout, MaxRetries: -1, Protocol: protocol}
}

// Ping checks with one connection that the server opts reaches answers,
// and returns its version ("unknown" when it hides it). Its error says
// whether the server could not be reached, refused the credentials, or
// failed the TLS handshake.
func Ping(ctx context.Context, opts *redis.UniversalOptions) (string, error) {
	o := *opts
	o.PoolSize = 1
	o.MinIdleConns = 0
	c := redis.NewUniversalClient(&o)
	defer c.Close()
	ctx, cancel := context.WithTimeout(ctx, cmp.Or(o.DialTimeout, DialTimeout)+cmp.Or(o.ReadTimeout, IOTimeout))
	defer cancel()
	addr := strings.Join(o.Addrs, ",")
	if err := c.Ping(ctx).Err(); err != nil {
		return "", describe(addr, err)
	}
	info, err := c.Info(ctx, "server").Result()
	if err != nil {
		return "unknown", nil // some proxies refuse INFO; the server still answers
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "redis_version:"); ok {
			return v, nil
		}
	}
	return "unknown", nil
}

// describe says what a failed PING means.
func describe(addr string, err error) error {
	var ce *tls.CertificateVerificationError
	var ua x509.UnknownAuthorityError
	var he x509.HostnameError
	var rh tls.RecordHeaderError
	switch {
	case redis.HasErrorPrefix(err, "WRONGPASS"), redis.HasErrorPrefix(err, "NOAUTH"), redis.HasErrorPrefix(err, "NOPERM"),
		strings.Contains(err.Error(), "invalid password"), strings.Contains(err.Error(), "invalid username-password"):
		return fmt.Errorf("Redis at %s refused ratelab's credentials: %w", addr, err)
	case errors.As(err, &ce), errors.As(err, &ua), errors.As(err, &he), errors.As(err, &rh), strings.HasPrefix(err.Error(), "tls:"):
		return fmt.Errorf("TLS with Redis at %s failed: %w", addr, err)
	}
	return fmt.Errorf("cannot reach Redis at %s: %w", addr, err)
}
