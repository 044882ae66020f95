package batch

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/ratelab/ratelab/internal/redisrun/redistest"
	"github.com/ratelab/ratelab/internal/testwait"
)

// stall holds back the replies of the first hold pipelines of EVALSHAs
// until release is closed, as a slow Redis would: their commands have run,
// their callers do not know it yet. It counts the pipelines of EVALSHAs
// being sent or held at once, and the most ever.
type stall struct {
	hold    int
	release chan struct{}

	mu   sync.Mutex
	seen int // pipelines of EVALSHAs so far
	held int // now held
	out  int // now in the hook
	peak int // most ever in the hook at once
}

func newStall(hold int) *stall {
	return &stall{hold: hold, release: make(chan struct{})}
}

func (s *stall) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (s *stall) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (s *stall) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if len(cmds) == 0 || cmds[0].Name() != "evalsha" {
			return next(ctx, cmds) // a new connection's HELLO comes as a pipeline too
		}
		s.mu.Lock()
		s.seen++
		hold := s.seen <= s.hold
		s.out++
		s.peak = max(s.peak, s.out)
		s.mu.Unlock()
		err := next(ctx, cmds)
		if hold {
			s.mu.Lock()
			s.held++
			s.mu.Unlock()
			<-s.release
		}
		s.mu.Lock()
		s.out--
		s.mu.Unlock()
		return err
	}
}

// heldNow is how many pipelines have run in Redis and wait for release.
func (s *stall) heldNow() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.held
}

func (s *stall) peakOut() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.peak
}

// answer is one caller's reply.
type answer struct {
	val any
	err error
}

// runAsync runs echo with argument i on its own goroutine; its reply comes
// on the channel returned.
func runAsync(b *Batcher, key string, i int) <-chan answer {
	ch := make(chan answer, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		v, err := b.Run(ctx, echo, []string{key}, i)
		ch <- answer{v, err}
	}()
	return ch
}

func checkAnswer(t *testing.T, a answer, i int) {
	t.Helper()
	if a.err != nil || a.val != strconv.Itoa(i) {
		t.Errorf("caller %d: %v, %v", i, a.val, a.err)
	}
}

// TestHeldPipelineDoesNotHoldNewCalls: while every flusher's pipeline is
// out, its reply held back as a slow Redis would, a new call still goes
// out and is answered, before the held ones are. The 30 s bound of each
// call is a hang guard only: without pipelines started on demand, the new
// call waits for a release that comes only after it returns.
func TestHeldPipelineDoesNotHoldNewCalls(t *testing.T) {
	for _, flushers := range []int{1, 2} {
		t.Run("flushers="+strconv.Itoa(flushers), func(t *testing.T) {
			c := redistest.Client(t, srv)
			if err := echo.Load(context.Background(), c).Err(); err != nil {
				t.Fatal(err)
			}
			s := newStall(flushers)
			c.AddHook(s)
			b := newBatcher(t, c, Options{Max: 16, Flushers: flushers, MaxPipelines: flushers + 2})
			key := redistest.Prefix(t) + "n"
			var held []<-chan answer
			for i := range flushers {
				held = append(held, runAsync(b, key, i))
				testwait.Eventually(t, 30*time.Second, func() (bool, string) {
					n := s.heldNow()
					return n == i+1, strconv.Itoa(n) + " pipelines held, want " + strconv.Itoa(i+1)
				})
			}
			checkAnswer(t, <-runAsync(b, key, 100), 100)
			for i, ch := range held {
				select {
				case a := <-ch:
					t.Errorf("held caller %d answered before its reply was released: %v, %v", i, a.val, a.err)
				default:
				}
			}
			close(s.release)
			for i, ch := range held {
				checkAnswer(t, <-ch, i)
			}
		})
	}
}

// TestPipelinesInFlightAreBounded: with every reply held back and one call
// a pipeline, the calls waiting start flushers up to MaxPipelines and no
// further; once released, every call is answered, and Close leaves no
// goroutine behind. Not parallel: goleak looks at every goroutine.
func TestPipelinesInFlightAreBounded(t *testing.T) {
	ignore := []goleak.Option{
		goleak.IgnoreCurrent(),
		goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).tryDial"),
	}
	c := redistest.Client(t, srv)
	if err := echo.Load(context.Background(), c).Err(); err != nil {
		t.Fatal(err)
	}
	const bound, calls = 3, 10
	s := newStall(calls)
	c.AddHook(s)
	b := New(c, Options{Max: 1, Flushers: 1, MaxPipelines: bound})
	key := redistest.Prefix(t) + "n"
	var chans []<-chan answer
	for i := range calls {
		chans = append(chans, runAsync(b, key, i))
	}
	testwait.Eventually(t, 30*time.Second, func() (bool, string) {
		n := s.heldNow()
		return n == bound, strconv.Itoa(n) + " pipelines held, want " + strconv.Itoa(bound)
	})
	close(s.release)
	for i, ch := range chans {
		checkAnswer(t, <-ch, i)
	}
	if p := s.peakOut(); p != bound {
		t.Errorf("at most %d pipelines out at once, want %d (MaxPipelines)", p, bound)
	}
	b.Close()
	goleak.VerifyNone(t, ignore...)
}

// TestNoPipelineOnDemandWithinWait: calls that wait while every flusher's
// pipeline is out start no other pipeline until the newest out has been
// out Wait, or they have waited Wait: with Wait longer than the test, 200
// concurrent calls never have more pipelines out than Flushers, however
// many of them wait behind each pipeline.
func TestNoPipelineOnDemandWithinWait(t *testing.T) {
	t.Parallel()
	c := redistest.Client(t, srv)
	if err := echo.Load(context.Background(), c).Err(); err != nil {
		t.Fatal(err)
	}
	s := newStall(0)
	c.AddHook(s)
	b := newBatcher(t, c, Options{Max: 4, Flushers: 2, MaxPipelines: 64, Wait: time.Hour})
	key := redistest.Prefix(t) + "n"
	var chans []<-chan answer
	for i := range 200 {
		chans = append(chans, runAsync(b, key, i))
	}
	for i, ch := range chans {
		checkAnswer(t, <-ch, i)
	}
	if p := s.peakOut(); p > 2 {
		t.Errorf("%d pipelines out at once, want at most 2 (Flushers)", p)
	}
}
