package batch

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/ratelab/ratelab/internal/redisrun"
	"github.com/ratelab/ratelab/internal/redisrun/redistest"
	"github.com/ratelab/ratelab/internal/testwait"
)

var srv *redisrun.Server

func TestMain(m *testing.M) { os.Exit(redistest.Main(m, &srv)) }

// echo counts the call on its key and returns its own argument, so a reply
// routed to the wrong caller shows.
var echo = redis.NewScript(`redis.call('INCR', KEYS[1]) return ARGV[1]`)

// recorder keeps the size of every pipeline a Batcher sends.
type recorder struct {
	mu      sync.Mutex
	sizes   []int // first sends and retries
	first   int   // commands in first sends
	retries int
}

func (r *recorder) onBatch(size int, retry bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.sizes = append(r.sizes, size)
	if retry {
		r.retries++
	} else {
		r.first += size
	}
}

func (r *recorder) snapshot() (sizes []int, first, retries int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]int(nil), r.sizes...), r.first, r.retries
}

func newBatcher(t *testing.T, c redis.Cmdable, opts Options) *Batcher {
	t.Helper()
	b := New(c, opts)
	t.Cleanup(func() { b.Close() })
	return b
}

// runAll runs echo from n goroutines at once, caller i with argument i, and
// fails unless each got its own argument back.
func runAll(t *testing.T, b *Batcher, key string, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	errs := make(chan error, n)
	var start sync.WaitGroup
	start.Add(1)
	for i := range n {
		go func() {
			start.Wait()
			got, err := b.Run(ctx, echo, []string{key}, i)
			switch {
			case err != nil:
				errs <- fmt.Errorf("caller %d: %w", i, err)
			case got != strconv.Itoa(i):
				errs <- fmt.Errorf("caller %d got %v", i, got)
			default:
				errs <- nil
			}
		}()
	}
	start.Done()
	for range n {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
}

func TestRepliesReachTheirCallers(t *testing.T) {
	for _, tc := range []struct {
		name          string
		max, flushers int
	}{
		{"max 8", 8, 1},
		{"max 1", 1, 1},
		{"max 16 on 3 flushers", 16, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := redistest.Client(t, srv)
			var rec recorder
			b := newBatcher(t, c, Options{Max: tc.max, Flushers: tc.flushers, OnBatch: rec.onBatch})
			key := redistest.Prefix(t) + "n"
			const callers = 64
			runAll(t, b, key, callers)
			sizes, first, _ := rec.snapshot()
			for _, s := range sizes {
				if s < 1 || s > tc.max {
					t.Errorf("a pipeline of %d commands, want 1..%d", s, tc.max)
				}
			}
			if first != callers {
				t.Errorf("pipelines first carried %d commands, want %d", first, callers)
			}
			if n, err := c.Get(context.Background(), key).Int(); err != nil || n != callers {
				t.Errorf("the script ran %d times (%v), want %d", n, err, callers)
			}
		})
	}
}

// commandCalls reads the calls of one command from INFO commandstats
// ("script|load", "evalsha").
func commandCalls(t *testing.T, c *redis.Client, name string) int {
	t.Helper()
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatalf("info commandstats: %v", err)
	}
	for _, line := range strings.Split(info, "\n") {
		rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_"+name+":calls=")
		if !ok {
			continue
		}
		n, err := strconv.Atoi(strings.SplitN(rest, ",", 2)[0])
		if err != nil {
			t.Fatalf("commandstats line %q: %v", line, err)
		}
		return n
	}
	return 0
}

func TestNoScriptLoadsOncePerBatch(t *testing.T) {
	c := redistest.Client(t, srv)
	ctx := context.Background()
	var rec recorder
	b := newBatcher(t, c, Options{Max: 64, OnBatch: rec.onBatch})
	key := redistest.Prefix(t) + "n"
	if err := echo.Load(ctx, c).Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	loads := commandCalls(t, c, "script|load")
	runAll(t, b, key, 32)
	_, _, retries := rec.snapshot()
	// One flusher: the first pipeline after the flush is the only one to
	// get NOSCRIPT, and its commands are retried together.
	if retries != 1 {
		t.Errorf("%d retry pipelines, want 1", retries)
	}
	if got := commandCalls(t, c, "script|load") - loads; got != 1 {
		t.Errorf("%d SCRIPT LOAD calls, want 1", got)
	}
	if n, err := c.Get(ctx, key).Int(); err != nil || n != 32 {
		t.Errorf("the script ran %d times (%v), want 32: a retried command ran twice or not at all", n, err)
	}
}

func TestCanceledCallerIsAnsweredAndNeverSent(t *testing.T) {
	c := redistest.Client(t, srv)
	prefix := redistest.Prefix(t)
	release := make(chan struct{})
	var once sync.Once
	held := make(chan struct{})
	b := newBatcher(t, c, Options{Max: 4, OnBatch: func(int, bool) {
		// Hold the first pipeline so that the next call waits in the queue.
		once.Do(func() {
			close(held)
			<-release
		})
	}})
	first := make(chan error, 1)
	go func() {
		_, err := b.Run(context.Background(), echo, []string{prefix + "first"}, 1)
		first <- err
	}()
	<-held

	ctx, cancel := context.WithCancel(context.Background())
	canceled := make(chan error, 1)
	go func() {
		_, err := b.Run(ctx, echo, []string{prefix + "canceled"}, 2)
		canceled <- err
	}()
	testwait.Eventually(t, 10*time.Second, func() (bool, string) {
		return len(b.calls) == 1, "the second call is not queued"
	})
	cancel()
	if err := <-canceled; !errors.Is(err, context.Canceled) {
		t.Errorf("canceled caller got %v, want context.Canceled", err)
	}
	close(release)
	if err := <-first; err != nil {
		t.Errorf("first caller: %v", err)
	}
	// A later call goes through the same flusher after the canceled one.
	if _, err := b.Run(context.Background(), echo, []string{prefix + "after"}, 3); err != nil {
		t.Errorf("call after the canceled one: %v", err)
	}
	if n, err := c.Exists(context.Background(), prefix+"canceled").Result(); err != nil || n != 0 {
		t.Errorf("the canceled call reached Redis (exists %d, %v)", n, err)
	}
}

// failOdd fails the calls with an odd argument and echoes the others.
var failOdd = redis.NewScript(`if tonumber(ARGV[1]) % 2 == 1 then return redis.error_reply('ERR odd ' .. ARGV[1]) end return ARGV[1]`)

func TestFailedCommandFailsOnlyItsCaller(t *testing.T) {
	c := redistest.Client(t, srv)
	key := redistest.Prefix(t) + "k"
	if err := failOdd.Load(context.Background(), c).Err(); err != nil {
		t.Fatal(err)
	}
	var rec recorder
	held, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	const callers = 8
	b := newBatcher(t, c, Options{Max: callers, OnBatch: func(n int, retry bool) {
		rec.onBatch(n, retry)
		// Hold the first pipeline until the others are all queued, so that
		// they go out together.
		once.Do(func() {
			close(held)
			<-release
		})
	}})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	errs := make(chan error, callers+1)
	call := func(i int) {
		got, err := b.Run(ctx, failOdd, []string{key}, i)
		switch {
		case i%2 == 1 && (err == nil || !strings.Contains(err.Error(), "odd "+strconv.Itoa(i))):
			errs <- fmt.Errorf("caller %d: got %v, %v, want its own error", i, got, err)
		case i%2 == 0 && (err != nil || got != strconv.Itoa(i)):
			errs <- fmt.Errorf("caller %d: got %v, %v, want its argument", i, got, err)
		default:
			errs <- nil
		}
	}
	go call(callers)
	<-held
	for i := range callers {
		go call(i)
	}
	testwait.Eventually(t, 10*time.Second, func() (bool, string) {
		return len(b.calls) == callers, fmt.Sprintf("%d of %d calls queued", len(b.calls), callers)
	})
	close(release)
	for range callers + 1 {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	if sizes, _, _ := rec.snapshot(); fmt.Sprint(sizes) != fmt.Sprintf("[1 %d]", callers) {
		t.Errorf("pipelines %v, want [1 %d]", sizes, callers)
	}
}

func TestIdleCallGoesAlone(t *testing.T) {
	c := redistest.Client(t, srv)
	var rec recorder
	b := newBatcher(t, c, Options{Max: 16, OnBatch: rec.onBatch})
	key := redistest.Prefix(t) + "n"
	// Loaded, so that no call needs a NOSCRIPT retry.
	if err := echo.Load(context.Background(), c).Err(); err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		got, err := b.Run(context.Background(), echo, []string{key}, i)
		if err != nil || got != strconv.Itoa(i) {
			t.Fatalf("call %d: %v, %v", i, got, err)
		}
	}
	sizes, _, _ := rec.snapshot()
	if fmt.Sprint(sizes) != "[1 1 1 1 1]" {
		t.Errorf("pipelines %v, want five of one command", sizes)
	}
}

// TestCloseStopsGoroutines is not parallel: goleak looks at every goroutine.
func TestCloseStopsGoroutines(t *testing.T) {
	c := redistest.Client(t, srv)
	ignore := []goleak.Option{
		goleak.IgnoreCurrent(),
		goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).tryDial"),
	}
	b := New(c, Options{Flushers: 3})
	if _, err := b.Run(context.Background(), echo, []string{redistest.Prefix(t) + "n"}, 1); err != nil {
		t.Fatal(err)
	}
	b.Close()
	b.Close()
	if _, err := b.Run(context.Background(), echo, []string{redistest.Prefix(t) + "n"}, 1); !errors.Is(err, ErrClosed) {
		t.Errorf("Run after Close: %v, want ErrClosed", err)
	}
	goleak.VerifyNone(t, ignore...)
}

func BenchmarkBatch(b *testing.B) {
	if srv == nil {
		b.Skip("no redis-server on PATH")
	}
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, PoolSize: 64, MaxRetries: -1})
	defer c.Close()
	key := "bench:batch"
	for _, bc := range []struct {
		name string
		run  func(ctx context.Context, i int) (any, error)
	}{
		{"plain", func(ctx context.Context, i int) (any, error) {
			return echo.Run(ctx, c, []string{key}, i).Result()
		}},
		{"batched", nil},
	} {
		b.Run(bc.name, func(b *testing.B) {
			run := bc.run
			var pipelines, commands atomic.Int64
			if run == nil {
				bt := New(c, Options{Max: 16, Flushers: 2, OnBatch: func(n int, _ bool) {
					pipelines.Add(1)
					commands.Add(int64(n))
				}})
				defer bt.Close()
				run = func(ctx context.Context, i int) (any, error) { return bt.Run(ctx, echo, []string{key}, i) }
			}
			// About 50 goroutines whatever GOMAXPROCS is.
			b.SetParallelism(max(1, 50/runtime.GOMAXPROCS(0)))
			b.RunParallel(func(pb *testing.PB) {
				ctx := context.Background()
				for pb.Next() {
					if _, err := run(ctx, 1); err != nil {
						b.Error(err)
						return
					}
				}
			})
			if p := pipelines.Load(); p > 0 {
				b.ReportMetric(float64(commands.Load())/float64(p), "calls/pipeline")
			}
		})
	}
}
