package main

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ratelab/ratelab/audit"
	"github.com/ratelab/ratelab/bench"
	"github.com/ratelab/ratelab/internal/redisrun/redistest"
	"github.com/ratelab/ratelab/internal/testwait"
)

// limitReq runs nginx with limit_req keyed by key (with the http block's
// preamble, such as a map, before it), rate r/s and burst, nodelay,
// answering 429 when it denies and a small image when it admits (a
// content handler: a return would answer before limit_req is asked); it
// returns its URL.
func limitReq(t *testing.T, preamble, key string, rate, burst int) string {
	t.Helper()
	return "http://" + startNginx(t, fmt.Sprintf(`%[1]s
    limit_req_zone %[2]s zone=perkey:1m rate=%[3]dr/s;
    limit_req_status 429;`, preamble, key, rate),
		fmt.Sprintf(`location / { limit_req zone=perkey burst=%d nodelay; empty_gif; }`, burst)) + "/ok"
}

// startNginx runs nginx, one worker, with http's directives in its http
// block and server's in its one server, listening on a free loopback
// port; it returns the address once nginx accepts there, and stops nginx
// when the test ends.
func startNginx(t *testing.T, http, server string) string {
	t.Helper()
	if testing.Short() {
		t.Skip("-short: no nginx")
	}
	bin, err := exec.LookPath("nginx")
	if err != nil {
		if redistest.InCI() {
			t.Fatalf("under CI: %v", err)
		}
		t.Skip(err)
	}
	dir := t.TempDir()
	addr := freeAddr(t)
	conf := fmt.Sprintf(`worker_processes 1;
daemon off;
pid %[1]s/nginx.pid;
error_log %[1]s/error.log warn;
events { worker_connections 1024; }
http {
    access_log off;
    client_body_temp_path %[1]s/body;
    proxy_temp_path %[1]s/proxy;
    fastcgi_temp_path %[1]s/fastcgi;
    uwsgi_temp_path %[1]s/uwsgi;
    scgi_temp_path %[1]s/scgi;
    %[3]s
    server {
        listen %[2]s;
        %[4]s
    }
}
`, dir, addr, http, server)
	path := filepath.Join(dir, "nginx.conf")
	if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-p", dir, "-c", path, "-e", filepath.Join(dir, "error.log"))
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{}) // closed once nginx has exited, with waitErr set
	var waitErr error
	go func() {
		waitErr = cmd.Wait()
		close(exited)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		<-exited
	})
	testwait.Eventually(t, 10*time.Second, func() (bool, string) {
		select {
		case <-exited:
			log, _ := os.ReadFile(filepath.Join(dir, "error.log"))
			t.Fatalf("nginx exited (%v): %s", waitErr, log)
		default:
		}
		c, err := net.DialTimeout("tcp", addr, 100*time.Millisecond)
		if err != nil {
			return false, "nginx not accepting on " + addr + ": " + err.Error()
		}
		c.Close()
		return true, ""
	})
	return addr
}

// TestNginxLimitReqAudited: nginx's limit_req at 10 per second with a
// burst of 19, keyed by an API key in the query ($arg_apikey) or by a
// Bearer token (a map on $http_authorization), audited as its clients talk
// to it: each key of --consumers-from in the query or in the token, or a
// token minted per consumer. limit_req admits burst + 1 at once to a key
// it has not seen and then one every 1/rate (in whole milliseconds, on one
// clock), which is GCRA's guarantee for 20 per 2 s: the correct config
// holds it (exit 0), and one that allows twice as much (20 per second,
// burst 39) exits 3 with --fail-on-leak. The burst is generous, so that
// admissions, not timing, decide; each message names an identity sent
// (--show-identities: a key of --consumers-from is otherwise named by its
// pseudonym).
func TestNginxLimitReqAudited(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	keys := filepath.Join(dir, "keys")
	if err := os.WriteFile(keys, []byte("# keys of the test plan\nak_live_3f9a1c\nak_live_77be02\nak_live_c41d5e\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	const bearer = `map $http_authorization $token { "~^Bearer (.+)$" $1; default ""; }`
	for _, tc := range []struct {
		name, preamble, key string
		query               bool // the URL carries the key; else -H
		flags               []string
		names               []string // the identities the messages may name
	}{
		{"apikey", "", "$arg_apikey", true, []string{"--consumers-from", keys, "--show-identities"},
			[]string{"ak_live_3f9a1c", "ak_live_77be02", "ak_live_c41d5e"}},
		{"bearer", bearer, "$token", false, []string{"-H", "Authorization: Bearer {consumer}", "--consumers-from", keys, "--show-identities"},
			[]string{"ak_live_3f9a1c", "ak_live_77be02", "ak_live_c41d5e"}},
		{"jwt", bearer, "$token", false, []string{"-H", "Authorization: Bearer {jwt}", "--jwt-secret", "test secret",
			"--jwt-claim", "sub=user-{consumer}", "--jwt-claim", "exp:=4102444800", "--consumers", "3"},
			[]string{"user-consumer-0", "user-consumer-1", "user-consumer-2"}},
	} {
		for _, config := range []struct {
			name        string
			rate, burst int
			code        int
		}{
			{"correct", 10, 19, exitOK},
			{"twice", 20, 39, exitThreshold},
		} {
			t.Run(tc.name+"/"+config.name, func(t *testing.T) {
				t.Parallel()
				url := limitReq(t, tc.preamble, tc.key, config.rate, config.burst)
				if tc.query {
					url += "?apikey={consumer}"
				}
				args := append([]string{"bench", "http", url, "--rate", "120", "--connections", "6", "--duration", "3s",
					"--expect-limit", "20/2s", "--expect-algorithm", "gcra", "--no-probes", "--fail-on-leak"}, tc.flags...)
				code, stdout, stderr := ratelab(t, append(args, "-o", "json")...)
				var res bench.Result
				decodeJSON(t, stdout, &res)
				a := res.Audit
				if code != config.code || a == nil || res.StatusCounts["429"] == 0 || res.Failures() != 0 {
					t.Fatalf("exit %d, want %d; stderr %q; statuses %v, audit %+v", code, config.code, stderr, res.StatusCounts, a)
				}
				l := a.Limits[0]
				if l.Consumers != 3 || !contains(tc.names, l.WorstConsumer) {
					t.Fatalf("%d consumers, the worst %q: want 3, named by the identities sent %q", l.Consumers, l.WorstConsumer, tc.names)
				}
				for _, w := range l.WorstConsumers {
					if !contains(tc.names, w.Consumer) {
						t.Fatalf("consumer %q: not an identity sent (%q)", w.Consumer, tc.names)
					}
				}
				switch config.code {
				case exitOK:
					if a.Verdict != audit.Held || l.OverAdmitted != 0 {
						t.Fatalf("%s %q: a correct limit_req was accused", a.Verdict, a.Reasons)
					}
				default:
					said := regexp.MustCompile(`--fail-on-leak: (\S+) got \d+ through in`).FindStringSubmatch(stderr)
					if a.Verdict != audit.Leaked || said == nil || !contains(tc.names, said[1]) {
						t.Fatalf("%s %q; stderr %q: want leaked, naming an identity sent", a.Verdict, a.Reasons, stderr)
					}
				}
				// The table names the same identities.
				code, stdout, _ = ratelab(t, args...)
				if code != config.code || !containsAny(stdout, tc.names) {
					t.Fatalf("exit %d:\n%s", code, stdout)
				}
			})
		}
	}
}

func contains(names []string, s string) bool {
	for _, n := range names {
		if n == s {
			return true
		}
	}
	return false
}

func containsAny(text string, names []string) bool {
	for _, n := range names {
		if strings.Contains(text, n) {
			return true
		}
	}
	return false
}

// burstAudit is bench http's audit of url against claim, at 100 requests
// a second for each of three consumers, ten times the rate of the limits
// audited with it, for three seconds: a burst comes within a few tens of
// milliseconds, too soon for the refill to hide it. It returns the exit,
// the audit and stderr.
func burstAudit(t *testing.T, url, claim string, args ...string) (int, *audit.Audit, string) {
	t.Helper()
	code, stdout, stderr := ratelab(t, append([]string{"bench", "http", url, "--consumers", "3", "--rate", "300", "--connections", "6", "--duration", "3s",
		"--expect-limit", claim, "--no-probes", "--fail-on-leak", "--fail-on-under", "0.01", "-o", "json"}, args...)...)
	var res bench.Result
	decodeJSON(t, stdout, &res)
	if res.Audit == nil || len(res.Audit.Limits) != 1 || res.Failures() != 0 || res.StatusCounts["429"] == 0 {
		t.Fatalf("exit %d, stderr %q: statuses %v, audit %+v", code, stderr, res.StatusCounts, res.Audit)
	}
	return code, res.Audit, stderr
}

// TestNginxRateAndBurst: nginx's limit_req_zone $arg_key rate=10r/s with
// limit_req burst=5 nodelay, keyed by ?key=, is stated as 10/1s:gcra:burst=6
// (nginx admits its burst and one more at once): that claim holds, with no
// denial the rule would have admitted (--fail-on-under 0.01, exit 0); a
// claim of a smaller burst (3) or of a slower rate (5/1s with the same
// burst) is caught as a leak (exit 3).
func TestNginxRateAndBurst(t *testing.T) {
	t.Parallel()
	url := limitReq(t, "", "$arg_key", 10, 5)
	for i, tc := range []struct {
		claim string
		code  int
	}{
		{"10/1s:gcra:burst=6", exitOK},
		{"10/1s:gcra:burst=3", exitThreshold},
		{"5/1s:gcra:burst=6", exitThreshold},
	} {
		t.Run(tc.claim, func(t *testing.T) {
			// Keys of their own: each audit begins with full buckets.
			code, a, stderr := burstAudit(t, fmt.Sprintf("%s?key=run%d-{consumer}", url, i), tc.claim)
			l := a.Limits[0]
			if code != tc.code {
				t.Fatalf("exit %d, want %d; stderr %q; audit %s %q, limit %+v", code, tc.code, stderr, a.Verdict, a.Reasons, l)
			}
			if tc.code == exitOK {
				if a.Verdict != audit.Held || l.OverAdmitted != 0 || l.DenialsJudged == 0 || l.UnderAdmitted != 0 || l.WorstWindowAdmitted < 6 {
					t.Fatalf("%s %q: nginx's limit_req accused under its own rate and burst: %+v", a.Verdict, a.Reasons, l)
				}
				return
			}
			if a.Verdict != audit.Leaked || l.OverAdmitted == 0 || !strings.Contains(stderr, "--fail-on-leak") {
				t.Fatalf("%s %q, stderr %q: a claim nginx exceeds went unseen", a.Verdict, a.Reasons, stderr)
			}
		})
	}
}

// TestEdgeRateAndBurst: ratelab edge with --limit 10/1s:ALG:burst=6, on
// either engine, admits 6 at one instant to a consumer it has not seen
// (RateLimit's remaining counts down from 5, RateLimit-Policy gives the
// rate as q and w and the burst beside them) and passes the audit nginx's
// limit_req passes (TestNginxRateAndBurst).
func TestEdgeRateAndBurst(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ engine, algorithm string }{
		{"go", "gcra"},
		{"go", "token-bucket"},
		{"openresty", "gcra"},
	} {
		t.Run(tc.engine+"/"+tc.algorithm, func(t *testing.T) {
			t.Parallel()
			needNginx(t, tc.engine)
			limit := "10/1s:" + tc.algorithm + ":burst=6"
			e := serveEdge(t, "--redis", srv.URL(), "--engine", tc.engine, "--limit", limit, "--key-by", "header:X-Consumer-Id",
				"--on-redis-error", "closed")
			consumer := redistest.Prefix(t) + "at-once"
			for i := range 6 {
				resp := e.getAs(t, consumer)
				if resp.StatusCode != http.StatusOK {
					t.Fatalf("request %d of the burst: %d", i+1, resp.StatusCode)
				}
				if i == 0 {
					if got := resp.Header.Get("RateLimit"); got != `"default";r=5;t=1` {
						t.Errorf("RateLimit %q after the first request: want 5 remaining of the burst", got)
					}
					if got := resp.Header.Get("RateLimit-Policy"); got != `"default";q=10;w=1;ratelab-burst=6` {
						t.Errorf("RateLimit-Policy %q", got)
					}
				}
			}
			// Consumers of its own: the engines share the package's Redis,
			// where consumer-0 of another subtest would be another counter's.
			code, a, stderr := burstAudit(t, e.url(), "10/1s:"+tc.algorithm+":burst=6",
				"--consumer-header", "X-Load-Consumer", "--header", "X-Consumer-Id: "+redistest.Prefix(t)+"-{consumer}")
			if l := a.Limits[0]; code != exitOK || a.Verdict != audit.Held || l.UnderAdmitted != 0 || l.DenialsJudged == 0 || l.Headers.Violations != 0 {
				t.Fatalf("exit %d, stderr %q: %s %q, limit %+v", code, stderr, a.Verdict, a.Reasons, l)
			}
		})
	}
}
