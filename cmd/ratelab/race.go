package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/ratelab/ratelab/algorithms"
	"github.com/ratelab/ratelab/race"
	"github.com/ratelab/ratelab/reports"
)

// raceOptions are the flags of ratelab race; race.Config holds the rest.
type raceOptions struct {
	race.Config
	limiters, clock string
	explain         string
	failOnLeak      bool
	redis           redisFlags
	output          outputFlag
	script          scriptFlags
}

// raceNames are the flags that set race.Config's fields.
var raceNames = flagNames{"Concurrency": "--concurrency", "RequestsPerWorker": "--requests-per-worker", "Trials": "--trials",
	"WatchRetries": "--watch-retries", "Limiters": "--limiters", "Explain": "--explain", "ExplainLines": "--explain-lines",
	"Hold": "--hold", "LeaseTTL": "--lease-ttl", "Faults.Kill": "--kill", "Faults.LoseRelease": "--lose-release",
	"Faults.RetryRelease": "--retry-release"}

// Flags that only rate limiters read, and flags that only in-flight
// limiters read: a race of the other kind refuses them.
var (
	rateOnlyFlags     = []string{"window", "clock", "watch-retries", "script", "script-args", "script-name"}
	inFlightOnlyFlags = []string{"hold", "lease-ttl", "kill", "lose-release", "retry-release"}
)

// inFlightRequests is --requests-per-worker for in-flight limiters when
// it is not given: each goroutine comes back three times after its first
// request, so that slots leaked early deny requests later.
const inFlightRequests = 4

func newRaceCmd(io *ioStreams) *cobra.Command {
	var opts raceOptions
	cmd := &cobra.Command{
		Use:   "race",
		Short: "Race concurrent requests through limiters at one key and count what each admitted",
		Long: `race releases --concurrency goroutines at the same instant at one fresh key, --trials times
per limiter, and counts how many requests each limiter admitted against what its own guarantee
allows over the trial's span.

Limiters (--limiters, comma-separated, or all):
` + limiterHelp(false) + `
In-flight limiters bound the requests in flight at once, not per window; they are raced
apart from the others, never in one run with them:
` + semaphoreHelp() + `
Each request one admits holds its slot for --hold, then releases it; a denied one waits as
long before its next request; each goroutine makes --requests-per-worker requests (4 unless
given). Faults befall the holders, each a share of the admissions: --kill (holders killed
halfway through their hold, their connection closed, never released), --lose-release
(releases never sent), --retry-release (releases sent twice). The table shows the most held
at once against --limit, the slots the key still counted when nobody held one (for
semaphore-lease once --lease-ttl has passed), and the denials made when fewer than the limit
could have been held. See docs/limiters.md.

With no --redis (or REDIS_URL) ratelab starts a private redis-server on a free loopback
port and stops it on exit; with no redis-server on PATH it uses an embedded Redis and says so.

--explain runs one more trial of the limiters it names (naive when given no value) with a
MONITOR connection open on the server that holds the key, and prints the commands of that
trial in the order Redis executed them: µs since the first, the goroutine that sent each, the
reply it got, and the moments that make the race (stale reads, admissions beyond the limit,
aborted EXECs, phantom members, script calls with nothing between their read and write). The
trace is cut to --explain-lines around those moments. MONITOR slows the server: that trial's
latency is not comparable, and it is not counted in the table. A server that refuses MONITOR
(an ACL without +monitor, a managed service, the embedded Redis) gets the race without the
trace, and a line that says why. See docs/explain.md.`,
		Example: `  ratelab race
  ratelab race --explain
  ratelab race --limiters naive,lua --explain=naive,lua --explain-lines 60
  ratelab race --limiters all --trials 50
  ratelab race --redis redis://127.0.0.1:6379/0 --output json
  ratelab race --fail-on-leak --limiters lua,watch
  ratelab race --script my_limiter.lua --script-args "{limit} {window_ms} {now_ms} {member}" --fail-on-leak
  ratelab race --limiters semaphore-naive,semaphore-incr,semaphore-lease
  ratelab race --limiters semaphore-lease --hold 200ms --lease-ttl 2s --kill 0.5 --explain=semaphore-lease`,
		Args: raceArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runRace(cmd.Context(), io, cmd, opts) },
	}
	f := cmd.Flags()
	f.StringVar(&opts.limiters, "limiters", "naive,multi,watch,lua", "limiters to race, comma-separated, or all")
	f.IntVar(&opts.Concurrency, "concurrency", 100, "goroutines released together at one key")
	f.Int64Var(&opts.Policy.Limit, "limit", 5, "requests admitted per window (in-flight limiters: in flight at once)")
	f.DurationVar(&opts.Policy.Window, "window", 10*time.Second, "window length (whole milliseconds)")
	f.IntVar(&opts.Trials, "trials", 20, "bursts per limiter, each on a fresh key")
	f.IntVar(&opts.RequestsPerWorker, "requests-per-worker", 1, fmt.Sprintf("decisions each goroutine makes back to back "+
		"(in-flight limiters: %d unless given)", inFlightRequests))
	f.IntVar(&opts.WatchRetries, "watch-retries", 0, fmt.Sprintf("attempts the watch limiter makes before it denies (0: %d)", algorithms.DefaultWatchRetries))
	f.StringVar(&opts.clock, "clock", "caller", "where the Lua limiters take the time from: caller or redis")
	f.BoolVar(&opts.failOnLeak, "fail-on-leak", false, "exit 3 when any limiter admitted more than its own guarantee allowed "+
		"(in-flight limiters: held more than --limit at once, or leaked a slot)")
	f.StringVar(&opts.explain, "explain", "", "run one more trial of these limiters (comma-separated, or all) with MONITOR on "+
		"and show what Redis executed; alone, naive (semaphore-naive for in-flight limiters)")
	f.Lookup("explain").NoOptDefVal = "naive"
	f.IntVar(&opts.ExplainLines, "explain-lines", race.DefaultExplainLines,
		fmt.Sprintf("commands of each explained trace to show, around the moments that matter (at most %d)", race.MaxExplainLines))
	f.DurationVar(&opts.Hold, "hold", 50*time.Millisecond, "in-flight limiters: how long each admitted request holds its slot, "+
		"the upstream's service time")
	f.DurationVar(&opts.LeaseTTL, "lease-ttl", 500*time.Millisecond, "semaphore-lease: how long a lease lives when its holder never releases it")
	f.Float64Var(&opts.Faults.Kill, "kill", 0.2, "in-flight limiters: share of holders killed halfway through their hold, "+
		"their connection closed, never released")
	f.Float64Var(&opts.Faults.LoseRelease, "lose-release", 0.1, "in-flight limiters: share of holders whose release is never sent")
	f.Float64Var(&opts.Faults.RetryRelease, "retry-release", 0.1, "in-flight limiters: share of holders whose release is sent twice")
	opts.redis.bind(f, false)
	opts.output.bind(cmd)
	opts.script.bind(f)
	names := append(append(algorithms.Names(), algorithms.SemaphoreNames()...), "all")
	complete(cmd, "limiters", names...)
	complete(cmd, "clock", "caller", "redis")
	complete(cmd, "explain", names...)
	return cmd
}

// raceArgs refuses arguments, and says how to give --explain its value:
// with no "=", the next word is taken as an argument.
func raceArgs(cmd *cobra.Command, args []string) error {
	if len(args) > 0 && cmd.Flags().Changed("explain") {
		return usagef("%s takes no arguments (got %q): give --explain its limiters after an equals sign, as in --explain=%s",
			cmd.CommandPath(), strings.Join(args, " "), args[0])
	}
	return noArgs(cmd, args)
}

// explainNames reads --explain: limiters of the race (or scripts raced),
// comma-separated, or all of them.
func explainNames(list string, cfg race.Config) ([]string, error) {
	raced := slices.Clone(cfg.Limiters)
	for _, s := range cfg.Scripts {
		raced = append(raced, s.Name)
	}
	var names []string
	for _, n := range strings.Split(list, ",") {
		n = strings.TrimSpace(n)
		_, known := algorithms.Lookup(n)
		known = known || algorithms.IsSemaphore(n)
		switch {
		case n == "":
			continue
		case n == "all":
			names = append(names, raced...)
			continue
		case !known && !slices.Contains(raced, n):
			return nil, usagef("--explain: %w", &algorithms.UnknownError{Name: n})
		}
		names = append(names, n)
	}
	if len(names) == 0 {
		return nil, usagef("--explain names no limiter")
	}
	slices.Sort(names)
	return slices.Compact(names), nil
}

// raceConfig checks every flag and builds the run. Nothing is started or
// sent before it succeeds.
func raceConfig(cmd *cobra.Command, opts raceOptions) (race.Config, reports.Format, error) {
	cfg := opts.Config
	format, err := opts.output.format()
	if err != nil {
		return cfg, "", err
	}
	if cfg.Clock, err = algorithms.ParseClock(opts.clock); err != nil {
		return cfg, "", usagef("--clock: %w", err)
	}
	list := opts.limiters
	if opts.script.path != "" && !cmd.Flags().Changed("limiters") {
		list = "lua" // the reference the script is raced beside
	}
	if cfg.Limiters, err = algorithms.ParseNames(list); err != nil {
		return cfg, "", usagef("--limiters: %w", err)
	}
	if err := raceKindFlags(cmd, cfg); err != nil {
		return cfg, "", err
	}
	if cfg.Scripts, err = opts.script.load(cmd.Flags()); err != nil {
		return cfg, "", err
	}
	explain := opts.explain
	if cfg.InFlight() {
		if !cmd.Flags().Changed("requests-per-worker") {
			cfg.RequestsPerWorker = inFlightRequests
		}
		if explain == "naive" { // --explain alone
			explain = "semaphore-naive"
		}
	}
	switch f := cmd.Flags(); {
	case f.Changed("explain"):
		if cfg.Explain, err = explainNames(explain, cfg); err != nil {
			return cfg, "", err
		}
	case f.Changed("explain-lines"):
		return cfg, "", usagef("--explain-lines needs --explain")
	}
	if err := cfg.Validate(); err != nil {
		return cfg, "", flagError(err, raceNames, policyNames, scriptNames)
	}
	return cfg, format, nil
}

// raceKindFlags refuses the flags that the kind of limiter raced does not
// read, naming the first one given.
func raceKindFlags(cmd *cobra.Command, cfg race.Config) error {
	unread, kind := inFlightOnlyFlags, "in-flight limiters ("+strings.Join(algorithms.SemaphoreNames(), ", ")+")"
	if cfg.InFlight() {
		unread, kind = rateOnlyFlags, "rate limiters: in-flight limiters hold slots for --hold, and have no window"
	}
	for _, name := range unread {
		if cmd.Flags().Changed(name) {
			return usagef("--%s is for %s", name, kind)
		}
	}
	return nil
}

// semaphoreHelp lists the in-flight limiters for --help, in the column
// of limiterHelp's names.
func semaphoreHelp() string {
	width := 18
	for _, in := range algorithms.Registered() {
		width = max(width, len(in.Name)+1)
	}
	var b strings.Builder
	for _, in := range algorithms.Semaphores() {
		fmt.Fprintf(&b, "  %-*s %s\n", width, in.Name, in.Description)
	}
	return b.String()
}

func runRace(ctx context.Context, io *ioStreams, cmd *cobra.Command, opts raceOptions) error {
	cfg, format, err := raceConfig(cmd, opts)
	if err != nil {
		return err
	}
	target, err := opts.redis.config(io)
	if err != nil {
		return err
	}
	t, err := openTarget(ctx, io, target, "race")
	if err != nil {
		return err
	}
	defer t.Close()
	cfg.Redis = t.Options
	cfg.Progress = func(name string, trial, trials int) { io.status("racing %s: trial %d/%d", name, trial, trials) }
	rep, err := race.Run(ctx, cfg)
	io.clearStatus()
	if err != nil {
		return err
	}
	rep.Redis = t.Info
	for _, r := range rep.Results {
		if r.Explain != nil && r.Explain.Skipped != "" {
			io.notef("--explain %s: no trace: %s", r.Limiter, r.Explain.Skipped)
		}
	}
	for _, r := range rep.InFlight {
		if r.Explain != nil && r.Explain.Skipped != "" {
			io.notef("--explain %s: no trace: %s", r.Limiter, r.Explain.Skipped)
		}
	}
	if err := reports.Race(io.out, rep, format, io.render()); err != nil {
		return err
	}
	if leaked := rep.Leaked(); opts.failOnLeak && len(leaked) > 0 {
		return &thresholdError{"--fail-on-leak: " + strings.Join(leaked, ", ")}
	}
	return nil
}
