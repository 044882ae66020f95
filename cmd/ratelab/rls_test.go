package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ratelab/ratelab/internal/redisrun/redistest"
	"github.com/ratelab/ratelab/internal/testwait"
)

// TestRLSRefused: mistakes in ratelab rls's flags and configuration exit 2
// naming the flag (and for a file, its line and field), and send nothing to
// Redis.
func TestRLSRefused(t *testing.T) {
	c := redistest.Client(t, srv)
	good, bad, twice, empty := t.TempDir(), t.TempDir(), t.TempDir(), t.TempDir()
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
		{[]string{"--config", twice}, `domain "a" is also the domain of`},
		{[]string{"--config", empty}, "no .yaml file"},
		{[]string{"--config", filepath.Join(good, "none")}, "--config: config directory"},
		{[]string{"--config", good, "--on-redis-error", "local"}, `--on-redis-error "local" is not open or closed`},
		{[]string{"--config", good, "--redis-timeout", "0s"}, "--redis-timeout must be positive"},
		{[]string{"--config", good, "--clock", "sundial"}, "--clock"},
		{[]string{"--config", good, "--redis-batch", "2000"}, "--redis-batch must be between 1 and 1024 (got 2000)"},
		{[]string{"--config", good, "--redis-batch", "-1"}, "--redis-batch must be between 1 and 1024 (got -1)"},
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
}
