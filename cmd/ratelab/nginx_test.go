package main

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

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
    limit_req_zone %[4]s zone=perkey:1m rate=%[5]dr/s;
    limit_req_status 429;
    server {
        listen %[2]s;
        location / { limit_req zone=perkey burst=%[6]d nodelay; empty_gif; }
    }
}
`, dir, addr, preamble, key, rate, burst)
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
	return "http://" + addr + "/ok"
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
					if a.Verdict != bench.Held || l.OverAdmitted != 0 {
						t.Fatalf("%s %q: a correct limit_req was accused", a.Verdict, a.Reasons)
					}
				default:
					said := regexp.MustCompile(`--fail-on-leak: (\S+) got \d+ through in`).FindStringSubmatch(stderr)
					if a.Verdict != bench.Leaked || said == nil || !contains(tc.names, said[1]) {
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
