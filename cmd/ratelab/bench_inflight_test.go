package main

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ratelab/ratelab/audit"
	"github.com/ratelab/ratelab/bench"
)

// slowBackend answers each request after holding it hold: an upstream
// whose service time is at least hold.
func slowBackend(t *testing.T, hold time.Duration) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-time.After(hold):
		case <-r.Context().Done():
		}
		_, _ = w.Write([]byte("ok"))
	}))
	t.Cleanup(srv.Close)
	return srv
}

// semaphoreGateway admits at most limit requests in flight per key (the
// query's key), each held hold before its answer, and denies the rest
// with a 429 at once: a buffered channel of limit per key.
func semaphoreGateway(t *testing.T, limit int, hold time.Duration) string {
	t.Helper()
	sems := map[string]chan struct{}{}
	var mu sync.Mutex
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := r.URL.Query().Get("key")
		mu.Lock()
		sem, ok := sems[key]
		if !ok {
			sem = make(chan struct{}, limit)
			sems[key] = sem
		}
		mu.Unlock()
		select {
		case sem <- struct{}{}:
		default:
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		defer func() { <-sem }()
		time.Sleep(hold)
		_, _ = w.Write([]byte("ok"))
	}))
	t.Cleanup(srv.Close)
	return srv.URL + "/?key={consumer}"
}

// inFlightAudit runs bench http at url with args and returns its exit
// code, its in-flight audit and its stderr.
func inFlightAudit(t *testing.T, url string, args ...string) (int, *bench.Result, string) {
	t.Helper()
	code, stdout, stderr := ratelab(t, append([]string{"bench", "http", url, "-o", "json"}, args...)...)
	var res bench.Result
	decodeJSON(t, stdout, &res)
	if res.InFlightAudit == nil {
		t.Fatalf("exit %d, no in-flight audit; stderr %q", code, stderr)
	}
	return code, &res, stderr
}

// TestInFlightGatewaysAudited: a semaphore of 5 per consumer, under the
// closed model's default of twice the limit outstanding per consumer, is
// never accused of over- or under-admission; a gateway that lets 8 in
// flight is caught when held to 5, with the flights that prove it.
func TestInFlightGatewaysAudited(t *testing.T) {
	t.Parallel()
	const hold = 100 * time.Millisecond
	t.Run("correct", func(t *testing.T) {
		t.Parallel()
		url := semaphoreGateway(t, 5, hold)
		code, res, stderr := inFlightAudit(t, url, "--rate", "0", "--duration", "2s", "--consumers", "3",
			"--expect-in-flight", "5", "--hold", hold.String(), "--fail-on-leak", "--allow-no-verdict", "--fail-on-under", "0")
		f := res.InFlightAudit
		// Held, or not reached when a loaded machine stretches the flights
		// so that fewer than 5 were surely held at once: never accused.
		reached := f.Verdict == audit.Held || f.Verdict == audit.NotReached
		if code != exitOK || !reached || f.MostSurelyHeld > 5 || f.UnderAdmitted != 0 {
			t.Fatalf("exit %d, %+v; stderr %q", code, f, stderr)
		}
		if res.Config.Connections != 30 {
			t.Fatalf("%d connections, want 2 × 5 per consumer, 30", res.Config.Connections)
		}
	})
	t.Run("beside a rate limit", func(t *testing.T) {
		t.Parallel()
		url := semaphoreGateway(t, 5, hold)
		code, res, stderr := inFlightAudit(t, url, "--rate", "0", "--duration", "1s", "--consumers", "2",
			"--expect-in-flight", "5", "--hold", hold.String(), "--expect-limit", "1000/1s", "--no-probes")
		if code != exitOK || res.Audit == nil || len(res.Audit.Limits) != 1 || res.Audit.Limits[0].Verdict == audit.Leaked ||
			res.InFlightAudit.Verdict == audit.Leaked || res.InFlightAudit.Requests != res.Audit.Samples {
			t.Fatalf("exit %d, rate audit %+v, in-flight audit %+v; stderr %q", code, res.Audit, res.InFlightAudit, stderr)
		}
	})
	t.Run("eight let through", func(t *testing.T) {
		t.Parallel()
		url := semaphoreGateway(t, 8, hold)
		code, res, stderr := inFlightAudit(t, url, "--rate", "0", "--duration", "2s", "--consumers", "2",
			"--expect-in-flight", "5", "--hold", hold.String(), "--fail-on-leak")
		f := res.InFlightAudit
		if code != exitThreshold || f.Verdict != audit.Leaked || f.MostSurelyHeld <= 5 || int64(len(f.Example)) != f.MostSurelyHeld ||
			!strings.Contains(stderr, "--fail-on-leak: in flight:") {
			t.Fatalf("exit %d, %+v; stderr %q", code, f, stderr)
		}
		// The example's flights prove it: each ends its latest start before
		// every other's earliest end.
		h := hold.Microseconds()
		for i, a := range f.Example {
			for j, b := range f.Example {
				if i != j && a.DoneMicros-h >= b.SentMicros+h {
					t.Fatalf("flights %v and %v need not have been held at once", a, b)
				}
			}
		}
	})
	t.Run("claimed above the limit", func(t *testing.T) {
		t.Parallel()
		// Holds long beside the run: the five of a consumer are admitted
		// and freed together, a few times a run, and every denial between
		// comes while five at most could be held. Only a denial whose
		// flight spans a change of holders is left unjudged, so however a
		// loaded machine stretches the flights, most are proven wrongful.
		const long = 400 * time.Millisecond
		url := semaphoreGateway(t, 5, long)
		code, res, stderr := inFlightAudit(t, url, "--rate", "0", "--duration", "2s", "--consumers", "2",
			"--expect-in-flight", "6", "--hold", long.String(), "--in-flight-per-consumer", "9", "--fail-on-under", "0.05")
		f := res.InFlightAudit
		if code != exitThreshold || f.Verdict == audit.Leaked || f.MostSurelyHeld > 5 || f.UnderAdmittedShare <= 0.05 ||
			!strings.Contains(stderr, "--fail-on-under: in flight:") {
			t.Fatalf("exit %d, %+v; stderr %q", code, f, stderr)
		}
		if f.Verdict != audit.NotReached || !strings.Contains(strings.Join(f.Reasons, "; "), "the gateway, not the load") {
			t.Fatalf("verdict %s, reasons %q; want not reached, the gateway keeping fewer in flight", f.Verdict, f.Reasons)
		}
	})
}

// TestNginxLimitConnAudited: nginx's limit_conn of 5 per API key in the
// query ($arg_key) in front of a backend that holds each request 200 ms:
// held at 5 (exit 0, no under-admission beyond 5%), and a claim of 4
// caught (exit 3).
func TestNginxLimitConnAudited(t *testing.T) {
	t.Parallel()
	backend := slowBackend(t, 200*time.Millisecond)
	addr := startNginx(t, `limit_conn_zone $arg_key zone=perkey:1m;
    limit_conn_status 429;`,
		fmt.Sprintf(`location / { limit_conn perkey 5; proxy_pass %s; }`, backend.URL))
	url := "http://" + addr + "/?key={consumer}"
	for _, tc := range []struct {
		claim string
		code  int
		want  audit.Verdict
	}{{"5", exitOK, audit.Held}, {"4", exitThreshold, audit.Leaked}} {
		t.Run("claim "+tc.claim, func(t *testing.T) {
			code, res, stderr := inFlightAudit(t, url, "--rate", "0", "--duration", "3s", "--consumers", "3",
				"--expect-in-flight", tc.claim, "--hold", "200ms", "--fail-on-leak", "--fail-on-under", "0.05")
			f := res.InFlightAudit
			if code != tc.code || f.Verdict != tc.want || f.MostSurelyHeld > 5 || res.Failures() != 0 {
				t.Fatalf("exit %d, want %d; %+v; statuses %v; stderr %q", code, tc.code, f, res.StatusCounts, stderr)
			}
		})
	}
}

func TestInFlightFlagsRefused(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--hold", "200ms"}, "--hold needs --expect-in-flight"},
		{[]string{"--expect-in-flight", "5"}, "--hold must be"},
		{[]string{"--expect-in-flight", "5", "--hold", "1s", "--in-flight-per-consumer", "3", "--connections", "4"}, "--in-flight-per-consumer sets the connections"},
		{[]string{"--expect-in-flight", "5", "--hold", "1s", "--shard", "0/2", "--consumers", "2"}, "--shard is not for --expect-in-flight"},
		{[]string{"--expect-in-flight", "-1", "--hold", "1s"}, "--expect-in-flight must be at least 1"},
	} {
		code, _, stderr := ratelab(t, append([]string{"bench", "http", "http://127.0.0.1:1/", "--duration", "1s"}, tc.args...)...)
		if code != exitUsage || !strings.Contains(stderr, tc.want) {
			t.Errorf("%q: exit %d, stderr %q; want exit 2 saying %q", tc.args, code, stderr, tc.want)
		}
	}
}
