package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/ratelab/ratelab/bench"
	"github.com/ratelab/ratelab/reports"
)

// loadFlags are the flags every bench command shares: its load (bound
// straight into the command's config, through loadFields), the thresholds
// a run is held to, and what it writes.
type loadFlags struct {
	bench.Thresholds
	threads int
	shard   string
	startAt string
	hgrm    string
	output  outputFlag
	// consumersFrom is the file of the consumers' identities;
	// consumersSet says whether --consumers was given.
	consumersFrom string
	consumersSet  bool
	// showIdentities is the config's ShowIdentities, bound to
	// --show-identities.
	showIdentities *bool
}

// loadFields are a config's fields of the load, which bench.HTTPConfig and
// bench.RLSConfig share by name.
type loadFields struct {
	Rate            *float64
	Connections     *int
	Duration        *time.Duration
	Requests        *int64
	Warmup          *time.Duration
	Timeout         *time.Duration
	Interval        *time.Duration
	SharedConsumers *bool
	RunID           *string
	NoProbes        *bool
	ShowIdentities  *bool
}

// loadHelp is what the help of the shared flags says differently for each
// command.
type loadHelp struct {
	// Request is what the command sends: "request" or "call".
	Request string
	// Connection, ErrorRate, FailOnLeak, NoProbes, RunID and
	// ConsumersFrom are the help of --connections, --max-error-rate,
	// --fail-on-leak, --no-probes, --run-id and --consumers-from.
	Connection, ErrorRate, FailOnLeak, NoProbes, RunID, ConsumersFrom string
}

// bind adds the shared flags to cmd, binding the load into to.
func (l *loadFlags) bind(cmd *cobra.Command, to loadFields, help loadHelp) {
	f := cmd.Flags()
	f.Float64Var(to.Rate, "rate", 100, help.Request+"s per second in total (open model); 0 for the closed model")
	f.IntVar(to.Connections, "connections", 10, help.Connection)
	f.IntVar(&l.threads, "threads", 0, "threads the load generator runs on (GOMAXPROCS), as wrk's -t (0: every core)")
	f.DurationVar(to.Duration, "duration", 10*time.Second, "length of the measured run (0: bounded by --requests)")
	f.Int64Var(to.Requests, "requests", 0, "measured "+help.Request+"s to send, at most")
	f.DurationVar(to.Warmup, "warmup", 0, "load before the measured run, reported apart")
	f.DurationVar(to.Timeout, "timeout", 10*time.Second, "bound on one "+help.Request+", connecting included")
	f.DurationVar(to.Interval, "interval", time.Second, "length of the timeline's intervals")
	f.StringVar(&l.hgrm, "hgrm", "", "write the latency distribution to FILE in HdrHistogram's percentile format (ms)")
	f.DurationVar(&l.MaxP99, "max-p99", 0, "exit 3 when the p99 latency is above this")
	f.Var(optionalFloat{&l.MaxErrorRate}, "max-error-rate", help.ErrorRate)
	f.BoolVar(&l.FailOnLeak, "fail-on-leak", false, help.FailOnLeak)
	f.BoolVar(&l.AllowNoVerdict, "allow-no-verdict", false, "with --fail-on-leak, pass every limit the load never reached or the audit could not judge (a shared limit still fails)")
	f.StringArrayVar(&l.AllowUntested, "allow-untested", nil, "with --fail-on-leak, pass these limits if the load never reached them or the audit could not judge them: "+
		"NAME,… as the audit names them (5/1s, a rules limit's ID, a descriptor; repeatable)")
	f.Var(optionalFloat{&l.FailOnUnder}, "fail-on-under", "exit 3 when above this share (0 to 1) of the denials judged were ones the rule would have admitted")
	f.BoolVar(to.NoProbes, "no-probes", false, help.NoProbes)
	f.StringVar(&l.shard, "shard", "", "I/N: this load machine is shard I (from 0) of N sharing --rate, --connections and --requests")
	f.BoolVar(to.SharedConsumers, "shared-consumers", false, "with --shard, every shard sends every consumer (by default shard I sends those ≡ I mod N)")
	f.StringVar(&l.startAt, "start-at", "", "begin at this wall-clock time, the same on every shard: RFC 3339, or next:D, "+
		"the next multiple of D on the UTC clock at least 15s ahead (next:1m: the next whole minute)")
	f.StringVar(to.RunID, "run-id", "", help.RunID)
	f.StringVar(&l.consumersFrom, "consumers-from", "", help.ConsumersFrom)
	l.showIdentities = to.ShowIdentities
	f.BoolVar(to.ShowIdentities, "show-identities", false, "name consumers by the identities of --consumers-from in the output "+
		"(they may be secrets); by default each is named by a pseudonym, id- and 16 hex digits")
	l.output.bind(cmd)
}

// identities reads --consumers-from: the identities that name the
// consumers in place of consumer-0 …, nil without it (and then
// --show-identities, which would show nothing, is refused). --consumers,
// when given, must be their number (consumers is its value).
func (l *loadFlags) identities(consumers int) ([]string, error) {
	if l.consumersFrom == "" {
		if l.showIdentities != nil && *l.showIdentities {
			return nil, usagef("--show-identities shows the identities of --consumers-from, which is not given")
		}
		return nil, nil
	}
	f, err := os.Open(l.consumersFrom)
	if err != nil {
		return nil, usagef("--consumers-from: %w", err)
	}
	ids, err := bench.ParseIdentities(f)
	f.Close()
	if err != nil {
		return nil, usagef("--consumers-from %s: %w", l.consumersFrom, err)
	}
	if l.consumersSet && consumers != len(ids) {
		return nil, usagef("--consumers %d conflicts with --consumers-from, which holds %d identities: give one of them", consumers, len(ids))
	}
	return ids, nil
}

// untested reads --allow-untested against ids, the names of the limits
// the audit may judge; nothing is sent before it succeeds.
func (l *loadFlags) untested(ids []string) error {
	names, err := untestedNames(l.AllowUntested, ids)
	l.AllowUntested = names
	return err
}

// untestedNames reads the values of --allow-untested: each a name, or a
// comma list of them (a name that holds a comma, a descriptor, is taken
// whole), each one of ids.
func untestedNames(values, ids []string) ([]string, error) {
	var names []string
	for _, v := range values {
		if slices.Contains(ids, v) {
			names = append(names, v)
			continue
		}
		for _, n := range strings.Split(v, ",") {
			names = append(names, strings.TrimSpace(n))
		}
	}
	if err := (bench.Thresholds{AllowUntested: names}).ValidateNames(ids); err != nil {
		return nil, flagError(err, benchNames)
	}
	return names, nil
}

// loadConfig is what the shared flags say that needs reading: the shard,
// the start time, the output format.
type loadConfig struct {
	shard, shards int
	startAt       time.Time
	format        reports.Format
}

// config reads and checks the shared flags (connections and timeout are
// the values bound); nothing is sent before it succeeds.
func (l *loadFlags) config(connections int, timeout time.Duration) (loadConfig, error) {
	var c loadConfig
	var err error
	if c.format, err = l.output.format(); err != nil {
		return c, err
	}
	if l.shard != "" {
		i, n, _ := strings.Cut(l.shard, "/")
		var errI, errN error
		c.shard, errI = strconv.Atoi(i)
		c.shards, errN = strconv.Atoi(n)
		if errI != nil || errN != nil || c.shards < 1 {
			return c, usagef("--shard %q: want I/N, such as 0/3", l.shard)
		}
	}
	if l.startAt != "" {
		if c.startAt, err = parseStartAt(l.startAt, time.Now()); err != nil {
			return c, err
		}
	}
	switch {
	case connections < 1:
		return c, usagef("--connections must be at least 1 (got %d)", connections)
	case timeout <= 0:
		return c, usagef("--timeout must be positive (got %s)", timeout)
	case l.threads < 0 || l.threads > 1024:
		return c, usagef("--threads must be between 0 (every core) and 1024 (got %d)", l.threads)
	}
	return c, nil
}

// run runs the load with the load generator's share of the machine
// (--threads, as wrk's -t), and reports it (finishBench).
func (l *loadFlags) run(io *ioStreams, format reports.Format, load func() (bench.Result, error)) error {
	if l.threads > 0 {
		defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(l.threads))
	}
	res, runErr := load()
	io.clearStatus()
	return finishBench(io, res, runErr, format, l.hgrm, l.Thresholds)
}

// finishBench reports a run, interrupted or not, writes --hgrm, and
// returns the run's error, or the thresholds it crossed (exit 3). A run
// in which nothing got an answer is a failed run, not a threshold.
func finishBench(io *ioStreams, res bench.Result, runErr error, format reports.Format, hgrm string, th bench.Thresholds) error {
	if runErr != nil && !errors.Is(runErr, context.Canceled) {
		return runErr
	}
	if err := reports.BenchHTTP(io.out, res, format, io.render()); err != nil {
		return err
	}
	if hgrm != "" {
		if err := writeFile(hgrm, func(f *os.File) error { return reports.HGRM(f, res.Histogram()) }); err != nil {
			return fmt.Errorf("--hgrm: %w", err)
		}
	}
	if runErr != nil {
		return runErr
	}
	if err := res.Unanswered(); err != nil {
		return err
	}
	return crossed(th.Crossed(res))
}
