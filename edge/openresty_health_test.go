package edge_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratelab/ratelab/edge"
	"github.com/ratelab/ratelab/internal/redisrun/redistest"
	"github.com/ratelab/ratelab/internal/testwait"
	"github.com/ratelab/ratelab/rules"
)

// TestOpenRestyHealthz: nginx's admin port answers /healthz as the Go
// gateway does: "ok" and the rules' version, file and load time; after a
// reload, the new version; while Redis hangs, still 200, degraded, with
// the kind of failure and the fail mode; once Redis answers again, "ok".
func TestOpenRestyHealthz(t *testing.T) {
	t.Parallel()
	r := startRedis(t)
	render := func(file string, n int) (string, string) {
		t.Helper()
		set, err := rules.Parse(file, []byte(perConsumer(fmt.Sprintf("healthz-%d", time.Now().UnixNano()), n)), rules.ForGateway())
		if err != nil {
			t.Fatal(err)
		}
		text, err := edge.RenderRules(set)
		if err != nil {
			t.Fatal(err)
		}
		return text, set.Version
	}
	file := filepath.Join(t.TempDir(), "rules.yaml")
	text, v1 := render(file, 5)
	started := time.Now()
	// One worker: the one that fails is the one that answers again.
	nc := startNginx(t, r, edge.NginxConfig{Rules: text, ShowRules: true, OnError: "open", Timeout: 500 * time.Millisecond, Workers: 1})
	healthz := "http://" + nc.Admin + "/healthz"
	okLine := regexp.MustCompile(`^ok\nrules: version (\w+), (.+), loaded (\S+)\n$`)
	loaded := func(version string) time.Time {
		t.Helper()
		resp, text := body(t, healthz, nil)
		m := okLine.FindStringSubmatch(text)
		if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/plain; charset=utf-8" || m == nil ||
			m[1] != version || m[2] != file {
			t.Fatalf("/healthz: %d %q (%s), want ok and version %s of %s", resp.StatusCode, text, resp.Header.Get("Content-Type"), version, file)
		}
		at, err := time.Parse(time.RFC3339Nano, m[3])
		if err != nil || at.Before(started.Add(-time.Minute)) || at.After(time.Now().Add(time.Minute)) {
			t.Fatalf("/healthz says the rules were loaded at %q (%v), not while the test ran", m[3], err)
		}
		return at
	}
	first := loaded(v1)

	// A reload as ratelab edge makes one: new rules, then SIGHUP.
	text, v2 := render(file, 6)
	if err := os.WriteFile(filepath.Join(nc.Dir, "rules.lua"), []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	pid, err := os.ReadFile(filepath.Join(nc.Dir, "nginx.pid"))
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(pid)))
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(n, syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	testwait.Eventually(t, 10*time.Second, func() (bool, string) {
		_, text := body(t, healthz, nil)
		return strings.Contains(text, "version "+v2+","), fmt.Sprintf("/healthz says %q, want version %s", text, v2)
	})
	if again := loaded(v2); again.Before(first) {
		t.Fatalf("the reload was loaded at %s, before the first rules (%s)", again, first)
	}

	url, hdr := "http://"+nc.Listen+"/", map[string]string{"X-Consumer-Id": "healthz"}
	if err := r.Pause(); err != nil {
		t.Fatal(err)
	}
	if resp, _ := get(t, url, hdr); resp.StatusCode != http.StatusOK || hasLimitFields(resp.Header) {
		t.Fatalf("Redis hung, failing open: %d with %v, want 200 without RateLimit fields", resp.StatusCode, resp.Header)
	}
	degraded := regexp.MustCompile(`^degraded: redis failing for \S+ \(timeout: the rate limiter's store did not answer in time\); ` +
		`failing open; circuit closed\nrules: version ` + v2 + `, `)
	if resp, text := body(t, healthz, nil); resp.StatusCode != http.StatusOK || !degraded.MatchString(text) {
		t.Fatalf("/healthz with Redis hung: %d %q, want 200 and %s", resp.StatusCode, text, degraded)
	}
	if err := r.Resume(); err != nil {
		t.Fatal(err)
	}
	testwait.Eventually(t, 10*time.Second, func() (bool, string) {
		get(t, url, hdr)
		_, text := body(t, healthz, nil)
		return strings.HasPrefix(text, "ok\n"), fmt.Sprintf("/healthz says %q once Redis answers", text)
	})
}

// TestOpenRestyServeHealthz: ratelab edge's nginx engine shows the rules
// line on /healthz for a rules file (--rules), and none for a lone --limit,
// as the Go engine does.
func TestOpenRestyServeHealthz(t *testing.T) {
	t.Parallel()
	redistest.Client(t, srv)
	needNginx(t)
	src := perConsumer(redistest.Prefix(t), 5)
	file := filepath.Join(t.TempDir(), "rules.yaml")
	if err := os.WriteFile(file, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		o    edge.Options
		want *regexp.Regexp
	}{
		{"rules", edge.Options{RulesFile: file}, regexp.MustCompile(`^ok\nrules: version ` + version(t, src) + `, ` + regexp.QuoteMeta(file) + `, loaded \S+\n$`)},
		{"limit", edge.Options{Limits: []string{"5/1m"}}, regexp.MustCompile(`^ok\n$`)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := tc.o
			addrs := freeAddrs(t, 2)
			o.Engine, o.Listen, o.Admin, o.Upstream = edge.EngineOpenResty, addrs[0], addrs[1], "builtin"
			o.KeyBy, o.OnError, o.Headers, o.Timeout, o.Pool, o.Nodes = "header:X-Consumer-Id", "open", "both", 5*time.Second, 1, 1
			ctx, cancel := context.WithCancel(context.Background())
			served := make(chan error, 1)
			go func() { served <- edge.Serve(ctx, o, &redis.UniversalOptions{Addrs: []string{srv.Addr}}, srv.Addr) }()
			defer func() {
				cancel()
				if err := <-served; err != nil {
					t.Errorf("serve: %v", err)
				}
			}()
			var text string
			testwait.Eventually(t, 15*time.Second, func() (bool, string) {
				resp, err := httpClient.Get("http://" + o.Admin + "/healthz")
				if err != nil {
					return false, "nginx does not answer: " + err.Error()
				}
				defer resp.Body.Close()
				b, err := io.ReadAll(resp.Body)
				text = string(b)
				return err == nil, fmt.Sprintf("/healthz: %v", err)
			})
			if !tc.want.MatchString(text) {
				t.Fatalf("/healthz says %q, want %s", text, tc.want)
			}
		})
	}
}
