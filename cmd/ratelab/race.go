package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/mattn/go-isatty"
	"github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"

	"github.com/ratelab/ratelab/algorithms"
	"github.com/ratelab/ratelab/race"
	"github.com/ratelab/ratelab/reports"
)

// raceOptions are the flags of ratelab race.
type raceOptions struct {
	Limiters          string
	Concurrency       int
	Limit             int64
	Window            time.Duration
	Trials            int
	RequestsPerWorker int
	WatchRetries      int
	Clock             string
	Redis             string
	Cluster           bool
	Output            string
	FailOnLeak        bool
	Script            scriptOptions
	// LimitersSet is whether --limiters was given.
	LimitersSet bool

	Stdout, Stderr io.Writer
	// Color and Progress are decided from the terminal by the command.
	Color, Progress bool
}

func newRaceCmd(stdout, stderr io.Writer) *cobra.Command {
	opts := raceOptions{Stdout: stdout, Stderr: stderr}
	cmd := &cobra.Command{
		Use:   "race",
		Short: "Race concurrent requests through limiters at one key and count what each admitted",
		Long: `race releases --concurrency goroutines at the same instant at one fresh key, --trials times
per limiter, and counts how many requests each limiter admitted against --limit.

Limiters (--limiters, comma-separated, or all):
` + limiterHelp(false) + `
With no --redis (or REDIS_URL) ratelab starts a private redis-server on a free loopback
port and stops it on exit; with no redis-server on PATH it uses an embedded Redis and says so.`,
		Example: `  ratelab race
  ratelab race --limiters all --trials 50
  ratelab race --redis redis://127.0.0.1:6379/0 --output json
  ratelab race --fail-on-leak --limiters lua,watch
  ratelab race --script my_limiter.lua --script-args "{limit} {window_ms} {now_ms} {member}" --fail-on-leak`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			opts.Color = isTerminal(stdout) && os.Getenv("NO_COLOR") == ""
			opts.Progress = isTerminal(stderr)
			opts.LimitersSet = cmd.Flags().Changed("limiters")
			return runRace(cmd.Context(), opts)
		},
	}
	f := cmd.Flags()
	f.StringVar(&opts.Limiters, "limiters", "naive,multi,watch,lua", "limiters to race, comma-separated, or all")
	f.IntVar(&opts.Concurrency, "concurrency", 100, "goroutines released together at one key")
	f.Int64Var(&opts.Limit, "limit", 5, "requests admitted per window")
	f.DurationVar(&opts.Window, "window", 10*time.Second, "window length (whole milliseconds)")
	f.IntVar(&opts.Trials, "trials", 20, "bursts per limiter, each on a fresh key")
	f.IntVar(&opts.RequestsPerWorker, "requests-per-worker", 1, "decisions each goroutine makes back to back")
	f.IntVar(&opts.WatchRetries, "watch-retries", algorithms.DefaultWatchRetries, "attempts the watch limiter makes before it denies")
	f.StringVar(&opts.Clock, "clock", "caller", "where the Lua limiters take the time from: caller or redis")
	f.StringVar(&opts.Redis, "redis", "", "Redis URL: redis://, rediss:// or unix://, or comma-separated URLs of a Cluster "+
		"(default $REDIS_URL, else a private redis-server)")
	f.BoolVar(&opts.Cluster, "cluster", false, "treat --redis as a seed of a Redis Cluster")
	f.StringVarP(&opts.Output, "output", "o", "table", "output format: table, markdown or json")
	f.BoolVar(&opts.FailOnLeak, "fail-on-leak", false, "exit 3 when any limiter admitted more than its own guarantee allowed")
	opts.Script.bind(f)
	_ = cmd.RegisterFlagCompletionFunc("limiters", func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
		return append(algorithms.Names(), "all"), cobra.ShellCompDirectiveNoFileComp
	})
	_ = cmd.RegisterFlagCompletionFunc("clock", cobra.FixedCompletions([]string{"caller", "redis"}, cobra.ShellCompDirectiveNoFileComp))
	_ = cmd.RegisterFlagCompletionFunc("output", cobra.FixedCompletions([]string{"table", "markdown", "json"}, cobra.ShellCompDirectiveNoFileComp))
	return cmd
}

// limiterHelp lists the registered limiters (or only the algorithms) for --help.
func limiterHelp(onlyAlgorithms bool) string {
	var b strings.Builder
	for _, in := range algorithms.Registered() {
		if in.Algorithm || !onlyAlgorithms {
			fmt.Fprintf(&b, "  %-18s %s\n", in.Name, in.Description)
		}
	}
	return b.String()
}

// raceConfig checks every flag and builds the run's configuration. Nothing
// is sent to Redis before it succeeds.
func raceConfig(opts raceOptions) (race.Config, reports.Format, *redis.UniversalOptions, error) {
	var cfg race.Config
	format, err := reports.ParseFormat(opts.Output)
	if err != nil {
		return cfg, "", nil, usagef("--output: %w", err)
	}
	clock, err := algorithms.ParseClock(opts.Clock)
	if err != nil {
		return cfg, "", nil, usagef("--clock: %w", err)
	}
	scripts, err := opts.Script.load()
	if err != nil {
		return cfg, "", nil, err
	}
	list := opts.Limiters
	if len(scripts) > 0 && !opts.LimitersSet {
		list = "lua" // the reference the script is raced beside
	}
	names, err := algorithms.ParseNames(list)
	if err != nil {
		return cfg, "", nil, usagef("--limiters: %w", err)
	}
	if opts.WatchRetries < 1 {
		return cfg, "", nil, usagef("--watch-retries must be at least 1 (got %d)", opts.WatchRetries)
	}
	cfg = race.Config{
		Limiters:          names,
		Scripts:           scripts,
		Policy:            algorithms.Policy{Limit: opts.Limit, Window: opts.Window},
		Concurrency:       opts.Concurrency,
		RequestsPerWorker: opts.RequestsPerWorker,
		Trials:            opts.Trials,
		Clock:             clock,
		WatchRetries:      opts.WatchRetries,
	}
	if err := cfg.Validate(); err != nil {
		return cfg, "", nil, &usageError{err}
	}
	ropts, err := redisOptions(opts.Redis, opts.Cluster)
	if err != nil {
		return cfg, "", nil, err
	}
	return cfg, format, ropts, nil
}

func runRace(ctx context.Context, opts raceOptions) error {
	cfg, format, ropts, err := raceConfig(opts)
	if err != nil {
		return err
	}
	tgt, err := openTarget(ctx, ropts, opts.Stderr)
	if err != nil {
		return err
	}
	defer tgt.close()
	cfg.Redis = tgt.opts
	if opts.Progress {
		cfg.Progress = func(name string, trial, trials int) {
			fmt.Fprintf(opts.Stderr, "\r\033[Kracing %s: trial %d/%d", name, trial, trials)
		}
	}
	rep, err := race.Run(ctx, cfg)
	if opts.Progress {
		fmt.Fprint(opts.Stderr, "\r\033[K")
	}
	if err != nil {
		return err
	}
	rep.Redis = tgt.info
	if err := reports.Race(opts.Stdout, rep, format, reports.Options{Color: opts.Color}); err != nil {
		return err
	}
	if opts.FailOnLeak {
		var leaked []string
		for _, r := range rep.Results {
			if r.OverAdmitted > 0 {
				leaked = append(leaked, fmt.Sprintf("%s over-admitted %d", r.Limiter, r.OverAdmitted))
			}
		}
		if len(leaked) > 0 {
			return &thresholdError{"--fail-on-leak: " + strings.Join(leaked, ", ")}
		}
	}
	return nil
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && (isatty.IsTerminal(f.Fd()) || isatty.IsCygwinTerminal(f.Fd()))
}
