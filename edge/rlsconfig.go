package edge

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/ratelab/ratelab/internal/reload"
	"github.com/ratelab/ratelab/rules"
)

// Domains is a configuration of the rate limit service: envoyproxy/ratelimit's
// files of one directory, one rules.Set per domain.
type Domains struct {
	// Dir is the directory read.
	Dir string
	// Sets are the domains' rules, by domain.
	Sets map[string]*rules.Set
	// Version names the configuration: each file's name and version, hashed
	// as the files' versions are.
	Version string
	// At is when it was loaded.
	At time.Time
}

// configDir is the service's directory as reload reads it: envoyproxy/ratelimit
// reads every file of its config directory; ratelab reads the YAML ones
// (and never the hidden ones: editors' files, a ConfigMap's ..data).
func configDir(dir string) reload.Config {
	return reload.Config{Path: dir, Dir: true, Match: func(name string) bool {
		ext := filepath.Ext(name)
		return ext == ".yaml" || ext == ".yml"
	}}
}

// LoadDomains reads every *.yaml and *.yml file of dir, once they hold
// still (reload.Read), as envoyproxy/ratelimit reads its runtime directory:
// each file one domain, no two files the same domain. Errors name the
// file, and a file's mistakes its line and field (*rules.Error).
func LoadDomains(dir string, opts ...rules.Option) (*Domains, error) {
	s, err := reload.Read(context.Background(), configDir(dir))
	if err != nil {
		return nil, fmt.Errorf("config directory: %w", err)
	}
	return parseDomains(dir, s.Files, opts)
}

// parseDomains parses the files of a snapshot of dir; see LoadDomains.
func parseDomains(dir string, files []reload.File, opts []rules.Option) (*Domains, error) {
	d := &Domains{Dir: dir, Sets: map[string]*rules.Set{}, At: time.Now()}
	var versions []string
	for _, f := range files {
		set, err := rules.Parse(f.Name, f.Data, append([]rules.Option{rules.ForService(), rules.WithDefaultAlgorithm("fixed-window")}, opts...)...)
		if err != nil {
			return nil, err
		}
		if other, ok := d.Sets[set.Domain]; ok {
			return nil, fmt.Errorf("%s: domain %q is also the domain of %s: each domain is in one file", f.Name, set.Domain, other.File)
		}
		d.Sets[set.Domain] = set
		versions = append(versions, filepath.Base(f.Name)+"="+set.Version)
	}
	if len(d.Sets) == 0 {
		return nil, fmt.Errorf("config directory %s: no .yaml file", dir)
	}
	slices.Sort(versions)
	sum := sha256.Sum256([]byte(strings.Join(versions, "\n")))
	d.Version = hex.EncodeToString(sum[:6])
	return d, nil
}

// DomainsReloader holds the configuration the service serves, and reloads
// it from its directory: a directory with a file that does not parse is
// refused, and the configuration serving keeps serving.
type DomainsReloader struct {
	opts    []rules.Option
	log     io.Writer
	cur     atomic.Pointer[Domains]
	watcher *reload.Watcher
	skipped []string // the files last logged as skipped; reloads come one at a time
}

// NewDomainsReloader serves d, and reloads from d.Dir.
func NewDomainsReloader(d *Domains, log io.Writer, opts ...rules.Option) *DomainsReloader {
	r := &DomainsReloader{opts: opts, log: log}
	r.cur.Store(d)
	cfg := configDir(d.Dir)
	cfg.Load, cfg.Report, cfg.Log = r.load, r.report, r.line
	r.watcher = reload.New(cfg)
	return r
}

// Current returns the configuration serving now.
func (r *DomainsReloader) Current() *Domains { return r.cur.Load() }

// Reload reads the directory again, once its files hold still; see
// DomainsReloader.
func (r *DomainsReloader) Reload() error {
	return r.watcher.Reload(context.Background())
}

// load serves the configuration of files, the reload's snapshot of the
// directory.
func (r *DomainsReloader) load(files []reload.File, _ reload.Cause) error {
	old := r.cur.Load()
	d, err := parseDomains(old.Dir, files, r.opts)
	if err != nil {
		return err
	}
	if d.Version == old.Version {
		return reload.ErrUnchanged
	}
	r.cur.Store(d)
	r.line("config %s reloaded: version %s (was %s), %d domains", old.Dir, d.Version, old.Version, len(d.Sets))
	return nil
}

// report logs a refusal, and the files skipped when they change.
func (r *DomainsReloader) report(o reload.Outcome) {
	cur := r.cur.Load()
	if o.Result == reload.Refused {
		r.line("config %s refused, version %s keeps serving: %v", cur.Dir, cur.Version, o.Err)
	}
	if len(o.Skipped) > 0 && !slices.Equal(o.Skipped, r.skipped) {
		r.line("config %s: skipped %s: only *.yaml and *.yml files are read", cur.Dir, strings.Join(o.Skipped, ", "))
	}
	r.skipped = o.Skipped
}

// Watch reloads whenever anything changes in the directory (a file
// written, renamed or removed, a ConfigMap's swap of its ..data link) and
// on SIGHUP, until ctx is done (reload.Watcher).
func (r *DomainsReloader) Watch(ctx context.Context) error {
	return r.watcher.Watch(ctx)
}

func (r *DomainsReloader) line(format string, a ...any) {
	if r.log != nil {
		fmt.Fprintf(r.log, "ratelab rls: "+format+"\n", a...)
	}
}
