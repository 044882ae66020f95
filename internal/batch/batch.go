// Package batch sends concurrent script calls to Redis together: the calls
// waiting at one moment go out as one pipeline of EVALSHAs, so that many
// decisions share one round trip.
//
// A Batcher has a few flushers (Options.Flushers), each a goroutine that
// takes a waiting call, adds every other call already waiting (up to
// Options.Max) without waiting for more, and sends them as one go-redis
// pipeline. When a call waits while every flusher's pipeline is out, and
// either it has waited Options.Wait or the newest of those pipelines went
// out Wait ago or more, the batcher starts one more flusher for the calls
// waiting, up to Options.MaxPipelines in all; a flusher so started ends when
// it finds no call waiting. So behind a slow Redis a call goes out at once,
// or after at most Wait, not after a whole round trip, while a fast Redis,
// whose pipelines come back within Wait, gets full ones from the few
// flushers. Before it sends a pipeline that is not full, a flusher lets the
// goroutines that are ready to run go first (runtime.Gosched), and takes
// the calls they made meanwhile: Go's scheduler runs the flusher a call
// woke right after its caller parks, before the other requests already
// read, which would otherwise send most calls alone. When nothing else is
// ready to run, the yield returns at once: when idle, a call goes out alone
// with no added wait; under load, calls queue while the flushers are busy
// and the next pipelines are deeper.
//
// Each call keeps its own context and its own error. A caller whose context
// ends gets its context's error at once; its command, if not yet sent, is
// never sent, and if sent, is never sent again (it may have been counted).
// When some commands of a pipeline get NOSCRIPT, the batcher loads each of
// their scripts once and sends again only those commands.
//
// Every EVALSHA goes out marked never to be sent again once it may have run
// (internal/noreplay), whatever the client's MaxRetries and MaxRedirects:
// go-redis would otherwise send a pipeline again after a network error, and
// a Cluster client, when the first command of a node's pipeline got a
// retryable error (TRYAGAIN, CLUSTERDOWN, LOADING…), the whole of that
// node's pipeline, the calls that ran and were counted included. Such a
// call gets its error: it may have been counted, once.
//
// On a Cluster (a *redis.ClusterClient), go-redis splits each pipeline by
// slot and sends one pipeline to each node concurrently; a call that meets
// MOVED or ASK (its slot moved) was not run, and the client sends it on to
// the node named, up to MaxRedirects times.
package batch

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratelab/ratelab/internal/noreplay"
)

// ErrClosed is the error of a call made after Close, or still waiting when
// Close ran.
var ErrClosed = errors.New("batch: closed")

// Options configure a Batcher.
type Options struct {
	// Max is the most calls in one pipeline; 1 sends each call alone.
	// Default 16.
	Max int
	// Flushers is how many flushers run all the time, each with at most
	// one pipeline in flight, on its own connection. Default 1.
	Flushers int
	// MaxPipelines bounds the pipelines in flight at once, counting those
	// of the flushers started while every flusher's pipeline was out (see
	// the package comment); at most the client's pool size. Default, and
	// at least, Flushers: no flusher is started on demand.
	MaxPipelines int
	// Wait is how long a call waits for a flusher while every flusher's
	// pipeline is out before the batcher starts another (when MaxPipelines
	// allows). Default 1ms: longer than a pipeline takes in a Redis close
	// by, far shorter than a round trip to a slow one.
	Wait time.Duration
	// Timeout bounds one pipeline when no call in it has a deadline, and
	// caps the deadline of one that has. Default 5s.
	Timeout time.Duration
	// Join, when set, names the scripts (by SHA1) whose calls may go out as
	// one: such a script, given the KEYS and ARGV of several calls one
	// after the other, replies with the array of their replies in turn,
	// each what it would have been alone or an error of its own. The calls
	// of a pipeline that run one are sent as one EVALSHA, which Redis runs
	// once rather than once each; each call still gets its own reply. Only
	// where one call's keys may lie in any slot: never on a Cluster.
	Join func(sha string) bool
	// OnBatch, when set, is called with the number of commands of each
	// pipeline just before it is sent, and retry true for a pipeline that
	// sends again the commands that got NOSCRIPT. It runs on the flusher's
	// goroutine: it must be quick.
	OnBatch func(size int, retry bool)
}

// Batcher sends script calls in pipelines. It is safe for concurrent use.
// Close stops it.
type Batcher struct {
	client  redis.Cmdable
	opts    Options
	calls   chan *call
	done    chan struct{}
	stopped chan struct{}
	once    sync.Once
	wg      sync.WaitGroup

	mu      sync.Mutex
	closing bool      // Close has begun: no flusher starts
	running int       // flushers running
	out     int       // of them, with a pipeline in flight
	busy    time.Time // when the newest of those pipelines went out
}

type call struct {
	ctx context.Context
	sha string
	// script is what a NOSCRIPT reply loads; nil when the batcher does not
	// know the script (see Scripter), and then the caller gets NOSCRIPT.
	script *redis.Script
	keys   []string
	args   []any
	reply  chan result // buffered: the flusher never blocks on it
	taken  atomic.Bool // a flusher took it from the queue
}

type result struct {
	val any
	err error
}

// New starts a Batcher sending to client (a *redis.Client, a
// *redis.ClusterClient or any UniversalClient).
func New(client redis.Cmdable, opts Options) *Batcher {
	if opts.Max <= 0 {
		opts.Max = 16
	}
	if opts.Flushers <= 0 {
		opts.Flushers = 1
	}
	opts.MaxPipelines = max(opts.MaxPipelines, opts.Flushers)
	if opts.Wait <= 0 {
		opts.Wait = time.Millisecond
	}
	if opts.Timeout <= 0 {
		opts.Timeout = 5 * time.Second
	}
	b := &Batcher{
		client:  client,
		opts:    opts,
		calls:   make(chan *call, opts.Max*opts.MaxPipelines),
		done:    make(chan struct{}),
		stopped: make(chan struct{}),
		running: opts.Flushers,
	}
	b.wg.Add(opts.Flushers)
	for range opts.Flushers {
		go b.flusher(false)
	}
	go func() {
		b.wg.Wait()
		b.drain()
		close(b.stopped)
	}()
	return b
}

// Run runs script with keys and args as EVALSHA, in a pipeline with the
// other calls waiting at this moment, and returns its reply. It returns
// ctx's error as soon as ctx ends, and ErrClosed after Close.
func (b *Batcher) Run(ctx context.Context, script *redis.Script, keys []string, args ...any) (any, error) {
	return b.run(ctx, script.Hash(), script, keys, args)
}

func (b *Batcher) run(ctx context.Context, sha string, script *redis.Script, keys []string, args []any) (any, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	c := calls.Get().(*call)
	c.ctx, c.sha, c.script, c.keys, c.args = ctx, sha, script, keys, args
	select {
	case <-b.done:
		return nil, ErrClosed
	default:
	}
	select {
	case b.calls <- c:
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-b.done:
		return nil, ErrClosed
	}
	// waited fires every Wait while the call is still queued, when
	// flushers may be started on demand and every flusher's pipeline was
	// out as it queued; nil, it never fires. A flusher not out takes the
	// call with its next pipeline, at once when it waits for calls.
	var waited <-chan time.Time
	var t *time.Timer
	if b.opts.MaxPipelines > b.opts.Flushers && b.grow(false) {
		t = timers.Get().(*time.Timer)
		t.Reset(b.opts.Wait)
		defer func() {
			t.Stop()
			timers.Put(t)
		}()
		waited = t.C
	}
	for {
		select {
		case r := <-c.reply:
			// Answered: no flusher holds c any longer.
			*c = call{reply: c.reply}
			calls.Put(c)
			return r.val, r.err
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-b.stopped:
			return b.last(c)
		case <-waited:
			if c.taken.Load() {
				waited = nil
				continue
			}
			b.grow(true)
			t.Reset(b.opts.Wait)
		}
	}
}

// calls and timers are kept for the next Run: two allocations fewer a
// decision. A call goes back only once answered (a caller that gave up
// leaves its call to the flusher that may still answer it); a timer once
// stopped, and Reset before use (since Go 1.23 a stopped timer's channel
// holds no stale value).
var (
	calls  = sync.Pool{New: func() any { return &call{reply: make(chan result, 1)} }}
	timers = sync.Pool{New: func() any {
		t := time.NewTimer(time.Hour)
		t.Stop()
		return t
	}}
)

// last is the answer of a call whose Batcher has stopped: a call taken by a
// flusher is answered before stopped closes; one sent after the last drain
// never is.
func (b *Batcher) last(c *call) (any, error) {
	select {
	case r := <-c.reply:
		return r.val, r.err
	default:
		return nil, ErrClosed
	}
}

// Close stops the flushers after the pipelines in flight and answers the
// calls still waiting with ErrClosed. It returns once every goroutine of
// the Batcher has ended.
func (b *Batcher) Close() error {
	b.once.Do(func() {
		b.mu.Lock()
		b.closing = true
		b.mu.Unlock()
		close(b.done)
	})
	<-b.stopped
	return nil
}

// drain answers with ErrClosed the calls left in the queue after the
// flushers ended. A Run that enqueues later sees stopped closed.
func (b *Batcher) drain() {
	for {
		select {
		case c := <-b.calls:
			c.reply <- result{err: ErrClosed}
		default:
			return
		}
	}
}

// flusher sends the waiting calls in pipelines until Close. One started on
// demand also ends when it finds no call waiting.
func (b *Batcher) flusher(onDemand bool) {
	defer b.wg.Done()
	batch := make([]*call, 0, b.opts.Max)
	for {
		if onDemand {
			select {
			case c := <-b.calls:
				c.taken.Store(true)
				batch = append(batch[:0], c)
			case <-b.done:
				return
			default:
				if b.retire() {
					return
				}
				continue
			}
		} else {
			select {
			case c := <-b.calls:
				c.taken.Store(true)
				batch = append(batch[:0], c)
			case <-b.done:
				return
			}
		}
		if batch = b.fill(batch); len(batch) < b.opts.Max {
			runtime.Gosched()
			batch = b.fill(batch)
		}
		b.flush(batch)
		clear(batch)
	}
}

// grow starts one more flusher when calls wait, every flusher's pipeline is
// out, and fewer than MaxPipelines are: at once when the newest pipeline
// out went out Wait ago or more (Redis is slow now), else only for a call
// that has waited Wait itself. It reports whether calls still wait with
// every flusher's pipeline out.
func (b *Batcher) grow(waited bool) bool {
	if len(b.calls) == 0 {
		return false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closing || b.out < b.running {
		return false
	}
	if b.running >= b.opts.MaxPipelines || !waited && time.Since(b.busy) < b.opts.Wait {
		return true
	}
	b.running++
	// Close has not begun, so the flushers started by New still run and
	// the WaitGroup is above zero.
	b.wg.Add(1)
	go b.flusher(true)
	return false
}

// retire ends a flusher started on demand that found no call waiting,
// unless one was queued since: a caller that queued before retire took the
// lock is seen here, and one after sees this flusher gone and may start
// another.
func (b *Batcher) retire() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.calls) > 0 {
		return false
	}
	b.running--
	return true
}

// sent counts a pipeline in flight until its function returns.
func (b *Batcher) sent() func() {
	b.mu.Lock()
	b.out++
	b.busy = time.Now()
	b.mu.Unlock()
	return func() {
		b.mu.Lock()
		b.out--
		b.mu.Unlock()
	}
}

// fill adds to batch the calls waiting, up to Max, without waiting for
// more.
func (b *Batcher) fill(batch []*call) []*call {
	for len(batch) < b.opts.Max {
		select {
		case c := <-b.calls:
			c.taken.Store(true)
			batch = append(batch, c)
		default:
			return batch
		}
	}
	return batch
}

// flush sends the live calls of batch as one pipeline, then the ones that
// got NOSCRIPT once more after loading their scripts.
func (b *Batcher) flush(batch []*call) {
	live := b.live(batch)
	if len(live) == 0 {
		return
	}
	ctx, cancel := b.context(live)
	defer cancel()
	defer b.sent()()
	replies := b.exec(ctx, live, false)
	var again []*call
	var noScript error
	for i, c := range live {
		if err := replies[i].err; isNoScript(err) {
			again = append(again, c)
			noScript = err
			continue
		}
		c.reply <- replies[i]
	}
	if len(again) == 0 {
		return
	}
	loaded := map[string]error{}
	for _, c := range again {
		if _, ok := loaded[c.sha]; !ok && c.script != nil {
			loaded[c.sha] = c.script.Load(ctx, b.client).Err()
		}
	}
	retry := again[:0]
	for i, c := range again {
		err, ok := loaded[c.sha]
		switch {
		case !ok:
			c.reply <- result{err: noScript}
		case err != nil:
			c.reply <- result{err: err}
		default:
			retry = append(retry, again[i])
		}
	}
	retry = b.live(retry)
	if len(retry) == 0 {
		return
	}
	replies = b.exec(ctx, retry, true)
	for i, c := range retry {
		c.reply <- replies[i]
	}
}

// live answers the calls whose context has ended with its error, and
// returns the others, reusing calls' array.
func (b *Batcher) live(calls []*call) []*call {
	out := calls[:0]
	for _, c := range calls {
		if err := c.ctx.Err(); err != nil {
			c.reply <- result{err: err}
			continue
		}
		out = append(out, c)
	}
	return out
}

// context is the pipeline's: it ends at the latest deadline of its calls,
// and at most Timeout from now. It does not end with a caller's context:
// one caller giving up must not fail the others.
func (b *Batcher) context(calls []*call) (context.Context, context.CancelFunc) {
	limit := time.Now().Add(b.opts.Timeout)
	var latest time.Time
	for _, c := range calls {
		d, ok := c.ctx.Deadline()
		if !ok {
			latest = limit
			break
		}
		if d.After(latest) {
			latest = d
		}
	}
	if latest.After(limit) {
		latest = limit
	}
	return context.WithDeadline(context.Background(), latest)
}

// exec sends calls as one pipeline and returns their replies, in order.
func (b *Batcher) exec(ctx context.Context, calls []*call, retry bool) []result {
	sends := b.commands(ctx, calls)
	if b.opts.OnBatch != nil {
		b.opts.OnBatch(len(calls), retry)
	}
	pipe := b.client.Pipeline()
	for _, s := range sends {
		_ = pipe.Process(ctx, s.cmd) // queues it: no error
	}
	// Exec's error is its first command's; each command keeps its own.
	_, _ = pipe.Exec(ctx)
	out := make([]result, len(calls))
	for _, s := range sends {
		s.answer(out)
	}
	return out
}

// send is one EVALSHA of a pipeline: the call at one's own, or, joined,
// the calls at.
type send struct {
	cmd redis.Cmder
	one int
	at  []int
}

// Joined is one EVALSHA that carries several calls (Options.Join): a hook
// that counts decisions counts Calls of them, not one.
type Joined struct {
	noreplay.Cmd
	calls int
}

// Calls is how many calls the command carries.
func (j Joined) Calls() int { return j.calls }

// commands returns the EVALSHAs to send for calls: each call's own, but one
// for all the calls of a script that Options.Join names, when it has more
// than one.
func (b *Batcher) commands(ctx context.Context, calls []*call) []send {
	sends := make([]send, 0, len(calls))
	var by map[string][]int
	if b.opts.Join != nil && len(calls) > 1 {
		by = make(map[string][]int, 1)
		for i, c := range calls {
			if b.opts.Join(c.sha) {
				by[c.sha] = append(by[c.sha], i)
			}
		}
	}
	for i, c := range calls {
		at := by[c.sha]
		switch {
		case len(at) < 2:
			sends = append(sends, send{cmd: noreplay.EvalSha(ctx, c.sha, c.keys, c.args...), one: i})
		case at[0] == i:
			nk, na := 0, 0
			for _, k := range at {
				nk, na = nk+len(calls[k].keys), na+len(calls[k].args)
			}
			keys, args := make([]string, 0, nk), make([]any, 0, na)
			for _, k := range at {
				keys = append(keys, calls[k].keys...)
				args = append(args, calls[k].args...)
			}
			sends = append(sends, send{cmd: Joined{noreplay.EvalSha(ctx, c.sha, keys, args...), len(at)}, at: at})
		}
	}
	return sends
}

// answer sets in out the replies of the calls s carries: a lone call's
// own; for calls joined, each its element of the joined reply's array, or
// the joined call's error.
func (s send) answer(out []result) {
	cmd := s.cmd.(interface{ Result() (any, error) })
	val, err := cmd.Result()
	if s.at == nil {
		out[s.one] = result{val: val, err: err}
		return
	}
	replies, ok := val.([]any)
	if err == nil && (!ok || len(replies) != len(s.at)) {
		err = fmt.Errorf("batch: a joined call of %d replied %v", len(s.at), val)
	}
	for n, i := range s.at {
		switch {
		case err != nil:
			out[i] = result{err: err}
		default:
			if e, isErr := replies[n].(error); isErr {
				out[i] = result{err: e}
			} else {
				out[i] = result{val: replies[n]}
			}
		}
	}
}

// Result is the reply and the error.
func (r result) Result() (any, error) { return r.val, r.err }

func isNoScript(err error) bool {
	return err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT")
}
