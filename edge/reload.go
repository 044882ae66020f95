package edge

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/fsnotify/fsnotify"

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
// (Current) and is decided wholly by what it read; Reload swaps them at
// once, so that no request is decided by half of each.
type Rules struct {
	file    string
	opts    []rules.Option
	log     io.Writer
	metrics *limiter.Metrics
	cur     atomic.Pointer[Loaded]
	mu      sync.Mutex // one reload at a time
	check   func(*rules.Set) error
	apply   func(*rules.Set) error
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
	return r
}

// LoadRules parses and checks file for the gateway; its errors are
// *rules.Error naming line and field.
func LoadRules(file string, opts ...rules.Option) (*rules.Set, error) {
	src, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	return rules.Parse(file, src, opts...)
}

// Current returns the rules serving now.
func (r *Rules) Current() *Loaded { return r.cur.Load() }

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

// Reload reads the file again. A file that does not parse, or that Check
// refuses, is refused: the error is logged and returned, and the rules
// serving stay. A file with the version serving changes nothing.
func (r *Rules) Reload() error {
	if r.file == "" {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	set, err := LoadRules(r.file, r.opts...)
	if err == nil && r.check != nil {
		err = r.check(set)
	}
	old := r.cur.Load()
	if err == nil && set.Version != old.Set.Version && r.apply != nil {
		err = r.apply(set)
	}
	if err != nil {
		if r.metrics != nil {
			r.metrics.CountReload("refused")
		}
		r.line("rules %s refused, version %s keeps serving: %v", r.file, old.Set.Version, err)
		return err
	}
	if set.Version == old.Set.Version {
		return nil
	}
	r.store(set)
	if r.metrics != nil {
		r.metrics.CountReload("applied")
	}
	r.line("rules %s reloaded: version %s (was %s), %d limits", r.file, set.Version, old.Set.Version, len(set.Limits()))
	return nil
}

func (r *Rules) line(format string, a ...any) {
	if r.log != nil {
		fmt.Fprintf(r.log, "ratelab edge: "+format+"\n", a...)
	}
}

// settle is how long Watch waits after the last event on the file before
// it reloads: an editor's save is often several events.
const settle = 50 * time.Millisecond

// Watch reloads the rules on SIGHUP and whenever the file changes, until
// ctx is done. It watches the file's directory, not the file: editors and
// tools that save by writing a new file and renaming it over the old one
// replace the file a watch on it would follow.
func (r *Rules) Watch(ctx context.Context) error {
	if r.file == "" {
		return nil
	}
	name := filepath.Clean(r.file)
	return WatchDir(ctx, filepath.Dir(r.file), func(path string) bool { return filepath.Clean(path) == name },
		func(hup bool) {
			if hup {
				r.line("SIGHUP: reloading %s", r.file)
			}
			_ = r.Reload()
		}, r.line)
}

// WatchDir calls reload on SIGHUP (hup true) and once the files of dir
// that match have settled after a write, a new file, a rename or a
// removal, until ctx is done; line receives what goes wrong watching. It
// is the reload of the gateway's rules file and of the rate limit
// service's directory.
func WatchDir(ctx context.Context, dir string, match func(path string) bool, reload func(hup bool), line func(format string, a ...any)) error {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("watch %s: %w", dir, err)
	}
	defer w.Close()
	if err := w.Add(dir); err != nil {
		return fmt.Errorf("watch %s: %w", dir, err)
	}
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-hup:
			reload(true)
		case ev, ok := <-w.Events:
			if !ok {
				return nil
			}
			if match(ev.Name) && ev.Op&(fsnotify.Write|fsnotify.Create|fsnotify.Rename|fsnotify.Remove) != 0 {
				timer.Reset(settle)
			}
		case err, ok := <-w.Errors:
			if !ok {
				return nil
			}
			line("watching %s: %v", dir, err)
		case <-timer.C:
			reload(false)
		}
	}
}
