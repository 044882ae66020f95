package race

import (
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratelab/ratelab/algorithms"
	"github.com/ratelab/ratelab/internal/field"
)

// Config is one race run.
type Config struct {
	// Redis says how to reach the server. Run opens its own pool from it, sized
	// so that every goroutine has a connection opened before the release.
	Redis *redis.UniversalOptions
	// Limiters are registry names, raced in this order: rate limiters
	// (algorithms.Names), or in-flight limiters (algorithms.SemaphoreNames),
	// never both in one run.
	Limiters []string
	// Scripts are users' own Lua limiters, raced after Limiters.
	Scripts []algorithms.UserScript
	// Policy is the limit every limiter enforces; an in-flight limiter reads
	// its Limit only, the most requests in flight at once.
	Policy algorithms.Policy
	// Concurrency is the number of goroutines released together; 1 to MaxConcurrency.
	Concurrency int
	// RequestsPerWorker is the number of decisions each goroutine makes back to back; at least 1.
	RequestsPerWorker int
	// Trials is the number of bursts per limiter, each on a fresh key; at least 1.
	Trials int
	// Clock is where the Lua limiters take the time from.
	Clock algorithms.Clock
	// Now is the caller's clock; time.Now by default. A frozen clock makes
	// every request of a burst arrive at the same instant for the limiters.
	Now func() time.Time
	// WatchRetries bounds the watch limiter's attempts; algorithms.DefaultWatchRetries when 0.
	WatchRetries int
	// Consumer prefixes the consumer part of every key; a random "race-…" by default.
	Consumer string
	// TrialTimeout bounds one trial, including its state check; 30s by default.
	TrialTimeout time.Duration
	// Progress, when set, is called after each trial.
	Progress func(limiter string, trial, trials int)
	// Explain names limiters (of Limiters and Scripts) to explain: after
	// its trials, each runs one more, every goroutine on a connection of its
	// own, with a MONITOR connection open on the server that holds the key,
	// and its Result.Explain tells what Redis executed. At most
	// MaxExplainConcurrency goroutines.
	Explain []string
	// ExplainLines is the most commands an explanation's trace keeps;
	// DefaultExplainLines when 0, at most MaxExplainLines.
	ExplainLines int

	// Hold is, for in-flight limiters, how long each admitted request holds
	// its slot: the upstream's service time. A denied request's goroutine
	// waits as long before its next request. 1ms to MaxHold.
	Hold time.Duration
	// LeaseTTL is semaphore-lease's lease time to live, a whole number of
	// milliseconds.
	LeaseTTL time.Duration
	// Faults are what befalls the holders of in-flight limiters' slots.
	Faults Faults

	// hook, when set, is added to every client the run decides with (the
	// pool, and each traced connection): the tests' barrier between a
	// limiter's read and its write.
	hook redis.Hook
	// together, when set, holds the first round's holders of an in-flight
	// race together (firstRound): the tests' overlap.
	together *firstRound
}

// Limits on a run, so that every run is bounded.
const (
	MaxConcurrency       = 10_000
	MaxTrials            = 100_000
	MaxRequestsPerWorker = 100_000
	MaxRequests          = 10_000_000 // per trial: concurrency × requests per worker
)

// MaxHold bounds Config.Hold, and MaxInFlightTrial the time a trial of
// in-flight limiters takes at least: Hold × RequestsPerWorker.
const (
	MaxHold          = time.Minute
	MaxInFlightTrial = 10 * time.Minute
)

// InFlight reports whether cfg races in-flight limiters.
func (cfg Config) InFlight() bool {
	return len(cfg.Limiters) > 0 && algorithms.IsSemaphore(cfg.Limiters[0])
}

// Validate checks cfg before anything is sent. Errors are *field.Error,
// naming the fields of Config (Limit and Window for the policy's).
func (cfg Config) Validate() error {
	if err := cfg.validateKinds(); err != nil {
		return err
	}
	if cfg.InFlight() {
		return cfg.validateInFlight()
	}
	switch {
	case cfg.Concurrency < 1 || cfg.Concurrency > MaxConcurrency:
		return field.Errorf("Concurrency", "must be between 1 and %d (got %d)", MaxConcurrency, cfg.Concurrency)
	case cfg.RequestsPerWorker < 1 || cfg.RequestsPerWorker > MaxRequestsPerWorker:
		return field.Errorf("RequestsPerWorker", "must be between 1 and %d (got %d)", MaxRequestsPerWorker, cfg.RequestsPerWorker)
	case int64(cfg.Concurrency)*int64(cfg.RequestsPerWorker) > MaxRequests:
		return field.Errorf("Concurrency", "× {RequestsPerWorker} must be at most %d (got %d)", MaxRequests, cfg.Concurrency*cfg.RequestsPerWorker)
	case cfg.Trials < 1 || cfg.Trials > MaxTrials:
		return field.Errorf("Trials", "must be between 1 and %d (got %d)", MaxTrials, cfg.Trials)
	case cfg.WatchRetries < 0:
		return field.Errorf("WatchRetries", "must be at least 1, or 0 for the default of %d (got %d)", algorithms.DefaultWatchRetries, cfg.WatchRetries)
	case len(cfg.Limiters) == 0 && len(cfg.Scripts) == 0:
		return field.Errorf("Limiters", "names no limiter")
	}
	if err := cfg.Policy.Validate(); err != nil {
		return err
	}
	for _, name := range cfg.Limiters {
		if _, ok := algorithms.Lookup(name); !ok {
			return field.Errorf("Limiters", ": %v", &algorithms.UnknownError{Name: name})
		}
	}
	for _, s := range cfg.Scripts {
		if err := s.Validate(); err != nil {
			return field.Errorf("Scripts", ": %v", err)
		}
	}
	return cfg.validateExplain()
}

// validateKinds refuses rate limiters and in-flight limiters in one run:
// the one counts admissions per window, the other requests held at once.
func (cfg Config) validateKinds() error {
	var rate, inFlight []string
	for _, name := range cfg.Limiters {
		if algorithms.IsSemaphore(name) {
			inFlight = append(inFlight, name)
		} else {
			rate = append(rate, name)
		}
	}
	for _, s := range cfg.Scripts {
		rate = append(rate, s.Name)
	}
	if len(rate) > 0 && len(inFlight) > 0 {
		return field.Errorf("Limiters", "mixes in-flight limiters (%s) with rate limiters (%s): race them apart",
			strings.Join(inFlight, ", "), strings.Join(rate, ", "))
	}
	return nil
}

// validateInFlight checks a run of in-flight limiters.
func (cfg Config) validateInFlight() error {
	switch {
	case cfg.Concurrency < 1 || cfg.Concurrency > MaxConcurrency:
		return field.Errorf("Concurrency", "must be between 1 and %d (got %d)", MaxConcurrency, cfg.Concurrency)
	case cfg.RequestsPerWorker < 1 || cfg.RequestsPerWorker > MaxRequestsPerWorker:
		return field.Errorf("RequestsPerWorker", "must be between 1 and %d (got %d)", MaxRequestsPerWorker, cfg.RequestsPerWorker)
	case int64(cfg.Concurrency)*int64(cfg.RequestsPerWorker) > MaxRequests:
		return field.Errorf("Concurrency", "× {RequestsPerWorker} must be at most %d (got %d)", MaxRequests, cfg.Concurrency*cfg.RequestsPerWorker)
	case cfg.Trials < 1 || cfg.Trials > MaxTrials:
		return field.Errorf("Trials", "must be between 1 and %d (got %d)", MaxTrials, cfg.Trials)
	case cfg.Policy.Limit < 1:
		return field.Errorf("Limit", "must be at least 1 (got %d)", cfg.Policy.Limit)
	case cfg.Hold < time.Millisecond || cfg.Hold > MaxHold:
		return field.Errorf("Hold", "must be between 1ms and %s (got %s)", MaxHold, cfg.Hold)
	case cfg.Hold*time.Duration(cfg.RequestsPerWorker) > MaxInFlightTrial:
		return field.Errorf("Hold", "× {RequestsPerWorker} must be at most %s: each request takes a hold (got %s × %d)",
			MaxInFlightTrial, cfg.Hold, cfg.RequestsPerWorker)
	}
	if slices.Contains(cfg.Limiters, "semaphore-lease") {
		if err := (algorithms.SemaphorePolicy{Limit: cfg.Policy.Limit, LeaseTTL: cfg.LeaseTTL}).Validate(); err != nil {
			return err
		}
	}
	if err := cfg.Faults.Validate(); err != nil {
		return err
	}
	return cfg.validateExplain()
}

// validateExplain checks Explain and ExplainLines.
func (cfg Config) validateExplain() error {
	if cfg.ExplainLines < 0 || cfg.ExplainLines > MaxExplainLines {
		return field.Errorf("ExplainLines", "must be between 1 and %d, or 0 for the default of %d (got %d)",
			MaxExplainLines, DefaultExplainLines, cfg.ExplainLines)
	}
	if len(cfg.Explain) == 0 {
		return nil
	}
	raced := slices.Clone(cfg.Limiters)
	for _, s := range cfg.Scripts {
		raced = append(raced, s.Name)
	}
	for _, name := range cfg.Explain {
		if !slices.Contains(raced, name) {
			return field.Errorf("Explain", "names %s, which is not raced (raced: %s)", name, strings.Join(raced, ", "))
		}
	}
	if cfg.Concurrency > MaxExplainConcurrency {
		return field.Errorf("Explain", "gives each goroutine a connection of its own: {Concurrency} must be at most %d (got %d)",
			MaxExplainConcurrency, cfg.Concurrency)
	}
	return nil
}
