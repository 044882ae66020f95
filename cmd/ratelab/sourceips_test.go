package main

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/ratelab/ratelab/bench"
	"github.com/ratelab/ratelab/internal/redisrun/redistest"
)

// TestSourceIPsAuditTheEdgeKeyedByIP: ratelab edge --key-by ip over a real
// redis-server passes the audit when each consumer is sent from its own
// loopback address, Retry-After probes included, and the report names the
// addresses. Sent from one address with the identities in a header it
// ignores, the same gateway is found to share one limit across them.
// The held run's window is longer than the run, so that a machine too
// loaded to send a fifth of the rate asked still fills each address's
// window; the shared run's is shorter, so that its denials are judged.
func TestSourceIPsAuditTheEdgeKeyedByIP(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: a long test")
	}
	t.Parallel()
	redistest.Client(t, srv)
	load := func(limit string) []string {
		url := serveEdge(t, "--redis", srv.URL(), "--limit", limit, "--key-by", "ip").url()
		return []string{"bench", "http", url, "--rate", "45", "--duration", "2500ms", "--expect-limit", limit, "--fail-on-leak"}
	}

	code, stdout, stderr := ratelab(t, append(load("5/3s"), "--source-ips", "127.0.0.2-127.0.0.4", "--connections", "3")...)
	if code != exitOK || !strings.Contains(stdout, ": HELD: the worst consumer, 127.0.0.") || !strings.Contains(stdout, "Retry-After: honest") ||
		!strings.Contains(stdout, "3 consumers from 127.0.0.2-127.0.0.4") {
		t.Fatalf("from three addresses: exit %d, stderr %q\n%s", code, stderr, stdout)
	}
	code, stdout, stderr = ratelab(t, append(load("5/1s"), "--consumers", "3", "--no-probes")...)
	if code != exitThreshold || !strings.Contains(stderr, "share one limit across the identities sent") {
		t.Fatalf("from one address: exit %d, stderr %q\n%s", code, stderr, stdout)
	}
}

// TestSourceIPsAuditTheRulesKeyedByAddress: ratelab edge with a rules file
// that gives each remote_address 6 per 10 s, audited by that file with
// each consumer sent from its own loopback address, passes (exit 0): the
// audit judges each address on a counter of its own, as the gateway
// keeps them, and names them. A claim of half that limit exits 3. The
// window is longer than the run, so that even a machine too loaded to send
// a fifth of the rate asked reaches the limit.
func TestSourceIPsAuditTheRulesKeyedByAddress(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: a long test")
	}
	t.Parallel()
	redistest.Client(t, srv)
	byAddress := func(limit int) string {
		return fmt.Sprintf("domain: %q\ndescriptors:\n  - key: remote_address\n    rate_limit: {name: per-address, window: 10s, requests_per_unit: %d}\n",
			redistest.Prefix(t), limit)
	}
	for _, tc := range []struct {
		name  string
		claim int
		code  int
		want  string
	}{
		{"holds the file", 6, exitOK, ": HELD: the worst consumer, 127.0.0."},
		{"a claim of half", 3, exitThreshold, "--fail-on-leak: 127.0.0."},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// A gateway of its own: the other's addresses have spent their
			// window.
			url := serveRules(t, "go", writeRules(t, "rules.yaml", byAddress(6)))
			claim := writeRules(t, "claim.yaml", byAddress(tc.claim))
			code, stdout, stderr := ratelab(t, "bench", "http", url, "--source-ips", "127.0.0.2-127.0.0.4", "--connections", "3",
				"--rate", "54", "--duration", "2500ms", "--expect-rules", claim, "--no-probes", "--fail-on-leak")
			if code != tc.code || !strings.Contains(stdout+stderr, tc.want) || !strings.Contains(stdout, "3 consumers from 127.0.0.2-127.0.0.4") {
				t.Fatalf("exit %d, stderr %q\n%s\nwant exit %d and %q", code, stderr, stdout, tc.code, tc.want)
			}
		})
	}
}

// TestSourceIPsAuditNginxKeyedByAddress: nginx's limit_req keyed by
// $binary_remote_addr, audited with each consumer sent from its own
// loopback address. rate=10r/s burst=9 nodelay admits a burst of 10, then
// one each 100 ms; the claim 11/1s:gcra (a burst of 11, then 11 a second)
// is reached once the burst is spent, and leaves nginx a request and a
// tenth of its rate to spare (it decides on a millisecond clock it reads
// once per turn of its event loop, late under load). It passes; the same
// limit at 20r/s, about twice the claim, exits 3 naming an address.
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
			url := limitReq(t, "", "$binary_remote_addr", tc.rate, tc.burst)
			code, stdout, stderr := ratelab(t, "bench", "http", url, "--source-ips", "127.0.0.2-127.0.0.5", "--connections", "4",
				"--rate", "120", "--duration", "2s", "--expect-limit", "11/1s:gcra", "--fail-on-leak")
			if code != tc.code || !strings.Contains(stdout+stderr, tc.want) {
				t.Fatalf("exit %d, stderr %q\n%s\nwant exit %d and %q", code, stderr, stdout, tc.code, tc.want)
			}
		})
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
