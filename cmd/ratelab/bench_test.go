package main

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
)

// TestBenchThresholdFlags: without --max-error-rate a run with a 5xx
// passes; --max-error-rate 0 fails it on its one 5xx (exit 3, after the
// report); a rate outside 0 to 1 is refused before anything is sent.
func TestBenchThresholdFlags(t *testing.T) {
	t.Parallel()
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if n.Add(1) == 1 {
			w.WriteHeader(http.StatusInternalServerError)
		}
	}))
	defer srv.Close()
	run := []string{"bench", "http", srv.URL, "--rate", "0", "--connections", "2", "--requests", "20"}
	for _, tc := range []struct {
		flags []string
		code  int
		want  string // in stderr
	}{
		{nil, exitOK, ""},
		{[]string{"--max-error-rate", "0.5"}, exitOK, ""},
		{[]string{"--max-error-rate", "0"}, exitThreshold, "--max-error-rate: 0.0500 of requests failed, above 0"},
		{[]string{"--max-error-rate", "-1"}, exitUsage, "--max-error-rate must be between 0 and 1 (got -1)"},
		{[]string{"--max-error-rate", "1.5"}, exitUsage, "--max-error-rate must be between 0 and 1 (got 1.5)"},
		{[]string{"--max-error-rate", "few"}, exitUsage, `invalid argument "few" for "--max-error-rate"`},
	} {
		t.Run(strings.Join(append([]string{"flags"}, tc.flags...), " "), func(t *testing.T) {
			n.Store(0)
			code, stdout, stderr := ratelab(t, append(run, tc.flags...)...)
			if code != tc.code || !strings.Contains(stderr, tc.want) {
				t.Fatalf("exit %d, stderr %q; want %d and %q", code, stderr, tc.code, tc.want)
			}
			switch sent := n.Load(); {
			case code == exitUsage && (sent != 0 || stdout != ""):
				t.Fatalf("refused, yet %d requests were sent and a report printed: %q", sent, stdout)
			case code != exitUsage && (sent != 20 || !strings.Contains(stdout, "ratelab bench http")):
				t.Fatalf("%d requests sent, report %q", sent, stdout)
			}
		})
	}
}

// TestBenchMaxInFlightIsGone: --max-in-flight, which did nothing, is no
// flag, and the JSON has no max_in_flight (one request per connection is
// what connections says).
func TestBenchMaxInFlightIsGone(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	defer srv.Close()
	code, stdout, stderr := ratelab(t, "bench", "http", srv.URL, "--requests", "5", "--rate", "0", "--max-in-flight", "5")
	if code != exitUsage || !strings.Contains(stderr, "unknown flag: --max-in-flight") || stdout != "" {
		t.Fatalf("--max-in-flight: exit %d, stderr %q, stdout %q", code, stderr, stdout)
	}
	code, stdout, stderr = ratelab(t, "bench", "http", srv.URL, "--requests", "5", "--rate", "0", "-o", "json")
	var res struct{ Config map[string]any }
	decodeJSON(t, stdout, &res)
	if _, ok := res.Config["max_in_flight"]; code != exitOK || ok || res.Config["connections"] == nil {
		t.Fatalf("exit %d (%s), config %v", code, stderr, res.Config)
	}
}
