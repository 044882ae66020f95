package edge_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/ratelab/ratelab/edge"
	"github.com/ratelab/ratelab/internal/redisrun/redistest"
	"github.com/ratelab/ratelab/internal/testwait"
	"github.com/ratelab/ratelab/rules"
)

// bothEngines are rules every feature of the module's matching meets: a
// header with a fallback, a nested exact path, a prefix, a prefix that
// shares one counter among its paths (share_threshold), a host, an
// unlimited plan that replaces, a global cap, shadow mode and three
// algorithms.
const bothEngines = `domain: %s
descriptors:
  - key: header:X-Consumer-Id
    fallback_key: remote_address
    rate_limits:
      - {name: per-minute, unit: minute, requests_per_unit: 4}
      - {name: per-hour, unit: hour, requests_per_unit: 6, algorithm: gcra}
      - {name: trial, unit: minute, requests_per_unit: 1, shadow_mode: true}
    descriptors:
      - key: path
        value: /search
        rate_limit: {name: search, unit: minute, requests_per_unit: 2, algorithm: fixed-window}
      - key: path
        value: /api/*
        rate_limit: {name: api, unit: minute, requests_per_unit: 3, algorithm: sliding-counter}
      - key: path
        value: /export/*
        share_threshold: true
        rate_limit: {name: export, unit: minute, requests_per_unit: 2}
  - key: header:X-Plan
    value: internal
    rate_limit: {name: internal, unlimited: true, replaces: [{name: global}]}
  - key: host
    value: Example.COM
    rate_limit: {name: example, unit: minute, requests_per_unit: 100}
  - key: generic_key
    value: all
    rate_limit: {name: global, unit: minute, requests_per_unit: 1000, algorithm: token-bucket}
`

// TestOpenRestyRulesSameAsGo: the same rules in both engines give the same
// statuses and the same headers for the same requests (the times in them
// aside, which depend on when each ran), and the same counter keys.
func TestOpenRestyRulesSameAsGo(t *testing.T) {
	t.Parallel()
	c := redistest.Client(t, srv)
	src := fmt.Sprintf(bothEngines, redistest.Prefix(t))
	set, err := rules.Parse("rules.yaml", []byte(src), rules.ForGateway())
	if err != nil {
		t.Fatal(err)
	}
	text, err := edge.RenderRules(set)
	if err != nil {
		t.Fatal(err)
	}
	g, _ := startRules(t, rulesSetup{src: src})
	nc := startNginx(t, srv, edge.NginxConfig{Rules: text})

	type step struct {
		path   string
		header map[string]string
	}
	// One counter for every export: the third is refused.
	steps := []step{{"/export/a.csv", nil}, {"/export/b.csv", nil}, {"/export/c.csv", nil}}
	for range 3 {
		steps = append(steps, step{"/search", nil})
	}
	for range 4 {
		steps = append(steps, step{"/api/items?x=1", nil})
	}
	steps = append(steps, step{"/other", map[string]string{"X-Plan": "internal"}}, step{"/", map[string]string{"Host": "example.com:8080"}})
	times := regexp.MustCompile(`t=\d+`)
	answers := func(addr, consumer string) []string {
		var out []string
		for _, s := range steps {
			req, _ := http.NewRequest(http.MethodGet, "http://"+addr+s.path, nil)
			req.Header.Set("X-Consumer-Id", consumer)
			for k, v := range s.header {
				if k == "Host" {
					req.Host = v
				} else {
					req.Header.Set(k, v)
				}
			}
			resp, err := httpClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			var body struct {
				Type     string   `json:"type"`
				Violated []string `json:"violated-policies"`
			}
			if resp.StatusCode == http.StatusTooManyRequests {
				if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
					t.Fatalf("%s: a 429's body: %v", addr, err)
				}
				if body.Type != edge.QuotaExceeded || len(body.Violated) == 0 {
					t.Errorf("%s %s: a 429 of type %q naming %v, want quota-exceeded naming the limits that refused", addr, s.path, body.Type, body.Violated)
				}
			}
			resp.Body.Close()
			h := resp.Header
			line := fmt.Sprintf("%s %d policy=[%s] ratelimit=[%s] legacy=%s/%s retry=%v violated=%v", s.path, resp.StatusCode,
				h.Get("RateLimit-Policy"), times.ReplaceAllString(h.Get("RateLimit"), "t=T"), h.Get("RateLimit-Limit"),
				h.Get("RateLimit-Remaining"), h.Get("Retry-After") != "", body.Violated)
			if resp.StatusCode == http.StatusTooManyRequests && "t="+h.Get("Retry-After") != times.FindString(h.Get("RateLimit")) {
				t.Errorf("%s: Retry-After %s, RateLimit %s: want the t given", addr, h.Get("Retry-After"), h.Get("RateLimit"))
			}
			out = append(out, line)
		}
		return out
	}
	prefix := redistest.Prefix(t)
	goAnswers := answers(g.Addr(), "go-"+prefix)
	nginxAnswers := answers(nc.Listen, "nginx-"+prefix)
	if strings.Join(goAnswers, "\n") != strings.Join(nginxAnswers, "\n") {
		t.Fatalf("the engines answer differently:\ngo:\n%s\nnginx:\n%s", strings.Join(goAnswers, "\n"), strings.Join(nginxAnswers, "\n"))
	}
	if !strings.Contains(goAnswers[2], " 429 ") || !strings.Contains(goAnswers[5], " 429 ") || !strings.Contains(goAnswers[3], `"search";q=2;w=60`) {
		t.Fatalf("the rules did not apply as written:\n%s", strings.Join(goAnswers, "\n"))
	}
	// Each engine's admissions are in the counter the rules name for its consumer.
	var logged []int64
	for _, consumer := range []string{"go-" + prefix, "nginx-" + prefix} {
		for _, h := range set.Match(rules.Request{Path: "/search", Header: map[string][]string{"X-Consumer-Id": {consumer}}}) {
			if h.Limit.ID == "per-minute" {
				logged = append(logged, c.ZCard(context.Background(), h.Key).Val())
			}
		}
	}
	if len(logged) != 2 || logged[0] != 4 || logged[1] != 4 {
		t.Fatalf("the consumers' per-minute logs hold %v, want 4 each", logged)
	}
}

// TestOpenRestyBurstSameAsGo: limits with a burst apart from their rate
// (nginx's rate=10r/s burst=5, and a bucket deeper than its refill) are
// decided and advertised alike by both engines: the burst admitted at
// once, RateLimit-Policy's q and w the rate with the burst as
// ratelab-burst, remaining counting down from the burst (above q for the
// deeper bucket), and the 429 naming the limit and its burst.
func TestOpenRestyBurstSameAsGo(t *testing.T) {
	t.Parallel()
	src := fmt.Sprintf(`domain: %s
descriptors:
  - key: header:X-Consumer-Id
    rate_limits:
      - {name: nginx-like, window: 1h, requests_per_unit: 10, algorithm: gcra, burst: 6}
      - {name: deep, window: 1h, requests_per_unit: 2, algorithm: token-bucket, burst: 9}
`, redistest.Prefix(t))
	set, err := rules.Parse("rules.yaml", []byte(src), rules.ForGateway())
	if err != nil {
		t.Fatal(err)
	}
	text, err := edge.RenderRules(set)
	if err != nil {
		t.Fatal(err)
	}
	g, _ := startRules(t, rulesSetup{src: src})
	nc := startNginx(t, srv, edge.NginxConfig{Rules: text})
	times := regexp.MustCompile(`t=\d+`)
	answers := func(addr, consumer string) []string {
		var out []string
		for range 8 {
			req, _ := http.NewRequest(http.MethodGet, "http://"+addr+"/", nil)
			req.Header.Set("X-Consumer-Id", consumer)
			resp, err := httpClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			var body struct {
				Detail   string   `json:"detail"`
				Violated []string `json:"violated-policies"`
			}
			if resp.StatusCode == http.StatusTooManyRequests {
				if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
					t.Fatalf("%s: a 429's body: %v", addr, err)
				}
			}
			resp.Body.Close()
			h := resp.Header
			out = append(out, fmt.Sprintf("%d policy=[%s] ratelimit=[%s] legacy=%s/%s detail=%q violated=%v", resp.StatusCode,
				h.Get("RateLimit-Policy"), times.ReplaceAllString(h.Get("RateLimit"), "t=T"), h.Get("RateLimit-Limit"),
				h.Get("RateLimit-Remaining"), body.Detail, body.Violated))
		}
		return out
	}
	prefix := redistest.Prefix(t)
	goAnswers := answers(g.Addr(), "go-"+prefix)
	nginxAnswers := answers(nc.Listen, "nginx-"+prefix)
	if strings.Join(goAnswers, "\n") != strings.Join(nginxAnswers, "\n") {
		t.Fatalf("the engines answer differently:\ngo:\n%s\nnginx:\n%s", strings.Join(goAnswers, "\n"), strings.Join(nginxAnswers, "\n"))
	}
	want := []string{
		`200 policy=["nginx-like";q=10;w=3600;ratelab-burst=6, "deep";q=2;w=3600;ratelab-burst=9] ratelimit=["nginx-like";r=5;t=T] legacy=10/5`,
		`200 policy=["nginx-like";q=10;w=3600;ratelab-burst=6, "deep";q=2;w=3600;ratelab-burst=9] ratelimit=["nginx-like";r=4;t=T] legacy=10/4`,
		`200 policy=["nginx-like";q=10;w=3600;ratelab-burst=6, "deep";q=2;w=3600;ratelab-burst=9] ratelimit=["nginx-like";r=3;t=T] legacy=10/3`,
		`200 policy=["nginx-like";q=10;w=3600;ratelab-burst=6, "deep";q=2;w=3600;ratelab-burst=9] ratelimit=["nginx-like";r=2;t=T] legacy=10/2`,
		`200 policy=["nginx-like";q=10;w=3600;ratelab-burst=6, "deep";q=2;w=3600;ratelab-burst=9] ratelimit=["nginx-like";r=1;t=T] legacy=10/1`,
		`200 policy=["nginx-like";q=10;w=3600;ratelab-burst=6, "deep";q=2;w=3600;ratelab-burst=9] ratelimit=["nginx-like";r=0;t=T] legacy=10/0`,
		`429 policy=["nginx-like";q=10;w=3600;ratelab-burst=6, "deep";q=2;w=3600;ratelab-burst=9] ratelimit=["nginx-like";r=0;t=T] legacy=10/0 ` +
			`detail="rate limit exceeded: \"nginx-like\" (10 per 3600000ms, burst 6)" violated=[nginx-like]`,
	}
	for i, w := range want {
		if !strings.HasPrefix(goAnswers[i], w) {
			t.Fatalf("request %d: %s\nwant %s", i+1, goAnswers[i], w)
		}
	}
}

// TestOpenRestyDenyCacheAfterReload: the module's deny cache holds a
// refusal for the limit's counter and its policy, as the Go gateway's
// does: once nginx reloads rules that raise the limit, the consumer it
// refused is admitted at once, not refused from memory until the old
// refusal's retry-after (here a minute) has passed.
func TestOpenRestyDenyCacheAfterReload(t *testing.T) {
	t.Parallel()
	redistest.Client(t, srv)
	domain := redistest.Prefix(t)
	render := func(limit int) string {
		t.Helper()
		set, err := rules.Parse("rules.yaml", []byte(fmt.Sprintf(`domain: %s
descriptors:
  - key: header:X-Consumer-Id
    rate_limit: {name: per-minute, unit: minute, requests_per_unit: %d}
`, domain, limit)), rules.ForGateway())
		if err != nil {
			t.Fatal(err)
		}
		text, err := edge.RenderRules(set)
		if err != nil {
			t.Fatal(err)
		}
		return text
	}
	nc, n := startNginxProcess(t, srv, edge.NginxConfig{Rules: render(1), DenyCache: true}, "builtin")
	hdr := map[string]string{"X-Consumer-Id": "alice"}
	for i, want := range []int{200, 429} {
		if resp, _ := get(t, "http://"+nc.Listen+"/", hdr); resp.StatusCode != want {
			t.Fatalf("request %d at 1 a minute: %d, want %d", i+1, resp.StatusCode, want)
		}
	}
	if err := n.ReloadRules(render(5)); err != nil {
		t.Fatal(err)
	}
	// The old workers may answer a while: the first answer of the new
	// rules (q=5) is the one judged.
	testwait.Eventually(t, 15*time.Second, func() (bool, string) {
		resp, _ := get(t, "http://"+nc.Listen+"/", hdr)
		policy := resp.Header.Get("RateLimit-Policy")
		if !strings.Contains(policy, "q=5;") {
			return false, "nginx still answers by the old rules: RateLimit-Policy " + policy
		}
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("the first answer at 5 a minute: %d (RateLimit %s), want 200: one of 5 is taken", resp.StatusCode, resp.Header.Get("RateLimit"))
		}
		return true, ""
	})
}
