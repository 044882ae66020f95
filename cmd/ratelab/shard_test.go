package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"

	"github.com/ratelab/ratelab/audit"
	"github.com/ratelab/ratelab/bench"
	"github.com/ratelab/ratelab/internal/hdr"
)

// ratelabProcess runs ratelab as a process of its own (this test binary,
// told to be ratelab) and returns its exit code, stdout and stderr.
func ratelabProcess(t *testing.T, args ...string) (int, []byte, string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), "RATELAB_TEST_MAIN=1", "REDIS_URL=")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return code, stdout.Bytes(), stderr.String()
}

// leakyServer advertises a limit of advertised per second per consumer
// (RateLimit-Policy) and admits twice as many in each second since it
// started.
func leakyServer(t *testing.T, advertised int) *httptest.Server {
	var mu sync.Mutex
	count := map[string]int{}
	start := time.Now()
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		key := r.Header.Get("X-Consumer-Id") + "/" + strconv.Itoa(int(time.Since(start)/time.Second))
		count[key]++
		w.Header().Set("RateLimit-Policy", fmt.Sprintf(`"default";q=%d;w=1`, advertised))
		if count[key] > 2*advertised {
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusTooManyRequests)
		}
	}))
	t.Cleanup(s.Close)
	return s
}

// TestShardsInProcesses: three ratelab processes, shards of one run that
// start at the same instant, share the consumers of a server that admits
// twice the limit it advertises. Each consumer is sent 36 requests a
// second, 12 by each shard: the server admits them all, 36 where it
// promised 20. No shard alone sees the limit reached (12 of 20, room for a
// stalled shard's catch-up), so to each it is not reached, which
// --allow-no-verdict passes; the merge's counts are the sum, its
// percentiles the exact merge, and its audit catches the leak: exit 3.
func TestShardsInProcesses(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("-short: a long test")
	}
	leaky := leakyServer(t, 20)
	at := time.Now().Add(time.Second).UTC().Format(time.RFC3339Nano)
	dir := t.TempDir()
	files := make([]string, 3)
	var wg sync.WaitGroup
	for i := range files {
		files[i] = filepath.Join(dir, fmt.Sprintf("shard-%d.json", i))
		wg.Add(1)
		go func() {
			defer wg.Done()
			code, stdout, stderr := ratelabProcess(t, "bench", "http", leaky.URL, "--rate", "72", "--duration", "2500ms",
				"--connections", "6", "--consumers", "2", "--expect-limit", "20/1s", "--fail-on-leak", "--allow-no-verdict", "--no-probes",
				"--shard", fmt.Sprintf("%d/3", i), "--shared-consumers", "--start-at", at, "-o", "json")
			if code != exitOK || !bytes.Contains(stdout, []byte(`"verdict": "not reached"`)) {
				t.Errorf("shard %d alone: exit %d (%s): its audit should pass, the limit not reached", i, code, stderr)
			}
			if err := os.WriteFile(files[i], stdout, 0o644); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	var runs []bench.Result
	var requests int64
	var rps float64
	for _, f := range files {
		var r bench.Result
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(b, &r); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		runs = append(runs, r)
		requests += r.Requests
		rps += r.ThroughputRPS
	}
	code, stdout, stderr := ratelab(t, append([]string{"report", "merge", "--fail-on-leak", "-o", "json"}, files...)...)
	if code != exitThreshold || !strings.Contains(stderr, "--fail-on-leak") {
		t.Fatalf("merged shards: exit %d, stderr %q; want exit 3 for the leak", code, stderr)
	}
	var m bench.Result
	decodeJSON(t, stdout, &m)
	if m.Requests != requests || m.ThroughputRPS != rps || m.LatencyMicros.Count != requests || m.Audit == nil || m.Audit.Verdict != audit.Leaked || m.Audit.Limits[0].OverAdmitted == 0 {
		t.Fatalf("merged: %d requests at %.1f/s, audit %+v; want %d at %.1f/s and a leak", m.Requests, m.ThroughputRPS, m.Audit, requests, rps)
	}
	// The shards' own histograms, merged here, give the same percentiles.
	all := hdr.New()
	for _, r := range runs {
		h, err := hdrhistogram.Decode([]byte(r.Histograms["all"]))
		if err != nil {
			t.Fatal(err)
		}
		all.Merge(h)
	}
	if want := hdr.PercentilesOf(all); m.LatencyMicros != want {
		t.Fatalf("merged percentiles %+v, the shards' histograms merged %+v", m.LatencyMicros, want)
	}
}
