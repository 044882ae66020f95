package limiter

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ratelab/ratelab/internal/plural"
	"github.com/ratelab/ratelab/internal/reload"
	"github.com/ratelab/ratelab/rules"
)

// Served is one version of the rules a front door serves: every domain's
// rule set, read from one rules file (the gateway's) or from one directory
// of envoyproxy/ratelimit's files (the rate limit service's). It is
// read-only: a request reads the version serving once (Rules.Current) and
// is decided wholly by it, and a reload swaps it for another.
type Served struct {
	// Source is the file or the directory the rules were read from; empty
	// for rules given whole (the --limit shorthand), which never reload.
	Source string
	// Sets are the rule sets by domain.
	Sets map[string]*rules.Set
	// Version names this version: for a file, its rules' version (a hash of
	// its bytes, which rules check prints); for a directory, the hash of its
	// files' names and bytes (rules.Config.Version).
	Version string
	// Warnings are what the files hold that is accepted without taking
	// effect, each naming its file, line and field.
	Warnings []*rules.Error
	// At is when this version was loaded.
	At time.Time
}

// Set is the one rule set of a file's rules (the gateway's); nil when
// there is not exactly one.
func (s *Served) Set() *rules.Set {
	if len(s.Sets) != 1 {
		return nil
	}
	for _, set := range s.Sets {
		return set
	}
	return nil
}

// Limits counts the limits of every domain.
func (s *Served) Limits() int {
	n := 0
	for _, set := range s.Sets {
		n += len(set.Limits())
	}
	return n
}

// RulesConfig is where a front door's rules come from, and what it does
// with a new version.
type RulesConfig struct {
	// Path is a rules file; with Dir, a directory whose *.yaml and *.yml
	// files are read, one domain each (unless Options merge domains).
	Path string
	Dir  bool
	// Options are rules.ParseConfig's: rules.ForGateway or rules.ForService,
	// the default algorithm, rules.MergeDomains.
	Options []rules.Option
	// Check refuses a version the front door cannot serve; nil accepts
	// every version.
	Check func(*Served) error
	// Apply, when set, hands a new version to the engine before it serves
	// (the nginx engine writes it and reloads nginx); an error refuses it.
	Apply func(*Served) error
	// Log receives a line per reload (applied, refused), the warnings of
	// each version, and the files of a directory that are not read; Name
	// starts each line ("ratelab edge"). None when Log is nil.
	Log  io.Writer
	Name string
	// Metrics show the version serving and count reloads by result; they
	// may be attached later (SetMetrics).
	Metrics *Metrics
}

// Rules holds the rules a front door serves and reloads them, through one
// mechanism for a rules file and a directory (internal/reload): on any
// change in the file's directory (an editor's rename over the file, a
// Kubernetes ConfigMap's swap of its ..data link) and on SIGHUP, once the
// files hold still. A version that does not parse, or that Check or Apply
// refuses, is refused and logged, naming file, line and field, and the
// version serving keeps serving.
type Rules struct {
	cfg     RulesConfig
	cur     atomic.Pointer[Served]
	watcher *reload.Watcher // nil: never reloaded

	mu      sync.Mutex // metrics, and the skipped files last logged
	metrics *Metrics
	skipped []string
}

// FixedRules serves set as it is: it is never reloaded.
func FixedRules(set *rules.Set) *Rules {
	r := &Rules{}
	r.cur.Store(&Served{Sets: map[string]*rules.Set{set.Domain: set}, Version: set.Version, Warnings: set.Warnings, At: time.Now()})
	return r
}

// LoadRules reads cfg.Path once its files hold still and serves what they
// hold; Watch reloads them. A file that does not parse, or a version Check
// refuses, is an error naming the file, line and field; a directory with
// no *.yaml or *.yml file is an error too. The warnings are logged.
func LoadRules(ctx context.Context, cfg RulesConfig) (*Rules, error) {
	rc := cfg.source()
	snap, err := cfg.read(ctx, rc)
	if err != nil {
		return nil, err
	}
	s, err := cfg.parse(snap.Files)
	if err == nil && cfg.Check != nil {
		err = cfg.Check(s)
	}
	if err != nil {
		return nil, err
	}
	r := &Rules{cfg: cfg, metrics: cfg.Metrics}
	r.store(s)
	r.warn(s)
	r.logSkipped(snap.Skipped)
	rc.Load, rc.Report, rc.Log = r.load, r.report, r.line
	r.watcher = reload.New(rc)
	return r, nil
}

// ReadRules reads cfg.Path as LoadRules does, and returns what it holds
// without serving it: a check of the files, offline.
func ReadRules(ctx context.Context, cfg RulesConfig) (*Served, []string, error) {
	snap, err := cfg.read(ctx, cfg.source())
	if err != nil {
		return nil, nil, err
	}
	s, err := cfg.parse(snap.Files)
	if err == nil && cfg.Check != nil {
		err = cfg.Check(s)
	}
	return s, snap.Skipped, err
}

// read reads the files once they hold still; a directory that cannot be
// read says so.
func (cfg RulesConfig) read(ctx context.Context, rc reload.Config) (reload.Snapshot, error) {
	snap, err := reload.Read(ctx, rc)
	if err != nil && cfg.Dir {
		err = fmt.Errorf("config directory: %w", err)
	}
	return snap, err
}

// source is how the files are read: a file, or a directory's YAML files
// (never its hidden ones: editors' files, a ConfigMap's ..data).
func (cfg RulesConfig) source() reload.Config {
	rc := reload.Config{Path: cfg.Path, Dir: cfg.Dir}
	if cfg.Dir {
		rc.Match = func(name string) bool {
			ext := filepath.Ext(name)
			return ext == ".yaml" || ext == ".yml"
		}
	}
	return rc
}

// parse parses a snapshot of the files.
func (cfg RulesConfig) parse(files []reload.File) (*Served, error) {
	fs := make([]rules.File, len(files))
	for i, f := range files {
		fs[i] = rules.File{Name: f.Name, Src: f.Data}
	}
	c, err := rules.ParseConfig(fs, cfg.Options...)
	switch {
	case err != nil:
		return nil, err
	case len(c.Sets) == 0 && cfg.Dir:
		return nil, fmt.Errorf("config directory %s: no .yaml or .yml file", cfg.Path)
	case len(c.Sets) == 0:
		return nil, fmt.Errorf("%s: no rules", cfg.Path)
	}
	s := &Served{Source: cfg.Path, Sets: c.Sets, Version: c.Version, Warnings: c.Warnings, At: time.Now()}
	if set := s.Set(); !cfg.Dir && set != nil {
		s.Version = set.Version
	}
	return s, nil
}

// Current returns the version serving now.
func (r *Rules) Current() *Served { return r.cur.Load() }

// Source is the file or directory the rules are read from; empty for fixed
// rules.
func (r *Rules) Source() string { return r.cfg.Path }

// SetMetrics attaches metrics once the front door has them: they show the
// version serving from then on.
func (r *Rules) SetMetrics(m *Metrics) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.metrics = m
	s := r.cur.Load()
	m.RulesLoaded(s.Version, s.At)
}

// store serves s.
func (r *Rules) store(s *Served) {
	r.cur.Store(s)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.metrics != nil {
		r.metrics.RulesLoaded(s.Version, s.At)
	}
}

// Reload reads the files again, once they hold still; see Rules. Fixed
// rules do nothing.
func (r *Rules) Reload(ctx context.Context) error {
	if r.watcher == nil {
		return nil
	}
	return r.watcher.Reload(ctx)
}

// Watch reloads whenever anything changes in the file's directory, or the
// directory, and on SIGHUP, until ctx is done (internal/reload). Fixed
// rules return at once.
func (r *Rules) Watch(ctx context.Context) error {
	if r.watcher == nil {
		return nil
	}
	return r.watcher.Watch(ctx)
}

// load serves the version of files, the reload's snapshot.
func (r *Rules) load(files []reload.File, _ reload.Cause) error {
	s, err := r.cfg.parse(files)
	if err == nil && r.cfg.Check != nil {
		err = r.cfg.Check(s)
	}
	if err != nil {
		return err
	}
	old := r.cur.Load()
	if s.Version == old.Version {
		return reload.ErrUnchanged
	}
	if r.cfg.Apply != nil {
		if err := r.cfg.Apply(s); err != nil {
			return err
		}
	}
	r.store(s)
	r.line("%s reloaded: version %s (was %s), %s", r.what(), s.Version, old.Version, r.counts(s))
	r.warn(s)
	return nil
}

// report counts a reload by its result, logs a refusal, and the files
// skipped when they change.
func (r *Rules) report(o reload.Outcome) {
	r.mu.Lock()
	if r.metrics != nil {
		r.metrics.CountReload(string(o.Result))
	}
	r.mu.Unlock()
	if o.Result == reload.Refused {
		r.line("%s refused, version %s keeps serving: %v", r.what(), r.cur.Load().Version, o.Err)
	}
	r.logSkipped(o.Skipped)
}

// logSkipped says which files of a directory are not read, when that
// changes.
func (r *Rules) logSkipped(skipped []string) {
	r.mu.Lock()
	changed := len(skipped) > 0 && !slices.Equal(skipped, r.skipped)
	r.skipped = skipped
	r.mu.Unlock()
	if changed {
		r.line("%s: skipped %s: only *.yaml and *.yml files are read", r.what(), strings.Join(skipped, ", "))
	}
}

// warn logs a version's warnings.
func (r *Rules) warn(s *Served) {
	for _, w := range s.Warnings {
		r.line("warning: %v", w)
	}
}

// what names the source in a line: "rules FILE" or "config DIR".
func (r *Rules) what() string {
	if r.cfg.Dir {
		return "config " + r.cfg.Path
	}
	return "rules " + r.cfg.Path
}

// counts says how much a version holds: "3 limits", or for a directory
// "2 domains, 5 limits".
func (r *Rules) counts(s *Served) string {
	if r.cfg.Dir {
		return plural.Count(len(s.Sets), "domain") + ", " + plural.Count(s.Limits(), "limit")
	}
	return plural.Count(s.Limits(), "limit")
}

func (r *Rules) line(format string, a ...any) {
	if r.cfg.Log != nil {
		fmt.Fprintf(r.cfg.Log, "%s: "+format+"\n", append([]any{cmp.Or(r.cfg.Name, "ratelab")}, a...)...)
	}
}
