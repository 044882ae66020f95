// Package compare measures the rate-limiting algorithms side by side on one
// Redis: how exact each is (a concurrent burst, a burst across a window
// boundary, a client hammering past its limit, and a Poisson stream judged
// against an exact sliding-window oracle), how much memory a client costs,
// how much Redis work and how many round trips a decision takes, and its
// latency and throughput. It returns plain results and never prints.
//
// The accuracy workloads drive the limiters with a simulated caller clock, so
// that windows of any length are measured in the time Redis takes to decide,
// and every run of them is the same; the throughput workload uses the real
// clock.
package compare

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratelab/ratelab/algorithms"
	"github.com/ratelab/ratelab/internal/field"
	"github.com/ratelab/ratelab/internal/hdr"
	"github.com/ratelab/ratelab/internal/randid"
	"github.com/ratelab/ratelab/internal/redisrun"
)

// Workload names.
const (
	Burst      = "burst"
	Boundary   = "boundary"
	Hammer     = "hammer"
	Accuracy   = "accuracy"
	Memory     = "memory"
	Throughput = "throughput"
)

// Workloads lists every workload, in the order they run.
func Workloads() []string {
	return []string{Burst, Boundary, Hammer, Accuracy, Memory, Throughput}
}

// MaxLimit bounds --limit, so that every workload stays bounded in time.
const MaxLimit = 10_000

// MemoryLimits are the limits at which memory per client is measured.
func MemoryLimits() []int64 { return []int64{10, 100, 1000, 10000} }

// Config is one comparison.
type Config struct {
	// Redis says how to reach the server.
	Redis *redis.UniversalOptions
	// Algorithms are registry names, measured in this order.
	Algorithms []string
	// Scripts are users' own Lua limiters, measured after Algorithms.
	Scripts []algorithms.UserScript
	// Workloads to run; every workload when empty.
	Workloads []string
	// Policy is the limit each algorithm enforces (the memory workload uses its own limits).
	Policy algorithms.Policy
	// Consumer prefixes the consumer part of every key; a random "compare-…" by default.
	Consumer string
	// BurstConcurrency is the number of goroutines in the burst; 2 × limit, at most 1,000, by default.
	BurstConcurrency int
	// BurstTrials is the number of bursts per algorithm; 5 by default.
	BurstTrials int
	// AccuracyClients is the number of clients in the accuracy stream; 50 by default.
	AccuracyClients int
	// AccuracyWindows is how many windows the accuracy stream lasts; 10 by default.
	AccuracyWindows int
	// Seed makes the accuracy stream repeatable.
	Seed uint64
	// Connections is the throughput workload's concurrency; 50 by default.
	Connections int
	// Keys is the number of clients the throughput workload spreads over; 10,000 by default.
	Keys int
	// Duration is how long each throughput measurement runs; 3s by default.
	Duration time.Duration
	// Batch, over 1, measures the throughput workload once more with the
	// decisions sent through internal/batch: those waiting at one moment go
	// out as one pipeline of at most Batch EVALSHAs, on up to
	// Pipelines(Connections, Batch) connections at once. 0 or 1: one call per
	// decision only.
	Batch int
	// Progress, when set, is called as each workload of each algorithm starts.
	Progress func(algorithm, workload string)
}

// Validate checks cfg before anything is sent. Errors are *field.Error,
// naming the fields of Config (Limit and Window for the policy's). Rules
// that only some workloads need apply when those workloads are selected.
func (cfg Config) Validate() error {
	workloads := cfg.Workloads
	if len(workloads) == 0 {
		workloads = Workloads()
	}
	for _, w := range workloads {
		if !slices.Contains(Workloads(), w) {
			return field.Errorf("Workloads", ": unknown workload %q (known: %s)", w, strings.Join(Workloads(), ", "))
		}
	}
	// Every workload but throughput runs the limiters on a simulated caller clock.
	var simulated, sequential []string
	for _, w := range workloads {
		if w != Throughput {
			simulated = append(simulated, w)
		}
		if w == Burst || w == Boundary || w == Hammer || w == Accuracy {
			sequential = append(sequential, w)
		}
	}
	if len(cfg.Algorithms) == 0 && len(cfg.Scripts) == 0 {
		return field.Errorf("Algorithms", "names no algorithm")
	}
	for _, s := range cfg.Scripts {
		if err := s.Validate(); err != nil {
			return field.Errorf("Scripts", ": %v", err)
		}
		if len(simulated) > 0 && !slices.Contains(strings.Fields(s.Args), "{now_ms}") {
			return field.Errorf("Scripts", ": the %s workloads run scripts on a simulated caller clock, "+
				"so the script must take its time from {now_ms}", list(simulated))
		}
	}
	for _, name := range cfg.Algorithms {
		info, ok := algorithms.Lookup(name)
		if !ok {
			return field.Errorf("Algorithms", ": unknown algorithm %q (the algorithms: %s)", name, strings.Join(algorithms.Algorithms(), ", "))
		}
		if !info.CallerClock && len(simulated) > 0 {
			return field.Errorf("Algorithms", ": %s keeps its window in the key's expiry, on Redis's clock, "+
				"so it cannot run on the simulated clock of the %s workloads (it can run the throughput workload alone)",
				name, list(simulated))
		}
	}
	if err := cfg.Policy.Validate(); err != nil {
		return err
	}
	if cfg.Policy.Limit > MaxLimit && len(sequential) > 0 {
		return field.Errorf("Limit", "must be at most %d for the %s workloads (got %d): they send the limit "+
			"several times over, one decision after another", MaxLimit, list(sequential), cfg.Policy.Limit)
	}
	switch {
	case cfg.Connections < 0 || cfg.Connections > 10_000:
		return field.Errorf("Connections", "must be between 1 and 10000 (got %d)", cfg.Connections)
	case cfg.Keys < 0 || cfg.Keys > 10_000_000:
		return field.Errorf("Keys", "must be between 1 and 10000000 (got %d)", cfg.Keys)
	case cfg.Duration < 0 || cfg.Duration > 10*time.Minute:
		return field.Errorf("Duration", "must be between 1ms and 10m (got %s)", cfg.Duration)
	case cfg.Batch < 0 || cfg.Batch > MaxBatch:
		return field.Errorf("Batch", "must be between 1 and %d (got %d)", MaxBatch, cfg.Batch)
	case cfg.Batch > 1 && !slices.Contains(workloads, Throughput):
		return field.Errorf("Batch", "batches the throughput workload, which is not among {Workloads}")
	case cfg.AccuracyClients < 0 || cfg.AccuracyClients > 100_000:
		return field.Errorf("AccuracyClients", "must be between 1 and 100000 (got %d)", cfg.AccuracyClients)
	}
	return nil
}

// list joins names as "a, b and c".
func list(names []string) string {
	if len(names) < 2 {
		return strings.Join(names, "")
	}
	return strings.Join(names[:len(names)-1], ", ") + " and " + names[len(names)-1]
}

func (cfg *Config) defaults() {
	if len(cfg.Workloads) == 0 {
		cfg.Workloads = Workloads()
	}
	if cfg.BurstConcurrency == 0 {
		cfg.BurstConcurrency = int(min(2*cfg.Policy.Limit, 1000))
	}
	if cfg.BurstTrials == 0 {
		cfg.BurstTrials = 5
	}
	if cfg.AccuracyClients == 0 {
		cfg.AccuracyClients = 50
	}
	if cfg.AccuracyWindows == 0 {
		cfg.AccuracyWindows = 10
	}
	if cfg.Connections == 0 {
		cfg.Connections = 50
	}
	if cfg.Keys == 0 {
		cfg.Keys = 10_000
	}
	if cfg.Duration == 0 {
		cfg.Duration = 3 * time.Second
	}
	if cfg.Batch == 0 {
		cfg.Batch = 1
	}
	if cfg.Consumer == "" {
		cfg.Consumer = "compare-" + randid.Hex(4)
	}
}

// Report is a whole comparison.
type Report struct {
	// Command is "compare".
	Command string `json:"command"`
	// Redis is the server measured; the command line fills it.
	Redis redisrun.Info `json:"redis"`
	// Config is what was run.
	Config Settings `json:"config"`
	// PingOpsPerSec is the server's own ceiling: PINGs per second on the
	// throughput workload's connections; null when it was not run.
	PingOpsPerSec *float64 `json:"ping_ops_per_sec"`
	// PingLatencyMicros is the PING latency in µs on those connections.
	PingLatencyMicros *hdr.Percentiles `json:"ping_latency_us"`
	// Results has one entry per algorithm.
	Results []Result `json:"results"`
	// ElapsedMillis is the wall time of the comparison.
	ElapsedMillis int64 `json:"elapsed_ms"`
}

// Settings is the configuration as reports show it; see Config.
type Settings struct {
	Algorithms       []string `json:"algorithms"`
	Workloads        []string `json:"workloads"`
	Limit            int64    `json:"limit"`
	WindowMillis     int64    `json:"window_ms"`
	BurstConcurrency int      `json:"burst_concurrency"`
	BurstTrials      int      `json:"burst_trials"`
	AccuracyClients  int      `json:"accuracy_clients"`
	AccuracyWindows  int      `json:"accuracy_windows"`
	Seed             uint64   `json:"seed"`
	Connections      int      `json:"connections"`
	Keys             int      `json:"keys"`
	DurationMillis   int64    `json:"duration_ms"`
	// Batch is the most decisions per pipeline of the batched throughput
	// measurement; 1 when there was none.
	Batch int `json:"redis_batch"`
}

// Decision is one decision of a workload: when it was made, in ms since
// the workload began on its simulated clock, and whether it admitted.
type Decision struct {
	AtMillis int64 `json:"at_ms"`
	Allowed  bool  `json:"allowed"`
}

// Result is one algorithm over every workload. A figure is null when its
// workload did not run or could not be measured on this server.
type Result struct {
	Algorithm     string `json:"algorithm"`
	Description   string `json:"description"`
	Exact         bool   `json:"exact"`
	KeysPerClient int    `json:"keys_per_client"`
	// RoundTrips is the round trips per decision, measured (throughput workload).
	RoundTrips *float64 `json:"round_trips"`
	// RedisCommands is the commands Redis ran per decision, from INFO
	// commandstats around the throughput workload (scripts' commands included,
	// the EVALSHA itself not).
	RedisCommands *float64 `json:"redis_commands"`

	// BurstOverAdmitted and BurstUnderAdmitted sum the burst trials' excess
	// and shortfall against the limit.
	BurstOverAdmitted  *int64 `json:"burst_over_admitted"`
	BurstUnderAdmitted *int64 `json:"burst_under_admitted"`
	// BoundaryMaxInWindow is the most admitted inside any span of one window
	// when a full limit is sent just before a window boundary and another just after.
	BoundaryMaxInWindow *int64 `json:"boundary_max_in_window"`
	// HammerMaxInWindow is the most admitted in any span of one window while
	// one client sends at three times the limit for three windows.
	HammerMaxInWindow *int64 `json:"hammer_max_in_window"`
	// HammerRecoveryMillis is how long after the hammering stopped a client
	// that retries every 100 ms was admitted again; null when it never was
	// within ten windows (locked out).
	HammerRecoveryMillis *int64 `json:"hammer_recovery_ms"`
	// HammerLockedOut is set when the client was never admitted again.
	HammerLockedOut bool `json:"hammer_locked_out"`
	// BoundaryTimeline and HammerTimeline are every decision of those
	// workloads, on their simulated clock: what the pictures draw.
	BoundaryTimeline []Decision `json:"boundary_timeline,omitempty"`
	HammerTimeline   []Decision `json:"hammer_timeline,omitempty"`
	// FalseAllowRate and FalseDenyRate are the shares of the accuracy
	// stream's decisions that an exact sliding window would have denied, or
	// admitted, given what the algorithm had admitted before.
	FalseAllowRate *float64 `json:"false_allow_rate"`
	FalseDenyRate  *float64 `json:"false_deny_rate"`
	// AccuracyDecisions is the number of decisions judged.
	AccuracyDecisions int64 `json:"accuracy_decisions"`
	// AccuracyClients is the number of clients in the stream (fewer than
	// asked when the limit is high: the stream is kept to about 200,000 decisions).
	AccuracyClients int `json:"accuracy_clients"`
	// BytesPerClient is MEMORY USAGE of one client's keys after it filled
	// its limit, by limit.
	BytesPerClient map[string]int64 `json:"bytes_per_client"`
	// OpsPerSec is decisions per second over Keys clients on Connections connections.
	OpsPerSec *float64 `json:"ops_per_sec"`
	// LatencyMicros is the throughput workload's decision latency in µs.
	LatencyMicros *hdr.Percentiles `json:"latency_us"`
	// BatchedOpsPerSec, BatchedRoundTrips and BatchedLatencyMicros are the
	// throughput workload's figures with the decisions batched (Config.Batch);
	// null when it did not run so. Round trips are the pipelines sent per
	// decision.
	BatchedOpsPerSec     *float64         `json:"batched_ops_per_sec"`
	BatchedRoundTrips    *float64         `json:"batched_round_trips"`
	BatchedLatencyMicros *hdr.Percentiles `json:"batched_latency_us"`
	// Recommendation says in one line when to use the algorithm, from the
	// figures of this run (Report.Recommendations).
	Recommendation string `json:"recommendation"`
}

// Run measures every algorithm in cfg on every workload.
func Run(ctx context.Context, cfg Config) (Report, error) {
	began := time.Now()
	if err := cfg.Validate(); err != nil {
		return Report{}, err
	}
	if cfg.Redis == nil {
		return Report{}, errors.New("compare: no Redis options")
	}
	cfg.defaults()
	rep := Report{
		Command: "compare",
		Config: Settings{
			Algorithms: slices.Clone(cfg.Algorithms), Workloads: cfg.Workloads,
			Limit: cfg.Policy.Limit, WindowMillis: cfg.Policy.Window.Milliseconds(),
			BurstConcurrency: cfg.BurstConcurrency, BurstTrials: cfg.BurstTrials,
			AccuracyClients: cfg.AccuracyClients, AccuracyWindows: cfg.AccuracyWindows, Seed: cfg.Seed,
			Connections: cfg.Connections, Keys: cfg.Keys, DurationMillis: cfg.Duration.Milliseconds(), Batch: cfg.Batch,
		},
	}
	client, err := open(ctx, cfg.Redis, max(cfg.Connections, 16))
	if err != nil {
		return rep, err
	}
	defer client.Close()

	run := func(w string) bool { return slices.Contains(cfg.Workloads, w) }
	var entrants []entrant
	for _, name := range cfg.Algorithms {
		info, _ := algorithms.Lookup(name)
		entrants = append(entrants, entrant{info: info})
	}
	for _, s := range cfg.Scripts {
		rep.Config.Algorithms = append(rep.Config.Algorithms, s.Name)
		entrants = append(entrants, entrant{info: s.Info(), script: &s})
	}
	for _, e := range entrants {
		name := e.info.Name
		res := Result{Algorithm: name, Description: e.info.Description, Exact: e.info.Exact, KeysPerClient: e.info.KeysPerClient}
		steps := []struct {
			workload string
			fn       func(context.Context, redis.UniversalClient, Config, entrant, *Result) error
		}{
			{Burst, burst}, {Boundary, boundary}, {Hammer, hammer},
			{Accuracy, accuracy}, {Memory, memory}, {Throughput, throughput},
		}
		for _, s := range steps {
			if !run(s.workload) {
				continue
			}
			if err := ctx.Err(); err != nil {
				return rep, err
			}
			if cfg.Progress != nil {
				cfg.Progress(name, s.workload)
			}
			if err := s.fn(ctx, client, cfg, e, &res); err != nil {
				return rep, fmt.Errorf("compare: %s: %s: %w", name, s.workload, err)
			}
		}
		rep.Results = append(rep.Results, res)
	}
	for i, line := range rep.Recommendations() {
		rep.Results[i].Recommendation = line
	}
	if run(Throughput) {
		if cfg.Progress != nil {
			cfg.Progress("redis", "ping")
		}
		ops, lat, err := pingCeiling(ctx, client, cfg)
		if err != nil {
			return rep, fmt.Errorf("compare: ping: %w", err)
		}
		rep.PingOpsPerSec, rep.PingLatencyMicros = &ops, &lat
	}
	rep.ElapsedMillis = time.Since(began).Milliseconds()
	return rep, nil
}
