package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"runtime"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/ratelab/ratelab/algorithms"
	"github.com/ratelab/ratelab/bench"
	"github.com/ratelab/ratelab/reports"
)

// benchOptions are the flags of ratelab bench http.
type benchOptions struct {
	Rate           float64
	Connections    int
	MaxInFlight    int
	Threads        int
	Insecure       bool
	Interval       time.Duration
	Duration       time.Duration
	Requests       int64
	Warmup         time.Duration
	Method         string
	Headers        []string
	Body           string
	Consumers      int
	ConsumerHeader string
	Timeout        time.Duration
	Output         string
	HGRM           string
	MaxP99         time.Duration
	MaxErrorRate   float64
	ExpectLimit    string
	ExpectAlgo     string
	FailOnLeak     bool
	NoProbes       bool

	Stdout, Stderr io.Writer
	Color          bool
	Progress       bool
}

func newBenchCmd(stdout, stderr io.Writer) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Load-test a live endpoint",
	}
	opts := benchOptions{Stdout: stdout, Stderr: stderr}
	http := &cobra.Command{
		Use:   "http URL",
		Short: "Load-test an HTTP endpoint, with latencies that do not hide stalls",
		Long: `bench http sends load to URL and reports latency percentiles, throughput and the status mix.

With --rate (the open model) every request has an intended send time on a fixed schedule and
its latency is timed from then, as wrk2 does: a stall of the server delays every request that
was due during it, and the percentiles show it. Send lag (actual minus intended start) is
recorded apart, and requests that could not be sent in time are counted. With --rate 0 (the
closed model) --connections workers send back to back, for maximum throughput.

--consumers K sends K identities in --consumer-header (consumer-0 … consumer-K-1).
Ctrl-C stops the run and still reports what was measured.`,
		Example: `  ratelab bench http http://127.0.0.1:8080/v1/ping --rate 2000 --duration 60s --consumers 50
  ratelab bench http http://127.0.0.1:8080/ --rate 0 --connections 64 --duration 10s
  ratelab bench http http://127.0.0.1:8080/ --rate 500 --max-p99 20ms --max-error-rate 0.01 -o json > run.json`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usagef("bench http takes one URL (got %d arguments)", len(args))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Color = isTerminal(stdout) && os.Getenv("NO_COLOR") == ""
			opts.Progress = isTerminal(stderr)
			return runBench(cmd.Context(), args[0], opts)
		},
	}
	f := http.Flags()
	f.Float64Var(&opts.Rate, "rate", 100, "requests per second in total (open model); 0 for the closed model")
	f.IntVar(&opts.Connections, "connections", 10, "keep-alive connections, each with one request in flight at a time")
	f.IntVar(&opts.MaxInFlight, "max-in-flight", 0, "requests in flight at most")
	_ = f.MarkDeprecated("max-in-flight", "each connection has one request in flight: use --connections")
	f.IntVar(&opts.Threads, "threads", runtime.NumCPU(), "threads the load generator runs on (GOMAXPROCS), as wrk's -t")
	f.BoolVar(&opts.Insecure, "insecure", false, "do not verify an https target's certificate (for test gateways)")
	f.DurationVar(&opts.Interval, "interval", time.Second, "length of the timeline's intervals")
	f.DurationVar(&opts.Duration, "duration", 10*time.Second, "length of the measured run (0: bounded by --requests)")
	f.Int64Var(&opts.Requests, "requests", 0, "measured requests to send, at most")
	f.DurationVar(&opts.Warmup, "warmup", 0, "load before the measured run, reported apart")
	f.StringVarP(&opts.Method, "method", "X", "GET", "HTTP method")
	f.StringArrayVarP(&opts.Headers, "header", "H", nil, `a header to send, "Name: value" (repeatable)`)
	f.StringVar(&opts.Body, "body", "", "request body, or @FILE to read it from a file")
	f.IntVar(&opts.Consumers, "consumers", 1, "identities to spread the requests over")
	f.StringVar(&opts.ConsumerHeader, "consumer-header", "X-Consumer-Id", `header that carries the identity ("" for one anonymous client)`)
	f.DurationVar(&opts.Timeout, "timeout", 10*time.Second, "bound on one request")
	f.StringVarP(&opts.Output, "output", "o", "table", "output format: table, markdown or json (json keeps the histograms)")
	f.StringVar(&opts.HGRM, "hgrm", "", "write the latency distribution to FILE in HdrHistogram's percentile format (ms)")
	f.DurationVar(&opts.MaxP99, "max-p99", 0, "exit 3 when the p99 latency is above this")
	f.Float64Var(&opts.MaxErrorRate, "max-error-rate", -1, "exit 3 when the share of transport errors and 5xx is above this (0 to 1)")
	f.StringVar(&opts.ExpectLimit, "expect-limit", "", "audit the endpoint against LIMIT/WINDOW per consumer, such as 100/1m")
	f.StringVar(&opts.ExpectAlgo, "expect-algorithm", "", "hold the endpoint to this algorithm's guarantee for --expect-limit: "+
		strings.Join(algorithms.Algorithms(), ", ")+" (default: the sliding-window rule, at most LIMIT in any WINDOW)")
	f.BoolVar(&opts.FailOnLeak, "fail-on-leak", false, "exit 3 when the audit fails: a consumer over the limit, a false Retry-After, or wrong headers")
	f.BoolVar(&opts.NoProbes, "no-probes", false, "skip the audit's Retry-After probes (they wait up to a Retry-After + 10 s after the run)")
	cmd.AddCommand(http)
	return cmd
}

// benchConfig checks every flag; nothing is sent before it succeeds.
func benchConfig(target string, opts benchOptions) (bench.HTTPConfig, reports.Format, error) {
	format, err := reports.ParseFormat(opts.Output)
	if err != nil {
		return bench.HTTPConfig{}, "", usagef("--output: %w", err)
	}
	header := http.Header{}
	for _, h := range opts.Headers {
		name, value, ok := strings.Cut(h, ":")
		if !ok || strings.TrimSpace(name) == "" {
			return bench.HTTPConfig{}, "", usagef(`--header %q: want "Name: value"`, h)
		}
		header.Add(strings.TrimSpace(name), strings.TrimSpace(value))
	}
	body := []byte(opts.Body)
	if file, ok := strings.CutPrefix(opts.Body, "@"); ok {
		if body, err = os.ReadFile(file); err != nil {
			return bench.HTTPConfig{}, "", usagef("--body: %w", err)
		}
	}
	if opts.MaxErrorRate > 1 {
		return bench.HTTPConfig{}, "", usagef("--max-error-rate must be between 0 and 1 (got %g)", opts.MaxErrorRate)
	}
	consumers := opts.Consumers
	if opts.ConsumerHeader == "" {
		consumers = 0
	} else if consumers < 1 {
		return bench.HTTPConfig{}, "", usagef("--consumers must be at least 1 (got %d)", consumers)
	}
	var expect algorithms.Policy
	if opts.ExpectLimit != "" {
		if expect, err = parseLimit(opts.ExpectLimit); err != nil {
			return bench.HTTPConfig{}, "", usagef("--expect-limit: %w", err)
		}
	} else if opts.FailOnLeak {
		return bench.HTTPConfig{}, "", usagef("--fail-on-leak needs --expect-limit")
	} else if opts.ExpectAlgo != "" {
		return bench.HTTPConfig{}, "", usagef("--expect-algorithm needs --expect-limit")
	}
	cfg := bench.HTTPConfig{
		ExpectLimit: expect.Limit, ExpectWindow: expect.Window, ExpectAlgorithm: opts.ExpectAlgo, NoProbes: opts.NoProbes,
		Target: target, Method: opts.Method, Header: header, Body: body,
		Rate: opts.Rate, Connections: opts.Connections, Insecure: opts.Insecure, Interval: opts.Interval,
		Duration: opts.Duration, Requests: opts.Requests, Warmup: opts.Warmup,
		Consumers: consumers, ConsumerHeader: opts.ConsumerHeader, Timeout: opts.Timeout,
	}
	if cfg.Connections < 1 {
		return cfg, "", usagef("--connections must be at least 1 (got %d)", cfg.Connections)
	}
	if cfg.Timeout <= 0 {
		return cfg, "", usagef("--timeout must be positive (got %s)", cfg.Timeout)
	}
	if opts.Threads < 1 || opts.Threads > 1024 {
		return cfg, "", usagef("--threads must be between 1 and 1024 (got %d)", opts.Threads)
	}
	if opts.MaxInFlight < 0 {
		return cfg, "", usagef("--max-in-flight must not be negative (got %d)", opts.MaxInFlight)
	}
	if err := cfg.Validate(); err != nil {
		return cfg, "", &usageError{err}
	}
	return cfg, format, nil
}

func runBench(ctx context.Context, target string, opts benchOptions) error {
	cfg, format, err := benchConfig(target, opts)
	if err != nil {
		return err
	}
	if opts.Progress {
		cfg.Progress = func(p bench.Progress) { fmt.Fprint(opts.Stderr, "\r\033[K"+progressLine(p)) }
	}
	// The load generator's share of the machine, as wrk's -t.
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(opts.Threads))
	res, runErr := bench.RunHTTP(ctx, cfg)
	if opts.Progress {
		fmt.Fprint(opts.Stderr, "\r\033[K")
	}
	if runErr != nil && !errors.Is(runErr, context.Canceled) {
		return runErr
	}
	// Interrupted or not, report and write everything measured.
	if err := reports.BenchHTTP(opts.Stdout, res, format, reports.Options{Color: opts.Color}); err != nil {
		return err
	}
	if opts.HGRM != "" {
		if err := writeHGRM(opts.HGRM, res); err != nil {
			return err
		}
	}
	if runErr != nil {
		return runErr
	}
	return benchThresholds(res, opts)
}

// progressLine is the live line of a run.
func progressLine(p bench.Progress) string {
	if p.Phase == "probes" {
		return fmt.Sprintf("probing Retry-After: %s left, --no-probes skips this", p.ProbesLeft.Round(time.Second))
	}
	line := fmt.Sprintf("%s  done %d  %.0f/s  p99 %s  429 %.1f%%", p.Elapsed.Round(time.Second), p.Done, p.RatePerSec,
		time.Duration(p.P99Micros)*time.Microsecond, 100*p.LimitedShare)
	if p.Phase == "warm-up" {
		line = "warm-up  " + line
	}
	return line
}

// writeHGRM writes the latency distribution in HdrHistogram's percentile
// format, in milliseconds, as HdrHistogram's plotter reads it.
func writeHGRM(path string, res bench.Result) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("--hgrm: %w", err)
	}
	if _, err := res.Histogram().PercentilesPrint(f, 5, 1000); err != nil {
		f.Close()
		return fmt.Errorf("--hgrm: %w", err)
	}
	return f.Close()
}

// benchThresholds returns a threshold error (exit 3) when a --max-… was crossed.
func benchThresholds(res bench.Result, opts benchOptions) error {
	var crossed []string
	if p99 := time.Duration(res.LatencyMicros.P99) * time.Microsecond; opts.MaxP99 > 0 && p99 > opts.MaxP99 {
		crossed = append(crossed, fmt.Sprintf("--max-p99: p99 %s is above %s", p99, opts.MaxP99))
	}
	if opts.MaxErrorRate >= 0 && res.Requests > 0 {
		bad := res.Errors
		for code, n := range res.StatusCounts {
			if strings.HasPrefix(code, "5") {
				bad += n
			}
		}
		if rate := float64(bad) / float64(res.Requests); rate > opts.MaxErrorRate {
			crossed = append(crossed, fmt.Sprintf("--max-error-rate: %.4f of requests failed, above %g", rate, opts.MaxErrorRate))
		}
	}
	if a := res.Audit; opts.FailOnLeak && a != nil {
		if a.OverAdmitted > 0 {
			crossed = append(crossed, fmt.Sprintf("--fail-on-leak: %s got %d through in %s, over the %d allowed (%s)",
				a.WorstConsumer, a.WorstWindowAdmitted, time.Duration(a.WorstSpanMillis)*time.Millisecond, a.WorstSpanAllowed, a.Rule))
		}
		if h := a.RetryAfter.Honest; h != nil && !*h {
			crossed = append(crossed, fmt.Sprintf("--fail-on-leak: Retry-After was off by up to %d ms", a.RetryAfter.MaxErrorMillis))
		}
		if a.Headers.Violations > 0 {
			crossed = append(crossed, fmt.Sprintf("--fail-on-leak: %d responses with wrong rate-limit headers (%s)",
				a.Headers.Violations, a.Headers.Example))
		}
	}
	if len(crossed) > 0 {
		return &thresholdError{strings.Join(crossed, "; ")}
	}
	return nil
}

// newReportCmd is ratelab report: work on saved results.
func newReportCmd(stdout io.Writer) *cobra.Command {
	cmd := &cobra.Command{Use: "report", Short: "Work on saved results"}
	var output string
	var tolerance time.Duration
	var failOnLeak bool
	merge := &cobra.Command{
		Use:   "merge FILE...",
		Short: "Merge bench http JSON results from several load machines into one report, with exact percentiles and one audit",
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) < 1 {
				return usagef("report merge takes one or more JSON files")
			}
			return nil
		},
		RunE: func(_ *cobra.Command, args []string) error {
			format, err := reports.ParseFormat(output)
			if err != nil {
				return usagef("--output: %w", err)
			}
			if tolerance < 0 || tolerance > time.Minute {
				return usagef("--clock-tolerance must be between 0 and 1m (got %s)", tolerance)
			}
			runs := make([]bench.Result, len(args))
			for i, path := range args {
				b, err := os.ReadFile(path)
				if err != nil {
					return usagef("%w", err)
				}
				if err := json.Unmarshal(b, &runs[i]); err != nil {
					return usagef("%s: not a ratelab JSON result: %w", path, err)
				}
			}
			res, err := bench.Merge(runs, tolerance)
			if err != nil {
				return &usageError{err}
			}
			if err := reports.BenchHTTP(stdout, res, format, reports.Options{Color: isTerminal(stdout) && os.Getenv("NO_COLOR") == ""}); err != nil {
				return err
			}
			if failOnLeak {
				if res.Audit == nil {
					return &thresholdError{"--fail-on-leak: the merged result has no audit (" + res.AuditNote + ")"}
				}
				return benchThresholds(res, benchOptions{FailOnLeak: true, MaxErrorRate: -1})
			}
			return nil
		},
	}
	merge.Flags().StringVarP(&output, "output", "o", "table", "output format: table, markdown or json")
	merge.Flags().DurationVar(&tolerance, "clock-tolerance", 5*time.Millisecond,
		"how far the load machines' clocks may disagree: the merged audit widens every response's flight by it")
	merge.Flags().BoolVar(&failOnLeak, "fail-on-leak", false, "exit 3 when the merged audit fails")
	cmd.AddCommand(merge)
	return cmd
}
