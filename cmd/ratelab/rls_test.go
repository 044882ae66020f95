package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/ratelab/ratelab/internal/pemfile"
	"github.com/ratelab/ratelab/internal/redisrun/redistest"
	"github.com/ratelab/ratelab/internal/testwait"
)

// TestRLSRefused: mistakes in ratelab rls's flags and configuration exit 2
// naming the flag (and for a file, its line and field), and send nothing to
// Redis.
func TestRLSRefused(t *testing.T) {
	c := redistest.Client(t, srv)
	good, bad, twice, empty := t.TempDir(), t.TempDir(), t.TempDir(), t.TempDir()
	files, other := redistest.TLSFiles(t), redistest.TLSFiles(t)
	junk, missing := tlsJunk(t)
	for path, src := range map[string]string{
		filepath.Join(good, "a.yaml"):  "domain: a\ndescriptors:\n  - key: user\n    rate_limit: {unit: second, requests_per_unit: 5}\n",
		filepath.Join(bad, "a.yaml"):   "domain: a\ndescriptors:\n  - key: user\n    rate_limit: {unit: fortnight, requests_per_unit: 5}\n",
		filepath.Join(twice, "a.yaml"): "domain: a\ndescriptors:\n  - key: user\n    rate_limit: {unit: second, requests_per_unit: 5}\n",
		filepath.Join(twice, "b.yaml"): "domain: a\ndescriptors:\n  - key: org\n    rate_limit: {unit: second, requests_per_unit: 5}\n",
	} {
		if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "--config must name a directory"},
		{[]string{"--config", bad}, `a.yaml:4: descriptors[0].rate_limit.unit: "fortnight" is not a unit`},
		{[]string{"--config", twice}, `b.yaml:1: domain: "a" is also the domain of`},
		{[]string{"--config", empty}, "no .yaml or .yml file"},
		{[]string{"--config", filepath.Join(good, "none")}, "--config: config directory"},
		{[]string{"--config", good, "--on-redis-error", "local"}, `--on-redis-error "local" is not open or closed`},
		{[]string{"--config", good, "--redis-timeout", "0s"}, "--redis-timeout must be positive"},
		{[]string{"--config", good, "--clock", "sundial"}, "--clock"},
		{[]string{"--config", good, "--redis-batch", "2000"}, "--redis-batch must be between 1 and 1024 (got 2000)"},
		{[]string{"--config", good, "--redis-batch", "-1"}, "--redis-batch must be between 1 and 1024 (got -1)"},
		{[]string{"--config", good, "--redis-batch", "0"}, "--redis-batch must be between 1 and 1024 (got 0)"},
		{[]string{"--config", good, "--max-descriptors", "5000"}, "--max-descriptors must be between 1 and 1024, or 0 for the default 64 (got 5000)"},
		{[]string{"--config", good, "--max-entries", "-1"}, "--max-entries must be between 1 and 64, or 0 for the default 16 (got -1)"},
		{[]string{"--config", good, "--max-value-length", "-1"}, "--max-value-length must be between 1 and 1048576, or 0 for the default 4096 (got -1)"},
		{[]string{"--config", good, "--grpc-tls-cert", files.CertFile}, "--grpc-tls-cert needs --grpc-tls-key"},
		{[]string{"--config", good, "--grpc-tls-key", files.KeyFile}, "--grpc-tls-key needs --grpc-tls-cert"},
		{[]string{"--config", good, "--grpc-tls-client-ca", files.CAFile}, "--grpc-tls-client-ca needs --grpc-tls-cert and --grpc-tls-key"},
		{[]string{"--config", good, "--grpc-tls-cert", missing, "--grpc-tls-key", files.KeyFile}, "--grpc-tls-cert: open " + missing},
		{[]string{"--config", good, "--grpc-tls-cert", junk, "--grpc-tls-key", files.KeyFile}, "--grpc-tls-cert: " + junk + " with " + files.KeyFile},
		{[]string{"--config", good, "--grpc-tls-cert", files.CertFile, "--grpc-tls-key", other.KeyFile},
			"--grpc-tls-cert: " + files.CertFile + " with " + other.KeyFile + ": tls: private key does not match public key"},
		{[]string{"--config", good, "--grpc-tls-cert", files.CertFile, "--grpc-tls-key", files.KeyFile, "--grpc-tls-client-ca", junk},
			"--grpc-tls-client-ca: " + junk + " holds no PEM certificate"},
		{[]string{"--config", good, "--grpc-tls-cert", files.CertFile, "--grpc-tls-key", files.KeyFile, "--grpc-tls-client-ca", missing},
			"--grpc-tls-client-ca: open " + missing},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			before := connections(t, c)
			code, _, stderr := ratelab(t, append([]string{"rls", "--redis", srv.URL(), "--grpc", "127.0.0.1:0", "--http", ""}, tc.args...)...)
			if code != exitUsage || !strings.Contains(stderr, tc.want) {
				t.Errorf("exit %d, stderr %q; want 2 and %q", code, stderr, tc.want)
			}
			if after := connections(t, c); after != before {
				t.Errorf("the server accepted connections: something was sent")
			}
		})
	}
}

// TestRLSServes: ratelab rls serves /json from its directory, answers 429
// over the limit, and exits 0 when stopped.
func TestRLSServes(t *testing.T) {
	redistest.Client(t, srv)
	dir := t.TempDir()
	domain := redistest.Prefix(t)
	src := "domain: " + domain + "\ndescriptors:\n  - key: user\n    rate_limit: {unit: hour, requests_per_unit: 1}\n"
	if err := os.WriteFile(filepath.Join(dir, "a.yaml"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	addr := freeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	var stderr syncWriter
	go func() {
		done <- run(ctx, []string{"rls", "--redis", srv.URL(), "--config", dir, "--grpc", "127.0.0.1:0", "--http", addr,
			"--redis-timeout", "5s"}, io.Discard, &stderr)
	}()
	stop := sync.OnceValue(func() int { cancel(); return <-done })
	defer stop()
	body := `{"domain":"` + domain + `","descriptors":[{"entries":[{"key":"user","value":"u"}]}]}`
	post := func() (int, error) {
		resp, err := http.Post("http://"+addr+"/json", "application/json", strings.NewReader(body))
		if err != nil {
			return 0, err
		}
		resp.Body.Close()
		return resp.StatusCode, nil
	}
	var first int
	testwait.Eventually(t, 15*time.Second, func() (bool, string) {
		code, err := post()
		first = code
		return err == nil, fmt.Sprintf("rls not serving: %v\n%s", err, stderr.String())
	})
	second, err := post()
	if err != nil || first != http.StatusOK || second != http.StatusTooManyRequests {
		t.Errorf("/json answered %d then %d (%v), want 200 then 429", first, second, err)
	}
	if code := stop(); code != exitOK {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	// The start-up lines say what serves, each limit with its algorithm (a
	// fixed window when the file names none, unlike the gateway's default),
	// under rls's own name.
	for _, want := range []string{"(1 domain);", "ratelab rls: domain " + domain + ": 1 limit: user 1 per 1h0m0s (fixed-window)\n"} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("the log lacks %q:\n%s", want, stderr.String())
		}
	}
	if strings.Contains(stderr.String(), "ratelab edge") {
		t.Errorf("the log speaks as ratelab edge:\n%s", stderr.String())
	}
}

// tlsJunk writes a file that holds no PEM, and returns its path and one
// that does not exist.
func tlsJunk(t *testing.T) (junk, missing string) {
	t.Helper()
	dir := t.TempDir()
	junk = filepath.Join(dir, "junk.pem")
	if err := os.WriteFile(junk, []byte("not a certificate\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return junk, filepath.Join(dir, "none.pem")
}

// TestRLSServesTLS: with --grpc-tls-cert, --grpc-tls-key and
// --grpc-tls-client-ca, ratelab rls says so at start and answers gRPC over
// TLS only a client with a certificate that CA signs; /healthz stays
// plaintext.
func TestRLSServesTLS(t *testing.T) {
	redistest.Client(t, srv)
	server, client := redistest.TLSFiles(t), redistest.TLSFiles(t)
	dir := t.TempDir()
	src := "domain: " + redistest.Prefix(t) + "\ndescriptors:\n  - key: user\n    rate_limit: {unit: hour, requests_per_unit: 1}\n"
	if err := os.WriteFile(filepath.Join(dir, "a.yaml"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	grpcAddr, httpAddr := freeAddr(t), freeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	var stderr syncWriter
	go func() {
		done <- run(ctx, []string{"rls", "--redis", srv.URL(), "--config", dir, "--grpc", grpcAddr, "--http", httpAddr,
			"--grpc-tls-cert", server.CertFile, "--grpc-tls-key", server.KeyFile, "--grpc-tls-client-ca", client.CAFile}, io.Discard, &stderr)
	}()
	stop := sync.OnceValue(func() int { cancel(); return <-done })
	defer stop()
	testwait.Eventually(t, 15*time.Second, func() (bool, string) {
		resp, err := http.Get("http://" + httpAddr + "/healthz")
		if err == nil {
			resp.Body.Close()
		}
		return err == nil && resp.StatusCode == http.StatusOK, fmt.Sprintf("rls not serving: %v\n%s", err, stderr.String())
	})
	if want := "gRPC (TLS, client certificates required) on " + grpcAddr; !strings.Contains(stderr.String(), want) {
		t.Errorf("start-up line does not say %q:\n%s", want, stderr.String())
	}
	check := func(withCert bool) error {
		roots, err := pemfile.CertPool(server.CAFile)
		if err != nil {
			t.Fatal(err)
		}
		c := &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}
		if withCert {
			cert, err := pemfile.KeyPair(client.CertFile, client.KeyFile)
			if err != nil {
				t.Fatal(err)
			}
			c.Certificates = []tls.Certificate{cert}
		}
		cc, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(credentials.NewTLS(c)))
		if err != nil {
			t.Fatal(err)
		}
		defer cc.Close()
		cctx, ccancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer ccancel()
		resp, err := healthpb.NewHealthClient(cc).Check(cctx, &healthpb.HealthCheckRequest{})
		if err == nil && resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			return fmt.Errorf("status %s", resp.GetStatus())
		}
		return err
	}
	if err := check(true); err != nil {
		t.Errorf("with a client certificate: %v", err)
	}
	// The service refuses the handshake: the client reads its alert, or
	// finds the connection closed already.
	if err := check(false); status.Code(err) != codes.Unavailable {
		t.Errorf("without a client certificate: %v, want Unavailable", err)
	}
	if code := stop(); code != exitOK {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
}
