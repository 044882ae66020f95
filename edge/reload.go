package edge

import (
	"context"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ratelab/ratelab/internal/reload"
	"github.com/ratelab/ratelab/limiter"
	"github.com/ratelab/ratelab/rules"
)

// Loaded is a rule set as it serves: the Set and when it was loaded.
type Loaded struct {
	// Set is the rules.
	Set *rules.Set
	// At is when they were loaded.
	At time.Time
}

// Rules holds the rules a gateway serves. A request reads them once
// (Current) and is decided wholly by what it read; a reload swaps them at
// once, so that no request is decided by half of each.
type Rules struct {
	file    string
	opts    []rules.Option
	log     io.Writer
	metrics *limiter.Metrics
	cur     atomic.Pointer[Loaded]
	mu      sync.Mutex // metrics, attached once the gateway has them
	check   func(*rules.Set) error
	apply   func(*rules.Set) error
	watcher *reload.Watcher // nil: the rules never reload
}

// RulesConfig configures Rules.
type RulesConfig struct {
	// File is the rules file Reload reads; empty for rules that never
	// reload (the --limit shorthand).
	File string
	// Options are Parse's options (rules.ForGateway and the default algorithm).
	Options []rules.Option
	// Check refuses a set the engine cannot serve; nil accepts every set.
	Check func(*rules.Set) error
	// Apply, when set, hands a new set to the engine before it serves (the
	// nginx engine writes it and reloads nginx); an error refuses the set.
	Apply func(*rules.Set) error
	// Log receives a line per reload, applied or refused; none when nil.
	Log io.Writer
	// Metrics show the version serving and count reloads; none when nil.
	Metrics *limiter.Metrics
}

// NewRules serves set, and reloads from cfg.File.
func NewRules(set *rules.Set, cfg RulesConfig) *Rules {
	r := &Rules{file: cfg.File, opts: cfg.Options, log: cfg.Log, metrics: cfg.Metrics, check: cfg.Check, apply: cfg.Apply}
	r.store(set)
	if cfg.File != "" {
		r.watcher = reload.New(reload.Config{Path: cfg.File, Load: r.load, Report: r.report, Log: r.line})
	}
	return r
}

// LoadRules reads file once it holds still (reload.Read), then parses and
// checks it for the gateway; its errors are *rules.Error naming line and
// field.
func LoadRules(file string, opts ...rules.Option) (*rules.Set, error) {
	s, err := reload.Read(context.Background(), reload.Config{Path: file})
	if err != nil {
		return nil, err
	}
	return parseRules(s.Files, opts)
}

// parseRules parses the one file of a rules file's snapshot.
func parseRules(files []reload.File, opts []rules.Option) (*rules.Set, error) {
	return rules.Parse(files[0].Name, files[0].Data, opts...)
}

// Current returns the rules serving now.
func (r *Rules) Current() *Loaded { return r.cur.Load() }

// store serves set; the caller holds r.mu, or has not shared r yet.
func (r *Rules) store(set *rules.Set) {
	l := &Loaded{Set: set, At: time.Now()}
	r.cur.Store(l)
	if r.metrics != nil {
		r.metrics.RulesLoaded(set.Version, l.At)
	}
}

// setMetrics attaches metrics once the gateway has them.
func (r *Rules) setMetrics(m *limiter.Metrics) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.metrics = m
	l := r.cur.Load()
	m.RulesLoaded(l.Set.Version, l.At)
}

// Reload reads the file again, once it holds still. A file that does not
// parse, or that Check or Apply refuses, is refused: the error is logged
// and returned, and the rules serving stay. A file with the version
// serving changes nothing.
func (r *Rules) Reload() error {
	if r.watcher == nil {
		return nil
	}
	return r.watcher.Reload(context.Background())
}

// load serves the rules of files, the reload's snapshot of the file.
func (r *Rules) load(files []reload.File, _ reload.Cause) error {
	set, err := parseRules(files, r.opts)
	if err == nil && r.check != nil {
		err = r.check(set)
	}
	if err != nil {
		return err
	}
	old := r.cur.Load()
	if set.Version == old.Set.Version {
		return reload.ErrUnchanged
	}
	if r.apply != nil {
		if err := r.apply(set); err != nil {
			return err
		}
	}
	r.mu.Lock()
	r.store(set)
	r.mu.Unlock()
	r.line("rules %s reloaded: version %s (was %s), %d limits", r.file, set.Version, old.Set.Version, len(set.Limits()))
	return nil
}

// report counts a reload by its result, and logs a refusal.
func (r *Rules) report(o reload.Outcome) {
	r.mu.Lock()
	if r.metrics != nil {
		r.metrics.CountReload(string(o.Result))
	}
	r.mu.Unlock()
	if o.Result == reload.Refused {
		r.line("rules %s refused, version %s keeps serving: %v", r.file, r.cur.Load().Set.Version, o.Err)
	}
}

func (r *Rules) line(format string, a ...any) {
	if r.log != nil {
		fmt.Fprintf(r.log, "ratelab edge: "+format+"\n", a...)
	}
}

// Watch reloads the rules whenever anything changes in the file's
// directory (an editor's rename over the file, a ConfigMap's swap of its
// ..data link) and on SIGHUP, until ctx is done (reload.Watcher).
func (r *Rules) Watch(ctx context.Context) error {
	if r.watcher == nil {
		return nil
	}
	return r.watcher.Watch(ctx)
}
