package edge_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ratelab/ratelab/edge"
	"github.com/ratelab/ratelab/internal/redisrun/redistest"
	"github.com/ratelab/ratelab/internal/reload/reloadtest"
	"github.com/ratelab/ratelab/internal/testwait"
	"github.com/ratelab/ratelab/rules"
)

// perConsumer is a rules file with one limit per consumer of n per minute,
// under one name in every version, so that every version counts in the
// same log.
func perConsumer(domain string, n int) string {
	return fmt.Sprintf(`domain: %s
descriptors:
  - key: header:X-Consumer-Id
    rate_limit: {name: per-consumer, unit: minute, requests_per_unit: %d}
`, domain, n)
}

// version is the version of the rules src.
func version(t *testing.T, src string) string {
	t.Helper()
	set, err := rules.Parse("v", []byte(src), rules.ForGateway())
	if err != nil {
		t.Fatal(err)
	}
	return set.Version
}

// healthVersion is the rules' version /healthz shows.
func healthVersion(t *testing.T, admin string) string {
	t.Helper()
	_, text := body(t, "http://"+admin+"/healthz", nil)
	_, rest, ok := strings.Cut(text, "rules: version ")
	if !ok {
		t.Fatalf("/healthz shows no rules version: %q", text)
	}
	v, _, _ := strings.Cut(rest, ",")
	return v
}

// waitVersion asks /healthz until it shows version, for at most 10 s.
func waitVersion(t *testing.T, admin, version string) {
	t.Helper()
	testwait.Eventually(t, 10*time.Second, func() (bool, string) {
		v := healthVersion(t, admin)
		return v == version, fmt.Sprintf("/healthz shows version %s, want %s", v, version)
	})
}

// writeByRename writes src to path as editors save: a new file renamed over
// the old.
func writeByRename(t *testing.T, path, src string) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// TestRulesReloadUnderLoad: while consumers send at a steady rate, the file
// is rewritten 100 times between two valid versions, then once to one that
// does not validate. No request fails or gets a 5xx; each consumer is
// admitted within the looser version and at least the tighter (both count
// in one log); the upstream received exactly what was admitted and the log
// holds exactly that; the invalid version never takes effect.
func TestRulesReloadUnderLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: a long test")
	}
	t.Parallel()
	redistest.Client(t, srv)
	domain := redistest.Prefix(t)
	v1, v2 := perConsumer(domain, 20), perConsumer(domain, 30)
	log := &syncBuffer{}
	g, file := startRules(t, rulesSetup{src: v1, log: log})

	consumers := []string{"a", "b", "c", "d"}
	var mu sync.Mutex
	admitted, sent := map[string]int{}, map[string]int{}
	var failures []string
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for _, consumer := range consumers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tick := time.NewTicker(20 * time.Millisecond)
			defer tick.Stop()
			for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); {
				select {
				case <-stop:
					return
				case <-tick.C:
				}
				resp, _, err := fetch("http://"+g.Addr()+"/", map[string]string{"X-Consumer-Id": consumer})
				mu.Lock()
				sent[consumer]++
				switch {
				case err != nil:
					failures = append(failures, err.Error())
				case resp.StatusCode >= 500:
					failures = append(failures, resp.Status)
				case resp.StatusCode == http.StatusOK:
					admitted[consumer]++
				}
				mu.Unlock()
			}
		}()
	}
	for i := range 100 {
		src := v1
		if i%2 == 1 {
			src = v2
		}
		writeByRename(t, file, src)
		time.Sleep(15 * time.Millisecond)
	}
	waitVersion(t, g.AdminAddr(), version(t, v2)) // the 100th write
	const bogus = "    bogus: 1\n"
	if err := os.WriteFile(file, []byte(v2+bogus), 0o644); err != nil {
		t.Fatal(err)
	}
	// An in-place write may be read half-written, and refused for that first.
	testwait.Eventually(t, 10*time.Second, func() (bool, string) {
		return strings.Contains(log.String(), "bogus"), "the invalid file is not refused; log:\n" + log.String()
	})
	// Each consumer sends past the looser limit: then it was admitted at
	// least up to the tighter one, whichever version served when.
	testwait.Eventually(t, 30*time.Second, func() (bool, string) {
		mu.Lock()
		defer mu.Unlock()
		for _, c := range consumers {
			if sent[c] < 40 {
				return false, fmt.Sprintf("consumer %s sent %d requests, want 40", c, sent[c])
			}
		}
		return true, ""
	})
	close(stop)
	wg.Wait()

	if len(failures) > 0 {
		t.Fatalf("%d requests failed, the first: %s", len(failures), failures[0])
	}
	// Read half-written twice, the write stalled between (a loaded
	// machine), v2 and the spaces of the bogus line are v2's rules in other
	// bytes: applied, and the whole file then refused. Never anything else.
	serving := map[string]bool{}
	for n := range len(bogus) {
		if set, err := rules.Parse("v", []byte(v2+bogus[:n]), rules.ForGateway()); err == nil {
			serving[set.Version] = true
		}
	}
	if v := healthVersion(t, g.AdminAddr()); !serving[v] {
		t.Fatalf("after the invalid file /healthz shows version %s, want %s still (or v2 and the bogus line's spaces)", v, version(t, v2))
	}
	if g.Metrics().RulesReloads("refused") == 0 || !strings.Contains(log.String(), "refused") {
		t.Fatalf("the refusal is not counted, or not logged with its error:\n%s", log.String())
	}
	if g.Metrics().RulesReloads("applied") == 0 {
		t.Fatal("no reload applied")
	}
	f := forwarded(t, g.AdminAddr())
	set, err := rules.Parse("v", []byte(v2), rules.ForGateway())
	if err != nil {
		t.Fatal(err)
	}
	c := redistest.Client(t, srv)
	for _, consumer := range consumers {
		n := admitted[consumer]
		if n < 20 || n > 30 {
			t.Errorf("consumer %s admitted %d, want between 20 (the tighter version) and 30 (the looser)", consumer, n)
		}
		if f.Consumers[consumer] != int64(n) {
			t.Errorf("consumer %s: the upstream received %d, the client saw %d admitted", consumer, f.Consumers[consumer], n)
		}
		hits := set.Match(rules.Request{Header: map[string][]string{"X-Consumer-Id": {consumer}}})
		if len(hits) != 1 {
			t.Fatalf("%d hits", len(hits))
		}
		if logged := c.ZCard(context.Background(), hits[0].Key).Val(); logged != int64(n) {
			t.Errorf("consumer %s: the log holds %d, %d were admitted", consumer, logged, n)
		}
	}
}

// TestRulesReloadOnSIGHUP: a change the directory's watch cannot see (the
// file is a link to one in another directory) is read on SIGHUP.
func TestRulesReloadOnSIGHUP(t *testing.T) {
	redistest.Client(t, srv)
	domain := redistest.Prefix(t)
	v1, v2, v3 := perConsumer(domain, 1), perConsumer(domain, 2), perConsumer(domain, 3)
	g, link := startRules(t, rulesSetup{src: v1})
	target := filepath.Join(t.TempDir(), "target.yaml")
	if err := os.WriteFile(target, []byte(v2), 0o644); err != nil {
		t.Fatal(err)
	}
	// A new link renamed over the file, until the watch sees it: then the
	// watch (and its SIGHUP handler) runs.
	testwait.Eventually(t, 10*time.Second, func() (bool, string) {
		if v := healthVersion(t, g.AdminAddr()); v == version(t, v2) {
			return true, ""
		}
		_ = os.Remove(link + ".new")
		if err := os.Symlink(target, link+".new"); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(link+".new", link); err != nil {
			t.Fatal(err)
		}
		return false, "a link renamed over the rules file is not reloaded"
	})
	if err := os.WriteFile(target, []byte(v3), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitVersion(t, g.AdminAddr(), version(t, v3))
	if !strings.Contains(healthText(t, g), "loaded ") {
		t.Fatal("/healthz does not say when the rules were loaded")
	}
	_, metrics := body(t, "http://"+g.AdminAddr()+"/metrics", nil)
	info := fmt.Sprintf(`ratelab_edge_rules_info{version=%q} 1`, version(t, v3))
	if !strings.Contains(metrics, info) || strings.Count(metrics, "ratelab_edge_rules_info{") != 1 ||
		!strings.Contains(metrics, `ratelab_edge_rules_reloads_total{result="applied"} 2`) ||
		!strings.Contains(metrics, "ratelab_edge_rules_loaded_timestamp_seconds ") {
		t.Fatalf("/metrics does not show version %s alone, two reloads and when:\n%s", version(t, v3), metrics)
	}
}

func healthText(t *testing.T, g *edge.Gateway) string {
	t.Helper()
	_, text := body(t, "http://"+g.AdminAddr()+"/healthz", nil)
	return text
}

// TestRulesReloadConfigMap: a rules file in a ConfigMap volume, updated as
// the kubelet updates it (no event names the file: a new ..data link is
// renamed over the old), serves the new limit within 5 s.
func TestRulesReloadConfigMap(t *testing.T) {
	t.Parallel()
	redistest.Client(t, srv)
	domain := redistest.Prefix(t)
	cm := reloadtest.NewConfigMap(t, t.TempDir(), map[string]string{"rules.yaml": perConsumer(domain, 2)})
	g, _ := startRules(t, rulesSetup{file: filepath.Join(cm.Dir, "rules.yaml")})
	policy := func() string {
		resp, _ := get(t, "http://"+g.Addr()+"/", map[string]string{"X-Consumer-Id": "a"})
		return resp.Header.Get("RateLimit-Policy")
	}
	if p := policy(); p != `"per-consumer";q=2;w=60` {
		t.Fatalf("RateLimit-Policy %s, want the first version's", p)
	}
	cm.Update(map[string]string{"rules.yaml": perConsumer(domain, 50)})
	testwait.Eventually(t, 5*time.Second, func() (bool, string) {
		p := policy()
		return p == `"per-consumer";q=50;w=60`, "RateLimit-Policy " + p + ", want the new version's"
	})
}
