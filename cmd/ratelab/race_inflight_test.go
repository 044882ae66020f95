package main

import (
	"strings"
	"testing"

	"github.com/ratelab/ratelab/internal/redisrun/redistest"
	"github.com/ratelab/ratelab/race"
)

// TestRaceInFlight: `race --limiters semaphore-naive,semaphore-incr,semaphore-lease`
// with its default faults exits 3 under --fail-on-leak, naming the counters
// and not the lease: every trial's first holder is killed, so both counters
// leak a slot in every trial, and the lease leaks none once its TTL has
// passed and never holds more than the limit at once. Alone, the lease passes.
func TestRaceInFlight(t *testing.T) {
	t.Parallel()
	redistest.Client(t, srv)
	fast := []string{"race", "--redis", srv.URL(), "--trials", "2", "--concurrency", "20", "--hold", "20ms", "--lease-ttl", "300ms"}
	code, stdout, stderr := ratelab(t, append(fast, "--output", "json", "--fail-on-leak",
		"--limiters", "semaphore-naive,semaphore-incr,semaphore-lease")...)
	if code != exitThreshold || !strings.Contains(stderr, "semaphore-incr leaked") || strings.Contains(stderr, "semaphore-lease") {
		t.Fatalf("exit %d, stderr %q: want 3, naming semaphore-incr's leak and not the lease", code, stderr)
	}
	var rep race.Report
	decodeJSON(t, stdout, &rep)
	if len(rep.InFlight) != 3 || rep.Config.RequestsPerWorker != 4 || rep.Config.InFlight == nil ||
		rep.Config.InFlight.Faults != (race.Faults{Kill: 0.2, LoseRelease: 0.1, RetryRelease: 0.1}) {
		t.Fatalf("%d in-flight results, %d requests per worker, settings %+v; want 3, the default 4 and the default faults",
			len(rep.InFlight), rep.Config.RequestsPerWorker, rep.Config.InFlight)
	}
	for _, r := range rep.InFlight {
		for i, tr := range r.TrialResults {
			switch {
			case r.Limiter == "semaphore-lease" && (tr.Over || tr.Leaked != 0):
				t.Errorf("semaphore-lease trial %d: over %t, leaked %d after the TTL", i+1, tr.Over, tr.Leaked)
			case r.Limiter != "semaphore-lease" && (tr.Leaked < 1 || tr.Faults.Killed < 1):
				t.Errorf("%s trial %d: leaked %d, %d killed; want a leak", r.Limiter, i+1, tr.Leaked, tr.Faults.Killed)
			}
		}
	}
	code, stdout, stderr = ratelab(t, append(fast, "--fail-on-leak", "--limiters", "semaphore-lease")...)
	if code != exitOK || !strings.Contains(stdout, "semaphore-lease held at most 5 at once and leaked nothing once its 300ms lease TTL had passed") {
		t.Fatalf("the lease alone: exit %d\n%s\n%s", code, stdout, stderr)
	}
}

// TestRaceInFlightBadInput: flags of the other kind of limiter, rate and
// in-flight limiters together, and bad in-flight settings are refused
// naming the flag, exit 2, before anything is sent.
func TestRaceInFlightBadInput(t *testing.T) {
	c := redistest.Client(t, srv)
	lease := []string{"race", "--limiters", "semaphore-lease"}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"race", "--limiters", "semaphore-lease,lua"}, "--limiters mixes in-flight limiters (semaphore-lease) with rate limiters (lua): race them apart"},
		{append(lease, "--window", "1s"), "--window is for rate limiters: in-flight limiters hold slots for --hold, and have no window"},
		{append(lease, "--clock", "redis"), "--clock is for rate limiters"},
		{append(lease, "--script", "x.lua"), "--script is for rate limiters"},
		{[]string{"race", "--hold", "10ms"}, "--hold is for in-flight limiters (semaphore-naive, semaphore-incr, semaphore-lease)"},
		{[]string{"race", "--limiters", "lua", "--kill", "0.5"}, "--kill is for in-flight limiters"},
		{append(lease, "--hold", "0s"), "--hold must be between 1ms and 1m0s (got 0s)"},
		{append(lease, "--hold", "1m", "--requests-per-worker", "11"), "--hold × --requests-per-worker must be at most 10m0s"},
		{append(lease, "--lease-ttl", "0s"), "--lease-ttl must be between 1ms and 24h0m0s (got 0s)"},
		{append(lease, "--lease-ttl", "1500us"), "--lease-ttl must be a whole number of milliseconds"},
		{append(lease, "--kill", "2"), "--kill must be a share between 0 and 1 (got 2)"},
		{append(lease, "--retry-release", "-0.5"), "--retry-release must be a share between 0 and 1 (got -0.5)"},
		{append(lease, "--kill", "0.6", "--lose-release", "0.5"), "--kill + --lose-release + --retry-release must be at most 1"},
		{append(lease, "--limit", "0"), "--limit must be at least 1 (got 0)"},
		{append(lease, "--explain=lua"), "--explain names lua, which is not raced (raced: semaphore-lease)"},
		{[]string{"race", "--explain=semaphore-incr"}, "--explain names semaphore-incr, which is not raced (raced: naive, multi, watch, lua)"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			before := connections(t, c)
			code, stdout, stderr := ratelab(t, append(tc.args, "--redis="+srv.URL())...)
			if code != exitUsage || !strings.Contains(stderr, tc.want) || stdout != "" {
				t.Errorf("exit %d, stderr %q, stdout %q; want 2 and %q", code, stderr, stdout, tc.want)
			}
			if after := connections(t, c); after != before {
				t.Errorf("the server accepted connections (%s, then %s): something was sent", before, after)
			}
		})
	}
}
