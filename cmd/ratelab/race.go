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
	"WatchRetries": "--watch-retries", "Limiters": "--limiters", "Explain": "--explain", "ExplainLines": "--explain-lines"}

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
  ratelab race --script my_limiter.lua --script-args "{limit} {window_ms} {now_ms} {member}" --fail-on-leak`,
		Args: raceArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runRace(cmd.Context(), io, cmd, opts) },
	}
	f := cmd.Flags()
	f.StringVar(&opts.limiters, "limiters", "naive,multi,watch,lua", "limiters to race, comma-separated, or all")
	f.IntVar(&opts.Concurrency, "concurrency", 100, "goroutines released together at one key")
	f.Int64Var(&opts.Policy.Limit, "limit", 5, "requests admitted per window")
	f.DurationVar(&opts.Policy.Window, "window", 10*time.Second, "window length (whole milliseconds)")
	f.IntVar(&opts.Trials, "trials", 20, "bursts per limiter, each on a fresh key")
	f.IntVar(&opts.RequestsPerWorker, "requests-per-worker", 1, "decisions each goroutine makes back to back")
	f.IntVar(&opts.WatchRetries, "watch-retries", 0, fmt.Sprintf("attempts the watch limiter makes before it denies (0: %d)", algorithms.DefaultWatchRetries))
	f.StringVar(&opts.clock, "clock", "caller", "where the Lua limiters take the time from: caller or redis")
	f.BoolVar(&opts.failOnLeak, "fail-on-leak", false, "exit 3 when any limiter admitted more than its own guarantee allowed")
	f.StringVar(&opts.explain, "explain", "", "run one more trial of these limiters (comma-separated, or all) with MONITOR on "+
		"and show what Redis executed; alone, naive")
	f.Lookup("explain").NoOptDefVal = "naive"
	f.IntVar(&opts.ExplainLines, "explain-lines", race.DefaultExplainLines,
		fmt.Sprintf("commands of each explained trace to show, around the moments that matter (at most %d)", race.MaxExplainLines))
	opts.redis.bind(f, false)
	opts.output.bind(cmd)
	opts.script.bind(f)
	complete(cmd, "limiters", append(algorithms.Names(), "all")...)
	complete(cmd, "clock", "caller", "redis")
	complete(cmd, "explain", append(algorithms.Names(), "all")...)
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
	if cfg.Scripts, err = opts.script.load(cmd.Flags()); err != nil {
		return cfg, "", err
	}
	list := opts.limiters
	if len(cfg.Scripts) > 0 && !cmd.Flags().Changed("limiters") {
		list = "lua" // the reference the script is raced beside
	}
	if cfg.Limiters, err = algorithms.ParseNames(list); err != nil {
		return cfg, "", usagef("--limiters: %w", err)
	}
	switch f := cmd.Flags(); {
	case f.Changed("explain"):
		if cfg.Explain, err = explainNames(opts.explain, cfg); err != nil {
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
	if err := reports.Race(io.out, rep, format, io.render()); err != nil {
		return err
	}
	if leaked := rep.Leaked(); opts.failOnLeak && len(leaked) > 0 {
		return &thresholdError{"--fail-on-leak: " + strings.Join(leaked, ", ")}
	}
	return nil
}
