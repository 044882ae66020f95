package reload

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/ratelab/ratelab/internal/reload/reloadtest"
	"github.com/ratelab/ratelab/internal/testwait"
)

// wait bounds every wait for a reload: generous, as a loaded machine is
// slow; a test that passes waits far less.
const wait = 10 * time.Second

// yamlFile is the rate limit service's Match: *.yaml and *.yml.
func yamlFile(name string) bool {
	ext := filepath.Ext(name)
	return ext == ".yaml" || ext == ".yml"
}

// recorder is a Config's Load and Report: every snapshot handed over, and
// what became of every reload.
type recorder struct {
	mu       sync.Mutex
	loads    []string // each snapshot as text (files)
	outcomes []Outcome
	// refuse, when set, is Load's answer to files.
	refuse func(files []File) error
}

// text is files as one line: each file's base name and bytes.
func text(files []File) string {
	var b strings.Builder
	for _, f := range files {
		fmt.Fprintf(&b, "%s=%q ", filepath.Base(f.Name), f.Data)
	}
	return strings.TrimSpace(b.String())
}

func (r *recorder) load(files []File, _ Cause) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.loads = append(r.loads, text(files))
	if r.refuse != nil {
		return r.refuse(files)
	}
	return nil
}

func (r *recorder) report(o Outcome) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.outcomes = append(r.outcomes, o)
}

// loaded returns the snapshots handed over so far.
func (r *recorder) loaded() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.loads)
}

// reported returns the outcomes so far.
func (r *recorder) reported() []Outcome {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.outcomes)
}

// next waits for an outcome after the first mark ones that ok accepts, and
// returns it.
func (r *recorder) next(t *testing.T, mark int, what string, ok func(Outcome) bool) Outcome {
	t.Helper()
	var found Outcome
	testwait.Eventually(t, wait, func() (bool, string) {
		all := r.reported()
		for _, o := range all[min(mark, len(all)):] {
			if ok(o) {
				found = o
				return true, ""
			}
		}
		return false, fmt.Sprintf("no %s among the outcomes %+v (after the first %d); loads %q", what, all, mark, r.loaded())
	})
	return found
}

// waitLoad waits until the last snapshot handed over is want.
func (r *recorder) waitLoad(t *testing.T, want string) {
	t.Helper()
	testwait.Eventually(t, wait, func() (bool, string) {
		loads := r.loaded()
		return len(loads) > 0 && loads[len(loads)-1] == want, fmt.Sprintf("loads %q, want the last %q", loads, want)
	})
}

// handedOver waits until the last snapshot handed over is the last of
// want, and checks that want are every snapshot handed over, in order.
func (r *recorder) handedOver(t *testing.T, want ...string) {
	t.Helper()
	r.waitLoad(t, want[len(want)-1])
	if got := r.loaded(); !slices.Equal(got, want) {
		t.Errorf("handed over %q, want %q", got, want)
	}
}

// watch runs a Watcher of cfg, its Load and Report rec's, until the test
// ends, and waits for the reload it makes when its watch, and SIGHUP's
// handler, are in place.
func watch(t *testing.T, cfg Config, rec *recorder, beforeRead func(n int)) *Watcher {
	t.Helper()
	cfg.Load, cfg.Report, cfg.Log = rec.load, rec.report, t.Logf
	w := New(cfg)
	w.beforeRead = beforeRead
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Watch(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("watch: %v", err)
		}
	})
	rec.next(t, 0, "start", func(o Outcome) bool { return o.Cause == Start })
	return w
}

// write replaces file by one holding src, renamed over it: never seen
// half-written.
func write(t *testing.T, file, src string) {
	t.Helper()
	tmp := filepath.Join(filepath.Dir(file), "."+filepath.Base(file)+".tmp")
	if err := os.WriteFile(tmp, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, file); err != nil {
		t.Fatal(err)
	}
}

// TestConfigMapSwap: a ConfigMap volume updated as the kubelet updates it
// (no event names the file, only the hidden ..data link swapped) is handed
// over, whether the directory or the file is watched; no hidden entry is
// ever handed over; and a swap to the same bytes hands nothing over.
func TestConfigMapSwap(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  func(dir string) Config
	}{
		{"directory", func(dir string) Config { return Config{Path: dir, Dir: true, Match: yamlFile} }},
		{"file", func(dir string) Config { return Config{Path: filepath.Join(dir, "config.yaml")} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cm := reloadtest.NewConfigMap(t, t.TempDir(), map[string]string{"config.yaml": "limit: 2\n"})
			rec := &recorder{}
			watch(t, tc.cfg(cm.Dir), rec, nil)
			v2, v50, v60 := `config.yaml="limit: 2\n"`, `config.yaml="limit: 50\n"`, `config.yaml="limit: 60\n"`
			rec.handedOver(t, v2)

			cm.Update(map[string]string{"config.yaml": "limit: 50\n"})
			rec.handedOver(t, v2, v50)

			mark := len(rec.reported())
			cm.Update(map[string]string{"config.yaml": "limit: 50\n"})
			if o := rec.next(t, mark, "reload on a change", func(o Outcome) bool { return o.Cause == Change }); o.Result != Unchanged {
				t.Errorf("a swap to the same bytes: %+v, want unchanged", o)
			}
			cm.Update(map[string]string{"config.yaml": "limit: 60\n"})
			rec.handedOver(t, v2, v50, v60) // each version once, and no hidden entry
		})
	}
}

// TestWriterStillWriting: a file rewritten in place in two parts, its
// writer writing the second after the watcher has read the first (as a
// writer that pauses between two writes may), is handed over only whole:
// never "requests_per_unit: 3", the first part of "requests_per_unit: 30".
func TestWriterStillWriting(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "config.yaml")
	write(t, file, "requests_per_unit: 2\n")
	var (
		writing atomic.Bool
		f       *os.File
		first   = make(chan struct{}) // closed once the first part is written
		second  sync.Once
	)
	// Before each read, once the writer began: wait until the first part is
	// in the file; before any read after a reload's first, write the second.
	beforeRead := func(n int) {
		if !writing.Load() {
			return
		}
		<-first
		if n > 0 {
			second.Do(func() {
				if _, err := f.WriteString("0\n"); err != nil {
					t.Error(err)
				}
				if err := f.Close(); err != nil {
					t.Error(err)
				}
			})
		}
	}
	rec := &recorder{}
	watch(t, Config{Path: file}, rec, beforeRead)
	writing.Store(true)
	var err error
	if f, err = os.OpenFile(file, os.O_WRONLY|os.O_TRUNC, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString("requests_per_unit: 3"); err != nil {
		t.Fatal(err)
	}
	close(first)
	rec.handedOver(t, `config.yaml="requests_per_unit: 2\n"`, `config.yaml="requests_per_unit: 30\n"`)
}

// TestStillChanging: a file that changes before every read is never handed
// over: the reload gives up, refused, after a bounded number of reads.
func TestStillChanging(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "config.yaml")
	write(t, file, "0")
	var n atomic.Int64
	rec := &recorder{}
	w := New(Config{Path: file, Settle: time.Millisecond, Load: rec.load, Report: rec.report})
	w.beforeRead = func(int) { write(t, file, strconv.FormatInt(n.Add(1), 10)) }
	err := w.Reload(context.Background())
	if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("still changing after %d reads", maxReads)) {
		t.Errorf("Reload: %v, want still changing after %d reads", err, maxReads)
	}
	if loads := rec.loaded(); len(loads) != 0 {
		t.Errorf("handed over %q", loads)
	}
	if o := rec.reported(); len(o) != 1 || o[0].Result != Refused || o[0].Cause != Demand || o[0].Err != err {
		t.Errorf("outcomes %+v, want one refused on demand", o)
	}
}

// TestSIGHUP: a change the watch cannot see (the file is a link to one in
// another directory) is read on SIGHUP.
func TestSIGHUP(t *testing.T) {
	t.Parallel()
	target := filepath.Join(t.TempDir(), "config.yaml")
	write(t, target, "v1")
	link := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	rec := &recorder{}
	watch(t, Config{Path: link}, rec, nil)
	write(t, target, "v2")
	mark := len(rec.reported())
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	if o := rec.next(t, mark, "reload on SIGHUP", func(o Outcome) bool { return o.Cause == Signal }); o.Result != Applied {
		t.Errorf("on SIGHUP: %+v, want applied", o)
	}
	rec.handedOver(t, `config.yaml="v1"`, `config.yaml="v2"`)
}

// TestSkipped: of a directory, the regular files Match accepts are read,
// through links; the other entries that are not hidden are reported
// skipped (a link to nothing, a subdirectory, a file Match refuses); the
// hidden ones are neither read nor reported.
func TestSkipped(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for name, src := range map[string]string{"a.yaml": "a", "b.yml": "b", "notes.txt": "n", "README": "r", ".hidden.yaml": "h"} {
		write(t, filepath.Join(dir, name), src)
	}
	for _, err := range []error{
		os.Mkdir(filepath.Join(dir, "sub.yaml"), 0o755),
		os.Symlink("a.yaml", filepath.Join(dir, "link.yaml")),
		os.Symlink("nowhere.yaml", filepath.Join(dir, "dangling.yaml")),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
	cfg := Config{Path: dir, Dir: true, Match: yamlFile}
	s, err := Read(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := text(s.Files), `a.yaml="a" b.yml="b" link.yaml="a"`; got != want {
		t.Errorf("read %s, want %s", got, want)
	}
	wantSkipped := []string{"README", "dangling.yaml", "notes.txt", "sub.yaml"}
	if !slices.Equal(s.Skipped, wantSkipped) {
		t.Errorf("skipped %q, want %q", s.Skipped, wantSkipped)
	}
	rec := &recorder{}
	watch(t, cfg, rec, nil)
	if o := rec.reported()[0]; !slices.Equal(o.Skipped, wantSkipped) {
		t.Errorf("the watch reports skipped %q, want %q", o.Skipped, wantSkipped)
	}
}

// TestRemoved: a removed file is refused without a load, and the same file
// back is what was handed over last; an emptied directory is handed over
// empty, for the loader to refuse.
func TestRemoved(t *testing.T) {
	t.Run("file", func(t *testing.T) {
		t.Parallel()
		file := filepath.Join(t.TempDir(), "config.yaml")
		write(t, file, "v1")
		rec := &recorder{}
		watch(t, Config{Path: file}, rec, nil)
		mark := len(rec.reported())
		if err := os.Remove(file); err != nil {
			t.Fatal(err)
		}
		o := rec.next(t, mark, "refusal", func(o Outcome) bool { return o.Result == Refused })
		if !errors.Is(o.Err, fs.ErrNotExist) {
			t.Errorf("refused with %v, want the file missing", o.Err)
		}
		mark = len(rec.reported())
		write(t, file, "v1")
		if o := rec.next(t, mark, "reload on a change", func(o Outcome) bool { return o.Cause == Change }); o.Result != Unchanged {
			t.Errorf("the same file back: %+v, want unchanged", o)
		}
		if loads := rec.loaded(); len(loads) != 1 {
			t.Errorf("handed over %q, want the first version alone", loads)
		}
	})
	t.Run("directory", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		write(t, filepath.Join(dir, "a.yaml"), "a")
		write(t, filepath.Join(dir, "b.yaml"), "b")
		rec := &recorder{refuse: func(files []File) error {
			if len(files) == 0 {
				return errors.New("no files")
			}
			return nil
		}}
		watch(t, Config{Path: dir, Dir: true, Match: yamlFile}, rec, nil)
		mark := len(rec.reported())
		for _, name := range []string{"a.yaml", "b.yaml"} {
			if err := os.Remove(filepath.Join(dir, name)); err != nil {
				t.Fatal(err)
			}
		}
		rec.waitLoad(t, "")
		if o := rec.next(t, mark, "refusal", func(o Outcome) bool { return o.Result == Refused }); o.Err == nil || o.Err.Error() != "no files" {
			t.Errorf("the empty directory: %+v, want refused by the loader", o)
		}
	})
}

// TestWatchEnds: when ctx ends, Watch returns and leaves no goroutine, even
// in the middle of a reload, which is then not reported. Not parallel:
// goleak looks at every goroutine.
func TestWatchEnds(t *testing.T) {
	before := goleak.IgnoreCurrent()
	cm := reloadtest.NewConfigMap(t, t.TempDir(), map[string]string{"config.yaml": "v1"})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var armed atomic.Bool
	rec := &recorder{}
	w := New(Config{Path: cm.Dir, Dir: true, Load: rec.load, Report: rec.report})
	w.beforeRead = func(int) {
		if armed.Load() {
			cancel() // before the first read of the reload the update starts
		}
	}
	done := make(chan error, 1)
	go func() { done <- w.Watch(ctx) }()
	rec.next(t, 0, "start", func(o Outcome) bool { return o.Cause == Start })
	armed.Store(true)
	cm.Update(map[string]string{"config.yaml": "v2"})
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("watch: %v", err)
		}
	case <-time.After(wait):
		t.Fatal("Watch has not returned")
	}
	if o := rec.reported(); len(o) != 1 {
		t.Errorf("outcomes %+v, want the start's alone", o)
	}
	goleak.VerifyNone(t, before)
}

// TestBusyDirectory: a file beside the one watched that is written all the
// time (a log) does not put the reload off for ever: a change is handed
// over.
func TestBusyDirectory(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	file := filepath.Join(dir, "config.yaml")
	write(t, file, "v1")
	rec := &recorder{}
	watch(t, Config{Path: file}, rec, nil)
	log, err := os.Create(filepath.Join(dir, "edge.log"))
	if err != nil {
		t.Fatal(err)
	}
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(2 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			if _, err := log.WriteString("a line\n"); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	defer func() {
		close(stop)
		<-done
		log.Close()
	}()
	write(t, file, "v2")
	rec.handedOver(t, `config.yaml="v1"`, `config.yaml="v2"`)
}

// TestRefusedAgainOnDemand: a snapshot the loader refused for a passing
// reason (it could not apply it then) is handed over again on demand (and
// so on SIGHUP), though its bytes have not changed; the same bytes on a
// mere event are not.
func TestRefusedAgainOnDemand(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "rules.yaml")
	if err := os.WriteFile(file, []byte("v1"), 0o644); err != nil {
		t.Fatal(err)
	}
	rec := &recorder{}
	failing := true
	rec.refuse = func([]File) error {
		if failing {
			return errors.New("nginx did not reload")
		}
		return nil
	}
	w := New(Config{Path: file, Load: rec.load, Report: rec.report})
	if err := w.Reload(context.Background()); err == nil {
		t.Fatal("the first reload was not refused")
	}
	if err := w.reload(context.Background(), Change); err != nil || rec.reported()[1].Result != Unchanged {
		t.Fatalf("an event with the same bytes: %v, %+v; want unchanged, with no load", err, rec.reported())
	}
	failing = false
	if err := w.Reload(context.Background()); err != nil || rec.reported()[2].Result != Applied {
		t.Fatalf("on demand again: %v, %+v; want applied", err, rec.reported())
	}
	if got := len(rec.loaded()); got != 2 {
		t.Fatalf("%d loads, want 2: the refused snapshot, and the same again on demand", got)
	}
}
