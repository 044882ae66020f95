package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/ratelab/ratelab/bench"
	"github.com/ratelab/ratelab/internal/redisrun/redistest"
	"github.com/ratelab/ratelab/internal/testwait"
)

// TestSourceIPsAuditTheEdgeKeyedByIP: ratelab edge --key-by ip over a real
// redis-server passes the audit when each consumer is sent from its own
// loopback address, Retry-After probes included, and the report names the
// addresses. Sent from one address with the identities in a header it
// ignores, the same gateway is found to share one limit across them.
func TestSourceIPsAuditTheEdgeKeyedByIP(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: a long test")
	}
	t.Parallel()
	redistest.Client(t, srv)
	addr := freeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	go func() {
		// A Redis timeout of seconds: a loaded machine must not fail a
		// decision open, an admission the limiter never made.
		done <- run(ctx, []string{"edge", "--redis", srv.URL(), "--listen", addr, "--admin", "", "--upstream", "builtin",
			"--redis-timeout", "5s", "--limit", "5/1s", "--key-by", "ip"}, io.Discard, io.Discard)
	}()
	defer func() { cancel(); <-done }()
	waitListening(t, addr)
	args := []string{"bench", "http", "http://" + addr + "/", "--rate", "45", "--duration", "2500ms", "--expect-limit", "5/1s", "--fail-on-leak"}

	code, stdout, stderr := ratelab(t, append(args, "--source-ips", "127.0.0.2-127.0.0.4", "--connections", "3")...)
	if code != exitOK || !strings.Contains(stdout, ": HELD: the worst consumer, 127.0.0.") || !strings.Contains(stdout, "Retry-After: honest") ||
		!strings.Contains(stdout, "3 consumers from 127.0.0.2-127.0.0.4") {
		t.Fatalf("from three addresses: exit %d, stderr %q\n%s", code, stderr, stdout)
	}
	code, stdout, stderr = ratelab(t, append(args, "--consumers", "3", "--no-probes")...)
	if code != exitThreshold || !strings.Contains(stderr, "share one limit across the identities sent") {
		t.Fatalf("from one address: exit %d, stderr %q\n%s", code, stderr, stdout)
	}
}

// TestSourceIPsAuditNginxKeyedByAddress: nginx's limit_req keyed by
// $binary_remote_addr, audited with each consumer sent from its own
// loopback address. rate=10r/s burst=9 nodelay admits a burst of 10, then
// one each 100 ms: at most 19 in any second, which the claim of 20/1s
// leaves an emission interval above (nginx decides on a millisecond clock
// it reads once per turn of its event loop, late under load). It passes;
// the same limit at 20r/s, twice the claim, exits 3 naming an address.
func TestSourceIPsAuditNginxKeyedByAddress(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: no nginx")
	}
	t.Parallel()
	for _, tc := range []struct {
		name        string
		rate, burst int
		code        int
		want        string
	}{
		{"holds the claim", 10, 9, exitOK, ": HELD: the worst consumer, 127.0.0."},
		{"allows twice the claim", 20, 19, exitThreshold, "--fail-on-leak: 127.0.0."},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			addr := limitReqNginx(t, tc.rate, tc.burst)
			code, stdout, stderr := ratelab(t, "bench", "http", "http://"+addr+"/", "--source-ips", "127.0.0.2-127.0.0.5", "--connections", "4",
				"--rate", "120", "--duration", "2s", "--expect-limit", "20/1s", "--fail-on-leak")
			if code != tc.code || !strings.Contains(stdout+stderr, tc.want) {
				t.Fatalf("exit %d, stderr %q\n%s\nwant exit %d and %q", code, stderr, stdout, tc.code, tc.want)
			}
		})
	}
}

// limitReqNginx runs nginx with limit_req keyed by the client's address
// at rate per second with burst (nodelay, 429 when over), in front of a
// 200, and returns where it listens. It skips t without nginx (and fails
// it under CI).
func limitReqNginx(t *testing.T, rate, burst int) string {
	t.Helper()
	bin, err := exec.LookPath("nginx")
	if err != nil {
		if redistest.InCI() {
			t.Fatalf("under CI: %v", err)
		}
		t.Skip(err)
	}
	dir := t.TempDir()
	// A port found free may be taken before nginx binds it: try others,
	// twice at most.
	for attempt := 1; ; attempt++ {
		addr := freeAddr(t)
		conf := fmt.Sprintf(`worker_processes 1;
daemon off;
pid %[1]s/nginx.pid;
error_log %[1]s/error.log warn;
events { worker_connections 1024; }
http {
    access_log off;
    client_body_temp_path %[1]s/client_body;
    proxy_temp_path %[1]s/proxy;
    fastcgi_temp_path %[1]s/fastcgi;
    uwsgi_temp_path %[1]s/uwsgi;
    scgi_temp_path %[1]s/scgi;
    limit_req_zone $binary_remote_addr zone=by_address:1m rate=%[3]dr/s;
    server {
        listen %[2]s;
        location / {
            limit_req zone=by_address burst=%[4]d nodelay;
            limit_req_status 429;
            empty_gif;
        }
    }
}
`, dir, addr, rate, burst)
		if err := os.WriteFile(filepath.Join(dir, "nginx.conf"), []byte(conf), 0o644); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(bin, "-p", dir, "-c", filepath.Join(dir, "nginx.conf"), "-e", filepath.Join(dir, "error.log"))
		var out strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		exited := make(chan struct{}) // closed when nginx has exited
		go func() { _ = cmd.Wait(); close(exited) }()
		t.Cleanup(func() {
			_ = cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-exited:
			case <-time.After(5 * time.Second):
				_ = cmd.Process.Kill()
				<-exited
			}
		})
		up := false
		testwait.Eventually(t, 10*time.Second, func() (bool, string) {
			select {
			case <-exited:
				return true, "" // it could not start: see why below
			default:
			}
			c, err := net.DialTimeout("tcp", addr, time.Second)
			if err != nil {
				return false, fmt.Sprintf("nginx does not listen on %s: %v", addr, err)
			}
			c.Close()
			up = true
			return true, ""
		})
		if up {
			return addr
		}
		log, _ := os.ReadFile(filepath.Join(dir, "error.log"))
		if attempt == 3 || !strings.Contains(string(log)+out.String(), "Address already in use") {
			t.Fatalf("nginx did not start: %s %s", out.String(), log)
		}
	}
}

// TestSourceIPsBadInput: source addresses that are not one per consumer,
// and run ids that are not words, are refused with exit 2 naming the
// flag, and nothing is sent.
func TestSourceIPsBadInput(t *testing.T) {
	t.Parallel()
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { n.Add(1) }))
	defer srv.Close()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--source-ips", "127.0.0.2-127.0.0.4", "--consumers", "2"}, "--source-ips gives 3 addresses for --consumers 2: one address per consumer"},
		{[]string{"--source-ips", "127.0.0.4-127.0.0.2"}, `--source-ips "127.0.0.4-127.0.0.2": the range 127.0.0.4-127.0.0.2 must ascend`},
		{[]string{"--source-ips", "127.0.0.2,127.0.0.3,127.0.0.2"}, "--source-ips gives 127.0.0.2 twice"},
		{[]string{"--source-ips", "localhost"}, `--source-ips "localhost": "localhost" is not an IP address`},
		{[]string{"--source-ips", "10.0.0.0-10.1.0.0"}, "--source-ips \"10.0.0.0-10.1.0.0\": more than 65536 addresses"},
		{[]string{"--source-ips", "0.0.0.0"}, "--source-ips 0.0.0.0 is not an address a connection can be sent from"},
		{[]string{"--run-id", "two words"}, `--run-id "two words": want up to 64 letters`},
		{[]string{"--run-id", strings.Repeat("x", 65)}, "--run-id"},
	} {
		before := n.Load()
		code, _, stderr := ratelab(t, append([]string{"bench", "http", srv.URL, "--rate", "50", "--duration", "200ms"}, tc.args...)...)
		if code != exitUsage || !strings.Contains(stderr, tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want 2 and %q", tc.args, code, stderr, tc.want)
		}
		if n.Load() != before {
			t.Errorf("%v: requests were sent", tc.args)
		}
	}
}

// TestSourceIPsDefaultConnections: with --source-ips and no --connections,
// the connections are a multiple of the addresses, at least the default
// 10, so that each keeps to one address; --connections given is kept.
func TestSourceIPsDefaultConnections(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	defer srv.Close()
	for _, tc := range []struct {
		args []string
		want int
	}{
		{[]string{"--source-ips", "127.0.0.2-127.0.0.4"}, 12},
		{[]string{"--source-ips", "127.0.0.2-127.0.0.14"}, 13},
		{[]string{"--source-ips", "127.0.0.2-127.0.0.4", "--connections", "2"}, 2},
	} {
		code, stdout, stderr := ratelab(t, append([]string{"bench", "http", srv.URL, "--rate", "400", "--requests", "26", "-o", "json"}, tc.args...)...)
		if code != exitOK {
			t.Fatalf("%v: exit %d, %s", tc.args, code, stderr)
		}
		var res bench.Result
		decodeJSON(t, stdout, &res)
		if res.Config.Connections != tc.want || res.Requests != 26 || res.Errors != 0 {
			t.Errorf("%v: %d connections, %d requests, %d errors; want %d connections", tc.args, res.Config.Connections, res.Requests, res.Errors, tc.want)
		}
	}
}
