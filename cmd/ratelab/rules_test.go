package main

import (
	"errors"
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/ratelab/ratelab/internal/envoyref"
	"github.com/ratelab/ratelab/rules"
)

var updateDocs = flag.Bool("update", false, "rewrite the command outputs in docs/rules.md")

// writeRules writes a rules file into a new directory and returns its path.
func writeRules(t *testing.T, name, src string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

const plansRules = `domain: plans
descriptors:
  - key: header:X-Consumer-Id
    rate_limits:
      - {name: per-second, unit: second, requests_per_unit: 5}
      - {name: per-10s, window: 10s, requests_per_unit: 12}
    descriptors:
      - key: path
        value: /search
        rate_limit: {name: search, unit: second, requests_per_unit: 2}
  - key: header:X-Plan
    value: gold
    descriptors:
      - key: header:X-Consumer-Id
        rate_limit: {name: gold, unit: second, requests_per_unit: 50, replaces: [{name: per-second}]}
  - key: generic_key
    value: global
    rate_limit: {name: global, unit: second, requests_per_unit: 1000}
`

func TestRulesCheck(t *testing.T) {
	path := writeRules(t, "rules.yaml", plansRules)
	code, out, errOut := ratelab(t, "rules", "check", path)
	if code != exitOK || errOut != "" {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, want := range []string{
		"domain plans, version ",
		"  gold        requests with header X-Plan = gold: per value of header X-Consumer-Id, at most 50 per 1s (sliding-log); replaces per-second\n",
		"  per value of header:X-Consumer-Id: per-second, per-10s, search, gold (first call)\n",
		"  the domain (one shared counter): global (another call)\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q in\n%s", want, out)
		}
	}
	one := writeRules(t, "one.yaml", "domain: d\ndescriptors:\n  - key: remote_address\n    rate_limit: {unit: second, requests_per_unit: 1}\n")
	if _, out, _ := ratelab(t, "rules", "check", one); !strings.Contains(out, "every limit a request meets is in one slot (hash tag: per value of remote_address): one call") {
		t.Errorf("one tag:\n%s", out)
	}
}

func TestRulesMistakesExit2(t *testing.T) {
	bad := writeRules(t, "bad.yaml", strings.Replace(plansRules, "unit: second, requests_per_unit: 2", "unit: secnd, requests_per_unit: 2", 1))
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"rules", "check", bad}, bad + `:10: descriptors[0].descriptors[0].rate_limit.unit: "secnd" is not a unit (want second, minute, hour, day, week, month, year)`},
		{[]string{"rules", "explain", bad}, bad + ":10: descriptors[0].descriptors[0].rate_limit.unit"},
		{[]string{"rules", "check", filepath.Join(t.TempDir(), "none.yaml")}, "no such file or directory"},
		{[]string{"rules", "check"}, "rules check takes one rules file (got 0 arguments)"},
		{[]string{"rules", "check", "a", "b"}, "rules check takes one rules file (got 2 arguments)"},
		{[]string{"rules", "explain", bad, "--request", "GET"}, `--request "GET": want METHOD /path?query`},
		{[]string{"rules", "explain", bad, "--request", "GET search"}, `--request "GET search": the target is a path`},
		{[]string{"rules", "explain", bad, "--from", "host.example"}, `--from "host.example": not an IP address`},
		{[]string{"rules", "explain", bad, "-H", "X-Plan gold"}, `--header "X-Plan gold": want 'Name: value'`},
		{[]string{"rules", "frobnicate"}, `unknown command "frobnicate" for "ratelab rules"`},
		{[]string{"rules", "check", bad, "--nope"}, "unknown flag: --nope"},
	} {
		code, out, errOut := ratelab(t, tc.args...)
		if code != exitUsage || out != "" || !strings.Contains(errOut, tc.want) {
			t.Errorf("%v: exit %d, out %q, err %q; want exit 2 and %q", tc.args, code, out, errOut, tc.want)
		}
	}
	// A file of the rate limit service's keys is a mistake for the gateway.
	envoy := writeRules(t, "envoy.yaml", "domain: d\ndescriptors:\n  - key: database\n    rate_limit: {unit: second, requests_per_unit: 1}\n")
	if code, _, errOut := ratelab(t, "rules", "check", envoy); code != exitUsage || !strings.Contains(errOut, `:3: descriptors[0].key: "database" is not a key the gateway reads`) {
		t.Errorf("exit %d: %s", code, errOut)
	}
}

func TestRulesExplain(t *testing.T) {
	path := writeRules(t, "rules.yaml", plansRules)
	code, out, errOut := ratelab(t, "rules", "explain", path, "--request", "GET /search?q=redis", "-H", "X-Consumer-Id: alice",
		"-H", "x-plan: gold", "--from", "::ffff:10.0.0.7", "-H", "Host: api.example.com")
	if code != exitOK || errOut != "" {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, want := range []string{
		"GET /search?q=redis from 10.0.0.7 to host api.example.com, X-Consumer-Id: alice, X-Plan: gold\n",
		"meets 4 limits:\n",
		"  search: requests with path = /search: per value of header X-Consumer-Id, at most 2 per 1s (sliding-log)\n" +
			"    counter plans/header:X-Consumer-Id=alice/path=/search/search\n    key     rl:{",
		"    counter plans/generic_key=global/global\n",
		"replaced (met, but a limit also met replaces them):\n  per-second, by gold: all requests",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q in\n%s", want, out)
		}
	}
	_, out, _ = ratelab(t, "rules", "explain", writeRules(t, "r.yaml", "domain: d\ndescriptors:\n  - key: header:X-Consumer-Id\n    rate_limit: {unit: second, requests_per_unit: 1}\n"))
	if !strings.Contains(out, "GET / from 127.0.0.1 to host localhost\n") || !strings.Contains(out, "meets no limit: admitted without asking Redis") {
		t.Errorf("a request that meets nothing:\n%s", out)
	}
}

// TestLimitRules: --limit repeated, --key-by and --algorithm make one
// rule; a conflict names the flag.
func TestLimitRules(t *testing.T) {
	set, err := limitRules([]string{"5/1s", "12/10s:gcra"}, "header:X-Consumer-Id", "sliding-log")
	if err != nil || len(set.Limits()) != 2 || set.Limits()[1].Algorithm != "gcra" {
		t.Fatalf("%v %v", set, err)
	}
	for _, tc := range []struct {
		limits     []string
		keyBy, alg string
		want       string
	}{
		{[]string{"5/1s", "10/1s"}, "ip", "", "--limit: 5/1s and 10/1s are two limits on one window (1s): keep one"},
		{[]string{"5/1s"}, "cookie", "", `--key-by: unknown key "cookie" (want ip or header:NAME)`},
		{[]string{"5/1s"}, "ip", "watch", `--algorithm: "watch" is not an algorithm`},
		{[]string{"5/1s:lua"}, "ip", "", `--limit: "5/1s:lua": "lua" is not an algorithm`},
	} {
		_, err := limitRules(tc.limits, tc.keyBy, tc.alg)
		var usage *usageError
		if err == nil || !strings.HasPrefix(err.Error(), tc.want) || !errors.As(err, &usage) {
			t.Errorf("%v %s %s: got %v, want a usage error %q", tc.limits, tc.keyBy, tc.alg, err, tc.want)
		}
	}
}

var (
	namedYAML = regexp.MustCompile("(?s)`([a-z]+\\.yaml)`:\n\n```yaml\n(.*?)```")
	anyYAML   = regexp.MustCompile("(?s)```yaml\n(.*?)```")
	command   = regexp.MustCompile("(?s)```text\n\\$ (ratelab rules [^\n]*)\n(.*?)```")
)

// TestRulesDocs: every rules file in docs/rules.md is valid for the
// gateway (bad.yaml excepted), the one-rule example is what --limit builds,
// and every command shown prints what the page shows (-update rewrites it).
func TestRulesDocs(t *testing.T) {
	docPath, err := filepath.Abs("../../docs/rules.md")
	if err != nil {
		t.Fatal(err)
	}
	page, err := os.ReadFile(docPath)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(page)
	dir := t.TempDir()
	for _, m := range namedYAML.FindAllStringSubmatch(doc, -1) {
		if err := os.WriteFile(filepath.Join(dir, m[1]), []byte(m[2]), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	blocks := anyYAML.FindAllStringSubmatch(doc, -1)
	if len(blocks) < 7 {
		t.Fatalf("%d YAML blocks in docs/rules.md", len(blocks))
	}
	for i, m := range blocks {
		_, err := rules.Parse("block", []byte(m[1]), rules.ForGateway())
		if bad := strings.Contains(m[1], "secnd"); (err != nil) != bad {
			t.Errorf("YAML block %d: %v\n%s", i, err, m[1])
		}
	}
	short, err := limitRules([]string{"5/1s", "12/10s"}, "header:X-Consumer-Id", "sliding-log")
	if err != nil {
		t.Fatal(err)
	}
	var shown *rules.Set
	for _, m := range blocks {
		if strings.HasPrefix(m[1], "domain: ratelab\n") {
			shown, _ = rules.Parse("--limit", []byte(m[1]), rules.ForGateway())
		}
	}
	if shown == nil || describe(t, shown) != describe(t, short) {
		t.Errorf("the --limit example is not what --limit builds:\n%s", describe(t, short))
	}

	t.Chdir(dir)
	updated := command.ReplaceAllStringFunc(doc, func(block string) string {
		m := command.FindStringSubmatch(block)
		code, out, errOut := ratelab(t, shellWords(t, strings.TrimPrefix(m[1], "ratelab "))...)
		if code != exitOK {
			out = strings.TrimSuffix(errOut, "Run 'ratelab --help' for usage.\n")
		}
		if out != m[2] && !*updateDocs {
			t.Errorf("docs/rules.md: $ %s\nshows\n%s\nprints\n%s", m[1], m[2], out)
		}
		return "```text\n$ " + m[1] + "\n" + out + "```"
	})
	if *updateDocs && updated != doc {
		if err := os.WriteFile(docPath, []byte(updated), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func describe(t *testing.T, s *rules.Set) string {
	t.Helper()
	var b strings.Builder
	if err := s.Describe(&b); err != nil {
		t.Fatal(err)
	}
	_, rest, _ := strings.Cut(b.String(), "\n") // the domain line names the version
	return rest
}

// shellWords splits a command line as a shell would, for single quotes.
func shellWords(t *testing.T, s string) []string {
	t.Helper()
	var words []string
	var cur strings.Builder
	quoted, inWord := false, false
	for _, r := range s {
		switch {
		case r == '\'':
			quoted, inWord = !quoted, true
		case r == ' ' && !quoted:
			if inWord {
				words = append(words, cur.String())
				cur.Reset()
			}
			inWord = false
		default:
			cur.WriteRune(r)
			inWord = true
		}
	}
	if quoted {
		t.Fatalf("unbalanced quote in %q", s)
	}
	if inWord {
		words = append(words, cur.String())
	}
	return words
}

// TestRulesCheckService: a directory, or a file with --service, is read
// as ratelab rls reads its --config: any descriptor key, a limit with no
// algorithm a fixed window, each domain in words, the warnings listed and
// the files not read named; a gateway's file says its default is the
// sliding log.
func TestRulesCheckService(t *testing.T) {
	dir := t.TempDir()
	for name, src := range map[string]string{
		"a.yaml": "domain: a\ndescriptors:\n  - key: api_key\n    value_to_metric: true\n    rate_limit: {unit: minute, requests_per_unit: 5}\n",
		"b.yml": "domain: b\ndescriptors:\n  - key: database\n    value: users\n    rate_limit: {unit: second, requests_per_unit: 500, algorithm: gcra}\n" +
			"  - key: database\n    value: orders\n    rate_limit: {unit: second, requests_per_unit: 10, algorithm: gcra, burst: 6}\n",
		"README": "not a config",
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	code, out, errOut := ratelab(t, "rules", "check", dir)
	if code != exitOK || errOut != "" {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, want := range []string{
		"as ratelab rls reads it", ", 2 domains.\n", "is a fixed window aligned to its unit",
		"domain a, version ", "per value of api_key, at most 5 per 1m (fixed-window)",
		"domain b, version ", "requests with database = users: one shared counter, at most 500 per 1s (gcra)",
		"requests with database = orders: one shared counter, a burst of 6, then 10 per 1s (gcra)",
		"warning: " + filepath.Join(dir, "a.yaml") + ":4: descriptors[0].value_to_metric: ",
		"not read (only *.yaml and *.yml files are): README",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q in\n%s", want, out)
		}
	}
	if _, out, _ := ratelab(t, "rules", "check", "--service", filepath.Join(dir, "a.yaml")); !strings.Contains(out, "(fixed-window)") {
		t.Errorf("--service a.yaml:\n%s", out)
	}
	gateway := writeRules(t, "g.yaml", "domain: g\ndescriptors:\n  - key: remote_address\n    rate_limit: {unit: second, requests_per_unit: 1}\n")
	if _, out, _ := ratelab(t, "rules", "check", gateway); !strings.Contains(out, "(sliding-log)") || !strings.Contains(out, "is the sliding log, as the gateway reads it") {
		t.Errorf("the gateway's file:\n%s", out)
	}
	if code, _, errOut := ratelab(t, "rules", "check", "--merge-domains", gateway); code != exitUsage || !strings.Contains(errOut, "--merge-domains is for") {
		t.Errorf("--merge-domains with a gateway's file: exit %d, %s", code, errOut)
	}
}

// TestRulesCheckEnvoyFixtures: envoyproxy/ratelimit's own config fixtures,
// each in a directory of its own, and the pairs its tests load together,
// are accepted or refused by ratelab rls's reading of --config (through
// rules check) as the reference accepts or refuses them, domain merge
// included with --merge-domains.
func TestRulesCheckEnvoyFixtures(t *testing.T) {
	fixtures := envoyref.Fixtures(t)
	for _, tc := range []struct {
		files  []string
		merge  bool
		accept bool
	}{
		{[]string{"basic_config.yaml"}, false, true},
		{[]string{"shadowmode_config.yaml"}, false, true},
		{[]string{"wildcard.yaml"}, false, true},
		{[]string{"share_threshold.yaml"}, false, true},
		{[]string{"duplicate_domain.yaml"}, false, true},
		{[]string{"merge_domain_key1.yaml"}, false, true},
		{[]string{"merge_domain_key2.yaml"}, false, true},
		{[]string{"merge_domain_key1.yaml", "merge_domain_key2.yaml"}, true, true},
		{[]string{"merge_domain_key1.yaml", "merge_domain_key2.yaml"}, false, false},
		{[]string{"basic_config.yaml", "duplicate_domain.yaml"}, false, false},
		{[]string{"bad_limit_unit.yaml"}, false, false},
		{[]string{"bad_yaml.yaml"}, false, false},
		{[]string{"duplicate_key.yaml"}, false, false},
		{[]string{"empty_domain.yaml"}, false, false},
		{[]string{"empty_key.yaml"}, false, false},
		{[]string{"misspelled_key.yaml"}, false, false},
		{[]string{"misspelled_key2.yaml"}, false, false},
		{[]string{"non_map_list.yaml"}, false, false},
		{[]string{"non_string_key.yaml"}, false, false},
		{[]string{"replaces_empty.yaml"}, false, false},
		{[]string{"replaces_self.yaml"}, false, false},
		{[]string{"unlimited_with_unit.yaml"}, false, false},
	} {
		name := strings.Join(tc.files, "+")
		if tc.merge {
			name += " merged"
		}
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			for _, f := range tc.files {
				src, err := os.ReadFile(filepath.Join(fixtures, f))
				if err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(dir, f), src, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			args := []string{"rules", "check", dir}
			if tc.merge {
				args = append(args, "--merge-domains")
			}
			code, _, errOut := ratelab(t, args...)
			switch {
			case tc.accept && code != exitOK:
				t.Fatalf("refused, exit %d: %s", code, errOut)
			case !tc.accept && (code != exitUsage || !strings.Contains(errOut, ".yaml:")):
				t.Fatalf("exit %d, %q: want 2 naming a file and its line", code, errOut)
			}
		})
	}
}
