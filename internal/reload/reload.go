// Package reload hands a file, or the files of a directory, to a loader
// whenever they change, as stable snapshots of their bytes.
//
// A Watcher watches the directory (a file's own directory, so that a file
// renamed over the old one is seen) and reacts to any event in it, hidden
// entries and symbolic links included: Kubernetes updates a ConfigMap volume
// by renaming a new ..data link over the old one, and no event names the
// files, which are links through ..data. It reloads on SIGHUP too, and when
// asked (Reload).
//
// A reload reads the files, following links, until two reads Settle apart
// give the same bytes, and hands the loader those bytes: a file still being
// written is not applied while its writer keeps writing, and the loader,
// which never reads the files itself, cannot read a file that changes after
// it was found stable. Bytes the same as the last snapshot handed over are
// not handed over again. A writer that pauses longer than Settle in the
// middle of a file can still be read half-written; writers should write a
// temporary file and rename it over the old one.
package reload

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/fsnotify/fsnotify"
)

// DefaultSettle is Config.Settle's default: the pause between two reads
// that must give the same bytes. A program writes a configuration file in
// one go, in well under a millisecond; an editor's or a copy's writes
// follow each other within a few. 50 ms catches a writer that pauses up to
// that long between two writes, and delays a reload by about twice that
// (after the first event, then between two reads): nothing beside the
// kubelet's minute or so before a ConfigMap's update reaches the volume.
const DefaultSettle = 50 * time.Millisecond

// A reload gives up on files that are still changing after maxReads reads,
// or after maxSettling (reads of a slow disk): 2 s of writes at the default
// Settle. The writer's last write is an event, which starts another reload.
const (
	maxReads    = 40
	maxSettling = 5 * time.Second
)

// ErrUnchanged is what Config.Load returns when the files hold what serves
// already (the loader's own version of them is the one serving): the
// reload is then Unchanged, not Applied.
var ErrUnchanged = errors.New("reload: unchanged")

// File is one file of a snapshot.
type File struct {
	// Name is the file's path: Config.Path for a file, Path joined with
	// the entry's name in a directory.
	Name string
	// Data is what the file held.
	Data []byte
}

// Snapshot is what one stable read of Config.Path found.
type Snapshot struct {
	// Files are the files read, sorted by name; for a file, that one.
	Files []File
	// Skipped names the entries of a directory that are not read, sorted:
	// neither hidden (a name beginning with a dot) nor a regular file that
	// Match accepts (a link is followed: one to nothing is skipped).
	Skipped []string
}

// Cause is what started a reload.
type Cause string

// Causes of a reload.
const (
	Start  Cause = "start"  // Watch began: a change since the first read is not missed
	Change Cause = "change" // an event in the directory watched
	Signal Cause = "sighup" // SIGHUP
	Demand Cause = "demand" // Watcher.Reload
)

// Result is what became of a reload.
type Result string

// Results of a reload.
const (
	// Applied: Load took the snapshot.
	Applied Result = "applied"
	// Refused: Load refused the snapshot, or the files could not be read
	// (or were still changing); what served keeps serving.
	Refused Result = "refused"
	// Unchanged: the bytes handed over last time, not handed over again,
	// or Load returned ErrUnchanged.
	Unchanged Result = "unchanged"
)

// Outcome is one reload, as Config.Report receives it.
type Outcome struct {
	Result Result
	Cause  Cause
	// At is when the reload ended.
	At time.Time
	// Skipped is the snapshot's Skipped; nil when the files were not read.
	Skipped []string
	// Err is why the reload was refused; nil otherwise.
	Err error
}

// Config configures a Watcher and Read.
type Config struct {
	// Path is the file read, or with Dir the directory whose files are read.
	Path string
	// Dir says that Path is a directory: its regular files (not its
	// subdirectories) that are not hidden and that Match accepts are read.
	Dir bool
	// Match says, by its name, whether an entry of a directory is read; nil
	// reads every one.
	Match func(name string) bool
	// Settle is the pause between two reads that must give the same bytes
	// before they are handed over; 0 is DefaultSettle.
	Settle time.Duration
	// Load parses the files and serves them; an error refuses them, and
	// what served keeps serving (ErrUnchanged: they serve already). It
	// parses exactly the bytes given, and is called one reload at a time.
	Load func(files []File, cause Cause) error
	// Report receives each reload's outcome, one reload at a time, after
	// Load; nil: none. A reload that ctx ends is not reported.
	Report func(Outcome)
	// Log receives a line on a SIGHUP and on what goes wrong watching;
	// nil: none.
	Log func(format string, a ...any)
}

func (c Config) settle() time.Duration {
	if c.Settle > 0 {
		return c.Settle
	}
	return DefaultSettle
}

func (c Config) log(format string, a ...any) {
	if c.Log != nil {
		c.Log(format, a...)
	}
}

// Read reads Path until two reads Settle apart give the same bytes (or the
// same error), for the first load at start.
func Read(ctx context.Context, cfg Config) (Snapshot, error) {
	return cfg.stable(ctx, nil)
}

// stable reads until two reads Settle apart agree; beforeRead, when set,
// is called before each read, n from 0.
func (c Config) stable(ctx context.Context, beforeRead func(n int)) (Snapshot, error) {
	start := time.Now()
	var prev Snapshot
	var prevErr error
	for n := 0; ; n++ {
		if n > 0 {
			t := time.NewTimer(c.settle())
			select {
			case <-ctx.Done():
				t.Stop()
				return Snapshot{}, ctx.Err()
			case <-t.C:
			}
		}
		if beforeRead != nil {
			beforeRead(n)
		}
		s, err := c.read()
		if n > 0 && sameRead(s, err, prev, prevErr) {
			return s, err
		}
		if n+1 >= maxReads || time.Since(start) >= maxSettling {
			return Snapshot{}, fmt.Errorf("%s still changing after %d reads in %s", c.Path, n+1, time.Since(start).Round(time.Millisecond))
		}
		prev, prevErr = s, err
	}
}

// sameRead reports whether two reads agree: the same files with the same
// bytes, or the same error.
func sameRead(a Snapshot, aErr error, b Snapshot, bErr error) bool {
	if aErr != nil || bErr != nil {
		return aErr != nil && bErr != nil && aErr.Error() == bErr.Error()
	}
	return digest(a.Files) == digest(b.Files)
}

// digest identifies files by their names and bytes.
func digest(files []File) [sha256.Size]byte {
	h := sha256.New()
	for _, f := range files {
		_ = binary.Write(h, binary.LittleEndian, [2]uint64{uint64(len(f.Name)), uint64(len(f.Data))})
		h.Write([]byte(f.Name))
		h.Write(f.Data)
	}
	return [sha256.Size]byte(h.Sum(nil))
}

// read reads Path once.
func (c Config) read() (Snapshot, error) {
	if !c.Dir {
		data, err := os.ReadFile(c.Path)
		if err != nil {
			return Snapshot{}, err
		}
		return Snapshot{Files: []File{{Name: c.Path, Data: data}}}, nil
	}
	ents, err := os.ReadDir(c.Path)
	if err != nil {
		return Snapshot{}, err
	}
	var s Snapshot
	for _, e := range ents {
		name := e.Name()
		if strings.HasPrefix(name, ".") {
			continue
		}
		file := filepath.Join(c.Path, name)
		info, err := os.Stat(file)
		switch {
		case errors.Is(err, fs.ErrNotExist): // a link to nothing, or removed since listed
			s.Skipped = append(s.Skipped, name)
			continue
		case err != nil:
			return Snapshot{}, err
		case !info.Mode().IsRegular() || c.Match != nil && !c.Match(name):
			s.Skipped = append(s.Skipped, name)
			continue
		}
		data, err := os.ReadFile(file)
		if errors.Is(err, fs.ErrNotExist) {
			s.Skipped = append(s.Skipped, name)
			continue
		} else if err != nil {
			return Snapshot{}, err
		}
		s.Files = append(s.Files, File{Name: file, Data: data})
	}
	return s, nil
}

// Watcher reloads Config.Path: on the events of its directory and SIGHUP
// while Watch runs, and on demand (Reload).
type Watcher struct {
	cfg Config
	// beforeRead, set by tests, is called before each read of a reload.
	beforeRead func(n int)

	mu     sync.Mutex // one reload at a time
	handed bool       // whether Load was ever called
	last   [sha256.Size]byte
}

// New returns a Watcher of cfg; cfg.Load is required.
func New(cfg Config) *Watcher {
	return &Watcher{cfg: cfg}
}

// Reload reads Path until it is stable and hands it to Load, even when it
// is what was handed over last (Load says whether it is unchanged); it
// returns why the reload was refused, or ctx's error.
func (w *Watcher) Reload(ctx context.Context) error {
	return w.reload(ctx, Demand)
}

func (w *Watcher) reload(ctx context.Context, cause Cause) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	s, err := w.cfg.stable(ctx, w.beforeRead)
	if err != nil && ctx.Err() != nil {
		return ctx.Err()
	}
	o := Outcome{Cause: cause, Skipped: s.Skipped}
	sum := digest(s.Files)
	switch {
	case err != nil:
		o.Result, o.Err = Refused, err
	case w.handed && sum == w.last && cause != Signal && cause != Demand:
		// What was handed over last, applied or refused: an event beside the
		// files changes nothing. SIGHUP and a reload on demand hand it over
		// again, so that a version refused for a passing reason (nginx
		// could not reload) can be tried again without touching the files.
		o.Result = Unchanged
	default:
		w.handed, w.last = true, sum
		switch err := w.cfg.Load(s.Files, cause); {
		case errors.Is(err, ErrUnchanged):
			o.Result = Unchanged
		case err != nil:
			o.Result, o.Err = Refused, err
		default:
			o.Result = Applied
		}
	}
	o.At = time.Now()
	if w.cfg.Report != nil {
		w.cfg.Report(o)
	}
	return o.Err
}

// Watch reloads whenever anything changes in the directory watched (Path,
// or a file's directory), Settle after the change, and on SIGHUP, until
// ctx is done. It reloads once when the watch is in place,
// so that a change since the first read is not missed. It fails only when
// the watch cannot be set up.
func (w *Watcher) Watch(ctx context.Context) error {
	dir := w.cfg.Path
	if !w.cfg.Dir {
		dir = filepath.Dir(dir)
	}
	fw, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("watch %s: %w", dir, err)
	}
	defer fw.Close()
	if err := fw.Add(dir); err != nil {
		return fmt.Errorf("watch %s: %w", dir, err)
	}
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)

	_ = w.reload(ctx, Start)
	// A reload comes Settle after the first event of a burst: the events of
	// one save or one swap come together. It is not put off by each later
	// event, or a file written all the time beside Path (a log) would put
	// it off for ever; the events that come during a reload start another.
	var due <-chan time.Time
	reloadSoon := func() {
		if due == nil {
			due = time.After(w.cfg.settle())
		}
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-hup:
			w.cfg.log("SIGHUP: reloading %s", w.cfg.Path)
			_ = w.reload(ctx, Signal)
		case _, ok := <-fw.Events:
			if !ok {
				return nil
			}
			reloadSoon()
		case err, ok := <-fw.Errors:
			if !ok {
				return nil
			}
			// Events may have been lost (an overflow): read again.
			w.cfg.log("watching %s: %v", dir, err)
			reloadSoon()
		case <-due:
			due = nil
			_ = w.reload(ctx, Change)
		}
	}
}
