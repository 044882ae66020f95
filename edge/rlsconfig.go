package edge

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

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

// configFile reports whether the service reads name: envoyproxy/ratelimit
// reads every file of its config directory; ratelab reads the YAML ones,
// and not the hidden files editors leave beside them.
func configFile(name string) bool {
	base := filepath.Base(name)
	ext := filepath.Ext(base)
	return !strings.HasPrefix(base, ".") && (ext == ".yaml" || ext == ".yml")
}

// LoadDomains reads every *.yaml and *.yml file of dir as envoyproxy/ratelimit
// reads its runtime directory: each file one domain, no two files the same
// domain. Errors name the file, and a file's mistakes its line and field
// (*rules.Error).
func LoadDomains(dir string, opts ...rules.Option) (*Domains, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("config directory: %w", err)
	}
	d := &Domains{Dir: dir, Sets: map[string]*rules.Set{}, At: time.Now()}
	var versions []string
	for _, e := range ents {
		if e.IsDir() || !configFile(e.Name()) {
			continue
		}
		file := filepath.Join(dir, e.Name())
		src, err := os.ReadFile(file)
		if err != nil {
			return nil, err
		}
		set, err := rules.Parse(file, src, append([]rules.Option{rules.ForService(), rules.WithDefaultAlgorithm("fixed-window")}, opts...)...)
		if err != nil {
			return nil, err
		}
		if other, ok := d.Sets[set.Domain]; ok {
			return nil, fmt.Errorf("%s: domain %q is also the domain of %s: each domain is in one file", file, set.Domain, other.File)
		}
		d.Sets[set.Domain] = set
		versions = append(versions, e.Name()+"="+set.Version)
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
	opts []rules.Option
	log  io.Writer
	cur  atomic.Pointer[Domains]
	mu   sync.Mutex
}

// NewDomainsReloader serves d, and reloads from d.Dir.
func NewDomainsReloader(d *Domains, log io.Writer, opts ...rules.Option) *DomainsReloader {
	r := &DomainsReloader{opts: opts, log: log}
	r.cur.Store(d)
	return r
}

// Current returns the configuration serving now.
func (r *DomainsReloader) Current() *Domains { return r.cur.Load() }

// Reload reads the directory again; see DomainsReloader.
func (r *DomainsReloader) Reload() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	old := r.cur.Load()
	d, err := LoadDomains(old.Dir, r.opts...)
	if err != nil {
		r.line("config %s refused, version %s keeps serving: %v", old.Dir, old.Version, err)
		return err
	}
	if d.Version == old.Version {
		return nil
	}
	r.cur.Store(d)
	r.line("config %s reloaded: version %s (was %s), %d domains", old.Dir, d.Version, old.Version, len(d.Sets))
	return nil
}

// Watch reloads on SIGHUP and whenever a YAML file of the directory
// changes, until ctx is done (WatchDir).
func (r *DomainsReloader) Watch(ctx context.Context) error {
	dir := r.Current().Dir
	return WatchDir(ctx, dir, configFile, func(hup bool) {
		if hup {
			r.line("SIGHUP: reloading %s", dir)
		}
		_ = r.Reload()
	}, r.line)
}

func (r *DomainsReloader) line(format string, a ...any) {
	if r.log != nil {
		fmt.Fprintf(r.log, "ratelab rls: "+format+"\n", a...)
	}
}
