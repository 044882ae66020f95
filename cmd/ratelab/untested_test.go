package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ratelab/ratelab/audit"
	"github.com/ratelab/ratelab/bench"
	"github.com/ratelab/ratelab/internal/redisrun/redistest"
)

// untestedRules are a gateway's rules: per consumer 5 a second and
// 100,000 an hour, and a global cap of 1,000 a second; with search, the
// consumer's /search requests are held to 2 a second too.
func untestedRules(domain string, search bool) string {
	src := "domain: " + domain + "\ndescriptors:\n  - key: header:X-Consumer-Id\n    rate_limits:\n" +
		"      - {name: per-second, unit: second, requests_per_unit: 5}\n" +
		"      - {name: per-hour, unit: hour, requests_per_unit: 100000}\n"
	if search {
		src += "    descriptors:\n      - key: path\n        value: /search\n" +
			"        rate_limit: {name: search, unit: second, requests_per_unit: 2}\n"
	}
	return src + "  - key: generic_key\n    value: global\n    rate_limit: {name: global, unit: second, requests_per_unit: 1000}\n"
}

// limitsByID are an audit's limits by their IDs.
func limitsByID(a *audit.Audit) map[string]audit.LimitAudit {
	by := map[string]audit.LimitAudit{}
	if a != nil {
		for _, l := range a.Limits {
			by[l.ID] = l
		}
	}
	return by
}

// TestUntestedLimits: ratelab edge enforcing 5 a second and 100,000 an
// hour per consumer and a global cap of 1,000 a second, audited at 100 a
// second over 4 consumers by rules that also name a /search limit of 2 a
// second, which the gateway leaves out. The hour's limit and the global
// cap, which the load never comes near, are not reached, never held; so
// is /search's, whose window fills only while the consumer's limit is
// full too, or it leaked (a third /search let through in a second): never
// held. --fail-on-leak exits 3, naming each. Audited by its own rules, the
// gateway holds per-second, each of its denials justified by its own full
// window, none left unjudged for the hour's history nor under-admitted:
// --fail-on-under 0.05 exits 0, and --fail-on-leak with the untested
// limits allowed too.
func TestUntestedLimits(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: a long test")
	}
	t.Parallel()
	redistest.Client(t, srv)
	domain := redistest.Prefix(t)
	own := writeRules(t, "own.yaml", untestedRules(domain, false))
	claimed := writeRules(t, "claimed.yaml", untestedRules(domain, true))
	url := serveRules(t, "go", own)
	table := []string{"bench", "http", url, "--rate", "100", "--duration", "2500ms", "--consumers", "4",
		"--path", "/search:1", "--path", "/items:3", "--no-probes"}
	load := append(table[:len(table):len(table)], "-o", "json")

	code, stdout, stderr := ratelab(t, append(load, "--expect-rules", claimed, "--fail-on-leak")...)
	var res bench.Result
	decodeJSON(t, stdout, &res)
	by := limitsByID(res.Audit)
	if code != exitThreshold || res.Audit == nil || res.Audit.Verdict == audit.Held || len(by) != 4 {
		t.Fatalf("exit %d, stderr %q, audit %+v", code, stderr, res.Audit)
	}
	for id, want := range map[string]string{"per-hour": "of 100000 in 1h: not tested", "global": "of 1000 in 1s: not tested"} {
		if l := by[id]; l.Verdict != audit.NotReached || len(l.Reasons) == 0 || !strings.HasSuffix(l.Reasons[0], want) ||
			!strings.Contains(stderr, "--fail-on-leak: "+id+": not reached: ") {
			t.Errorf("%s: %s %q; stderr %q", id, l.Verdict, l.Reasons, stderr)
		}
	}
	if s := by["search"]; s.Verdict != audit.NotReached && s.Verdict != audit.Leaked || s.Headers.NeverAdvertised == "" {
		t.Errorf("search, left out: %s %q, never advertised %q", s.Verdict, s.Reasons, s.Headers.NeverAdvertised)
	}
	if p := by["per-second"]; p.Verdict != audit.Held || p.DenialsAttributed == 0 {
		t.Errorf("per-second: %s %q, %d of %d denials its own", p.Verdict, p.Reasons, p.DenialsAttributed, p.Denials)
	}

	code, stdout, stderr = ratelab(t, append(load, "--expect-rules", own, "--fail-on-under", "0.05")...)
	res = bench.Result{}
	decodeJSON(t, stdout, &res)
	by = limitsByID(res.Audit)
	if code != exitOK || len(by) != 3 {
		t.Fatalf("by its own rules, --fail-on-under 0.05: exit %d, stderr %q, audit %+v", code, stderr, res.Audit)
	}
	for _, l := range by {
		if l.UnderAdmitted != 0 || l.DenialsJudged == 0 || l.Verdict == audit.Leaked {
			t.Errorf("%s: %s %q: %d of %d denials judged, %d under-admitted", l.ID, l.Verdict, l.Reasons, l.DenialsJudged, l.Denials,
				l.UnderAdmitted)
		}
	}

	code, stdout, stderr = ratelab(t, append(table, "--expect-rules", own, "--fail-on-leak", "--allow-untested", "per-hour,global")...)
	if code != exitOK || !strings.Contains(stdout, "Audit of 3 limits: 1 held, 2 not reached.") || strings.Contains(stdout, "Audit of 3 limits: HELD") {
		t.Fatalf("--allow-untested per-hour,global: exit %d, stderr %q\n%s", code, stderr, stdout)
	}
}

// TestUntestedLimitsRLS: ratelab rls with 100,000 an hour per api_key and
// 10 a second of its /search calls, audited by its own configuration at
// 200 calls a second over 4 consumers (five times the limit, so that a
// loaded machine still reaches it): /search's limit is held, the
// hour's not reached, never held, and --fail-on-leak exits 3 naming it,
// unless --allow-untested names it. A service that leaves /search's limit
// out is caught.
func TestUntestedLimitsRLS(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: a long test")
	}
	t.Parallel()
	config := func(search bool) string {
		src := "domain: DOMAIN\ndescriptors:\n  - key: api_key\n    rate_limit: {name: per-hour, unit: hour, requests_per_unit: 100000}\n"
		if search {
			src += "    descriptors:\n      - key: path\n        value: /search\n        rate_limit: {name: search, unit: second, requests_per_unit: 10}\n"
		}
		return src
	}
	for _, tc := range []struct {
		name   string
		search bool // the service holds /search to its limit
		extra  []string
		code   int
	}{
		{"correct", true, nil, exitThreshold},
		{"correct, the hour allowed untested", true, []string{"--allow-untested", "per-hour"}, exitOK},
		{"search left out", false, []string{"--allow-untested", "per-hour"}, exitThreshold},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			addr, domain := startRLS(t, config(tc.search))
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, "a.yaml"), []byte(strings.ReplaceAll(config(true), "DOMAIN", domain)), 0o644); err != nil {
				t.Fatal(err)
			}
			code, stdout, stderr := ratelab(t, append([]string{"bench", "rls", addr, "--domain", domain, "--descriptor", "api_key={consumer}",
				"--descriptor", "api_key={consumer},path=/search", "--consumers", "4", "--rate", "200", "--duration", "2500ms",
				"--expect-config", dir, "--no-probes", "--fail-on-leak", "-o", "json"}, tc.extra...)...)
			var res bench.Result
			decodeJSON(t, stdout, &res)
			by := limitsByID(res.Audit)
			// A loaded machine may keep the load from pushing /search to its
			// cap: then it is not reached, and --fail-on-leak fails the run.
			s := by["search"]
			want := tc.code
			if s.Verdict == audit.NotReached {
				want = exitThreshold
			}
			if code != want || len(by) != 2 || res.Audit.Verdict == audit.Held {
				t.Fatalf("exit %d, want %d; stderr %q, audit %+v", code, want, stderr, res.Audit)
			}
			if h := by["per-hour"]; h.Verdict != audit.NotReached || len(h.Reasons) == 0 || !strings.HasSuffix(h.Reasons[0], "of 100000 in 1h: not tested") {
				t.Errorf("per-hour: %s %q", h.Verdict, h.Reasons)
			}
			if hour := strings.Contains(stderr, "--fail-on-leak: per-hour: not reached: "); hour != (tc.extra == nil) {
				t.Errorf("stderr %q: per-hour named %v, want %v", stderr, hour, tc.extra == nil)
			}
			verdict := audit.Held
			if !tc.search {
				verdict = audit.Leaked
			}
			// Held or leaked as the service is, or untested where the load
			// did not push it to its cap; the limit left out is never held.
			if s.Verdict != verdict && s.Verdict != audit.NotReached {
				t.Errorf("search: %s %q (%d of %d in a window), want %s", s.Verdict, s.Reasons, s.MostInWindow, s.FullAt, verdict)
			}
		})
	}
}
