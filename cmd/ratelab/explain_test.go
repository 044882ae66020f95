package main

import (
	"context"
	"strings"
	"testing"

	"github.com/ratelab/ratelab/internal/redisrun/redistest"
)

// TestExplainBadInput: --explain's mistakes exit 2 with the flag named,
// before anything is sent.
func TestExplainBadInput(t *testing.T) {
	c := redistest.Client(t, srv)
	url := "--redis=" + srv.URL()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"race", "--explain=bogus"}, `--explain: unknown limiter "bogus"`},
		{[]string{"race", "--explain="}, "--explain names no limiter"},
		{[]string{"race", "--limiters", "lua", "--explain"}, "--explain names naive, which is not raced (raced: lua)"},
		{[]string{"race", "--explain", "--concurrency", "2000"},
			"--explain gives each goroutine a connection of its own: --concurrency must be at most 1000 (got 2000)"},
		{[]string{"race", "--explain", "--explain-lines", "-1"}, "--explain-lines must be between 1 and 10000"},
		{[]string{"race", "--explain-lines", "10"}, "--explain-lines needs --explain"},
		{[]string{"race", "--explain", "lua"}, `give --explain its limiters after an equals sign, as in --explain=lua`},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			before := connections(t, c)
			code, stdout, stderr := ratelab(t, append(tc.args, url)...)
			if code != exitUsage || !strings.Contains(stderr, tc.want) || stdout != "" {
				t.Errorf("exit %d, stderr %q, stdout %q; want exit 2 saying %q", code, stderr, stdout, tc.want)
			}
			if after := connections(t, c); after != before {
				t.Errorf("the server accepted connections (%s, then %s): something was sent", before, after)
			}
		})
	}
}

// TestExplainJSON: each explained limiter's result carries the trace and
// its counts, as documented; the others carry none.
func TestExplainJSON(t *testing.T) {
	t.Parallel()
	redistest.Client(t, srv) // skips without redis-server, fails under CI
	// A private server: a MONITOR slows every command of its server, and
	// the package's is shared.
	code, stdout, stderr := ratelab(t, "race", "--trials", "2", "--limiters", "naive,watch,lua",
		"--explain=naive,lua", "--explain-lines", "25", "--output", "json")
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var rep struct {
		Results []struct {
			Limiter string
			Explain map[string]any
		}
	}
	decodeJSON(t, stdout, &rep)
	for _, r := range rep.Results {
		if r.Limiter == "watch" {
			if r.Explain != nil {
				t.Errorf("watch was not asked to be explained, and has %v", r.Explain)
			}
			continue
		}
		for _, f := range []string{"stale_reads", "over_admitted", "admitted", "reads", "commands", "decisions"} {
			if _, ok := r.Explain[f].(float64); !ok {
				t.Errorf("%s: explain.%s is %v", r.Limiter, f, r.Explain[f])
			}
		}
		events := jsonField[[]any](t, r.Explain, "events")
		if len(events) == 0 || len(events) > 25 {
			t.Fatalf("%s: %d events, want 1 to 25", r.Limiter, len(events))
		}
		for _, e := range events {
			e, ok := e.(map[string]any)
			if !ok {
				t.Fatalf("%s: an event is %T", r.Limiter, e)
			}
			for _, f := range []string{"us", "goroutine", "command", "reply"} {
				if _, ok := e[f]; !ok {
					t.Errorf("%s: event %v has no %q", r.Limiter, e, f)
				}
			}
		}
		trial := jsonField[map[string]any](t, r.Explain, "trial")
		if r.Explain["admitted"] != trial["admitted"] {
			t.Errorf("%s: the trace admitted %v, its trial %v", r.Limiter, r.Explain["admitted"], trial["admitted"])
		}
	}
}

// TestExplainRefusedByACL: with a user that may not MONITOR, the race is
// reported, exit 0, and the explanation says the server refused.
func TestExplainRefusedByACL(t *testing.T) {
	t.Parallel()
	c := redistest.Client(t, srv)
	user := redistest.Prefix(t)
	ctx := context.Background()
	if err := c.Do(ctx, "ACL", "SETUSER", user, "on", ">pw", "~*", "&*", "+@all", "-monitor").Err(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Do(context.Background(), "ACL", "DELUSER", user) })
	url := "redis://" + user + ":pw@" + srv.Addr
	code, stdout, stderr := ratelab(t, "race", "--redis", url, "--trials", "2", "--limiters", "naive,lua", "--explain")
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if !strings.Contains(stderr, "--explain naive: no trace: the server refused MONITOR (NOPERM") {
		t.Errorf("stderr does not say MONITOR was refused:\n%s", stderr)
	}
	for _, want := range []string{"│ naive ", "│ lua ", "naive, explained", "No trace: the server refused MONITOR"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("no %q in the report:\n%s", want, stdout)
		}
	}
}

// TestExplainEmbedded: the embedded server has no MONITOR; the report says so.
func TestExplainEmbedded(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	code, stdout, stderr := ratelab(t, "race", "--trials", "1", "--limiters", "naive", "--explain", "--output", "markdown")
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if !strings.Contains(stdout, "The embedded Redis (miniredis) has no MONITOR") || !strings.Contains(stderr, "does not support MONITOR") {
		t.Fatalf("no word of the missing MONITOR:\nstdout %s\nstderr %s", stdout, stderr)
	}
}
