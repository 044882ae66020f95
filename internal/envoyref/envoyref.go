// Package envoyref runs envoyproxy/ratelimit, the reference rate limit
// service, for the tests that hold ratelab's service and bench rls beside
// it. docs/envoy.md says how to build its service_cmd.
package envoyref

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ratelab/ratelab/internal/testwait"
)

// Bin is envoyproxy/ratelimit's service_cmd: the file
// $RATELAB_ENVOY_RATELIMIT names, else service_cmd on PATH. Without it the
// test is skipped.
func Bin(t testing.TB) string {
	t.Helper()
	if p := os.Getenv("RATELAB_ENVOY_RATELIMIT"); p != "" {
		return p
	}
	p, err := exec.LookPath("service_cmd")
	if err != nil {
		t.Skip("envoyproxy/ratelimit not found: set RATELAB_ENVOY_RATELIMIT to its service_cmd (docs/envoy.md)")
	}
	return p
}

// Start runs bin on the Redis at redisAddr with files (a name and its
// YAML each) as its runtime's config, until its /healthcheck answers, and
// stops it when the test ends. It returns its gRPC address and the
// directory of its config files.
func Start(t testing.TB, bin, redisAddr string, files map[string]string) (grpcAddr, dir string) {
	t.Helper()
	root := t.TempDir()
	dir = filepath.Join(root, "ratelimit", "config")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, src := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// A port free a moment ago may be taken by another test before the
	// service binds it: then it exits saying so, and starts again on others.
	for attempt := 1; ; attempt++ {
		if addr, ok := start(t, bin, redisAddr, root, attempt == maxAttempts); ok {
			return addr, dir
		}
	}
}

// maxAttempts bounds the starts of one service whose ports were taken.
const maxAttempts = 5

// start starts bin once, on ports free a moment ago, and waits for it to
// serve. It returns false when the service exited because one of its
// ports was taken meanwhile, unless last, when that fails the test too.
func start(t testing.TB, bin, redisAddr, root string, last bool) (string, bool) {
	t.Helper()
	grpcPort, httpPort, debugPort := freePort(t), freePort(t), freePort(t)
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, bin)
	cmd.Env = append(os.Environ(), "RUNTIME_ROOT="+root, "RUNTIME_SUBDIRECTORY=ratelimit", "RUNTIME_WATCH_ROOT=false",
		"USE_STATSD=false", "REDIS_SOCKET_TYPE=tcp", "REDIS_URL="+redisAddr, "LOG_LEVEL=warn",
		"GRPC_PORT="+grpcPort, "PORT="+httpPort, "DEBUG_PORT="+debugPort)
	var out lockedBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		cancel()
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() { cancel(); <-exited })
	client := &http.Client{Timeout: 5 * time.Second}
	taken := false
	testwait.Eventually(t, 30*time.Second, func() (bool, string) {
		select {
		case <-exited:
			if taken = strings.Contains(out.String(), "address already in use"); taken && !last {
				return true, ""
			}
			t.Fatalf("envoyproxy/ratelimit exited:\n%s", out.String())
		default:
		}
		resp, err := client.Get("http://127.0.0.1:" + httpPort + "/healthcheck")
		if err != nil {
			return false, fmt.Sprintf("envoyproxy/ratelimit not serving: %v", err)
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, fmt.Sprintf("healthcheck %d", resp.StatusCode)
	})
	return "127.0.0.1:" + grpcPort, !taken
}

// freePort is a loopback port free a moment ago.
func freePort(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
}

// lockedBuffer is the service's output, written by its two pipes at once.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
