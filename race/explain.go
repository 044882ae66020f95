package race

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/errgroup"

	"github.com/ratelab/ratelab/algorithms"
	"github.com/ratelab/ratelab/internal/randid"
	"github.com/ratelab/ratelab/internal/redisrun"
	"github.com/ratelab/ratelab/internal/roundtrip"
)

// Limits on an explanation.
const (
	// DefaultExplainLines is how many commands of a trace an explanation
	// keeps when Config.ExplainLines is 0.
	DefaultExplainLines = 40
	// MaxExplainLines bounds Config.ExplainLines.
	MaxExplainLines = 10_000
	// MaxExplainConcurrency bounds the goroutines of an explained trial:
	// each has a connection of its own, beside the race's pool.
	MaxExplainConcurrency = 1_000
	// MaxExplainEvents bounds the commands a trace may hold; a longer one
	// is given up, and the explanation says so.
	MaxExplainEvents = 1_000_000
	// maxMoments bounds the moments an explanation describes one by one;
	// its counts cover them all.
	maxMoments = 50
	// MaxLaneCommands bounds the commands an explanation's lanes hold.
	MaxLaneCommands = 20_000
)

// Explanation is one more trial of a limiter, run with a MONITOR connection
// open on the server that holds its key: the commands of the trial in the
// order Redis executed them, which goroutine sent each and the reply it got,
// and the moments that make the race (or show it was prevented).
type Explanation struct {
	// Skipped says why there is no trace (the server refused MONITOR, or
	// does not have it); the fields below are then empty.
	Skipped string `json:"skipped,omitempty"`
	// Node is the server monitored: the one that holds the key.
	Node string `json:"node"`
	// Key is the explained trial's key.
	Key string `json:"key"`
	// Trial is the explained trial as the race counts a trial. It is not in
	// the limiter's totals, and MONITOR slowed the server while it ran: its
	// latency is not comparable.
	Trial Trial `json:"trial"`
	// InFlightTrial is, for an in-flight limiter, the explained trial in
	// place of Trial, as the race counts one.
	InFlightTrial *InFlightTrial `json:"in_flight_trial,omitempty"`
	// Decisions counts the decisions the goroutines made.
	Decisions int64 `json:"decisions"`
	// Commands counts the commands of the trial Redis executed, those a
	// script ran included, and Counts says how many of each ("GET": 100).
	Commands int            `json:"commands"`
	Counts   map[string]int `json:"counts"`
	// SpanMicros is from the first command to the last, on Redis's clock.
	SpanMicros int64 `json:"span_us"`
	// Reads counts the reads of the count (a GET, the ZCARD in an EXEC, a
	// script's first read of the key).
	Reads int64 `json:"reads"`
	// StaleReads counts the reads whose goroutine wrote (or tried to, with
	// an EXEC) after another goroutine had written: it acted on a count
	// that was no longer true.
	StaleReads int64 `json:"stale_reads"`
	// Admitted counts the admissions the trace shows: a write that stayed
	// (an INCR, a committed EXEC, a member not removed again), or a script's
	// reply that admitted.
	Admitted int64 `json:"admitted"`
	// OverAdmitted counts the admissions beyond what the trial's guarantee
	// allowed (Trial.Expected), in the order Redis executed them.
	OverAdmitted int64 `json:"over_admitted"`
	// AbortedExecs counts the EXECs Redis aborted because a WATCHed key changed.
	AbortedExecs int64 `json:"aborted_execs"`
	// Phantoms counts the members a transaction added for a request it then
	// denied and removed again; PhantomDenials the decisions denied while
	// such members were counted, that their count without them would have
	// admitted.
	Phantoms       int64 `json:"phantoms"`
	PhantomDenials int64 `json:"phantom_denials"`
	// ScriptCalls counts the decisions made by one script call, and
	// Interleaved those with another goroutine's command between the
	// script's read and its write (Redis runs a script whole: none).
	ScriptCalls int64 `json:"script_calls"`
	Interleaved int64 `json:"interleaved"`
	// Unmatched counts the commands of the trace whose reply could not be
	// matched to what the goroutine sent.
	Unmatched int `json:"unmatched"`
	// Moments are the marked moments, in the order of the trace, at most
	// 50; the counts above cover them all.
	Moments []Moment `json:"moments"`
	// Events is the trace, cut to Config.ExplainLines around the moments;
	// each event keeps its index in the whole trace, so that the cuts show.
	Events []Event `json:"events"`
	// Lanes is the whole trace by goroutine, in the goroutines' order, for
	// one swimlane each on a shared time axis: every command a goroutine
	// sent (the commands a script ran are in its call). It keeps the first
	// MaxLaneCommands commands of the trace; LanesCut counts those past it.
	Lanes    []Lane `json:"lanes,omitempty"`
	LanesCut int    `json:"lanes_cut,omitempty"`
}

// Lane is one goroutine's commands in a trace.
type Lane struct {
	Goroutine string        `json:"goroutine"`
	Commands  []LaneCommand `json:"commands"`
}

// Roles of a command in a lane.
const (
	RoleRead  = "read"  // it read the count
	RoleWrite = "write" // it raised or set the count
	RoleCall  = "call"  // it ran a script
	RoleOther = "other" // anything else: PTTL, WATCH, MULTI, EXEC, EXPIRE…
)

// LaneCommand is one command of a lane.
type LaneCommand struct {
	// Micros is the time since the trace's first command, on Redis's clock, in µs.
	Micros int64 `json:"us"`
	// Name is the command's name ("GET"), Role what it did to the count.
	Name string `json:"name"`
	Role string `json:"role"`
	// Mark is the event's mark: stale, over, aborted or phantom.
	Mark string `json:"mark,omitempty"`
}

// Event is one command of a trace.
type Event struct {
	// Index is the command's position in the whole trace, from 0.
	Index int `json:"index"`
	// Micros is the time since the trace's first command, on Redis's clock, in µs.
	Micros int64 `json:"us"`
	// Goroutine is the worker that sent it ("g17"); a script's commands
	// carry the goroutine that called the script.
	Goroutine string `json:"goroutine"`
	// Command is the command with its arguments, as Redis executed it.
	Command string `json:"command"`
	// Reply is the reply the goroutine got; empty where it saw none (a
	// script's own commands).
	Reply string `json:"reply"`
	// Script marks a command a script ran.
	Script bool `json:"script,omitempty"`
	// Mark says what the command is in the race: "stale" (a read acted on
	// after another goroutine's write), "over" (an admission beyond the
	// guarantee), "aborted" (an EXEC Redis refused), "phantom" (a member
	// added for a request then denied).
	Mark string `json:"mark,omitempty"`
}

// Moment kinds.
const (
	// MomentOver is an admission beyond what the guarantee allowed, with
	// the read it was based on.
	MomentOver = "over"
	// MomentAborted is an EXEC Redis aborted: another goroutine wrote the
	// key after this one's WATCH.
	MomentAborted = "aborted"
	// MomentPhantom is a member added for a request that was then denied,
	// counted by others until its ZREM.
	MomentPhantom = "phantom"
	// MomentAtomic is a script call: its read and its write with nothing
	// of another goroutine's between.
	MomentAtomic = "atomic"
)

// Moment is one marked moment of a trace; which steps it has depends on
// its Kind.
type Moment struct {
	// Kind is MomentOver, MomentAborted, MomentPhantom or MomentAtomic.
	Kind string `json:"kind"`
	// Goroutine is the worker the moment is about.
	Goroutine string `json:"goroutine"`
	// Call is its script call (atomic).
	Call *Step `json:"call,omitempty"`
	// Watch is its WATCH (aborted).
	Watch *Step `json:"watch,omitempty"`
	// Read is its read of the count.
	Read *Step `json:"read,omitempty"`
	// Write is its write: the INCR, the EXEC Redis aborted, the member its
	// transaction added, the script's write.
	Write *Step `json:"write,omitempty"`
	// Undo is the ZREM that removed a phantom member.
	Undo *Step `json:"undo,omitempty"`
	// OtherRead is another goroutine's read of the same count, made before
	// either wrote (over), when there was one.
	OtherRead *Step `json:"other_read,omitempty"`
	// OtherWrite is that goroutine's write (over), or the write that changed
	// the key after the WATCH (aborted).
	OtherWrite *Step `json:"other_write,omitempty"`
	// Admission is the admission's place in the order Redis executed them
	// (over), and Allowed how many the guarantee allowed.
	Admission int64 `json:"admission,omitempty"`
	Allowed   int64 `json:"allowed,omitempty"`
	// HeldAtOnce is, for an in-flight limiter's admission (over), how many
	// requests were surely held at once as it was admitted, itself included.
	HeldAtOnce int64 `json:"held_at_once,omitempty"`
	// WritesBetween counts other goroutines' writes between Read and Write
	// (over), and Between their commands of any kind (atomic).
	WritesBetween int `json:"writes_between"`
	Between       int `json:"between"`
	// Counted is how many other decisions read the count while a phantom
	// member was in it, and Denied how many of those were denied that
	// would have been admitted without the phantoms.
	Counted int `json:"counted,omitempty"`
	Denied  int `json:"denied,omitempty"`
}

// Step is one command a moment points at.
type Step struct {
	// Event is its index in the whole trace.
	Event int `json:"event"`
	// Micros is its time since the trace's first command, in µs.
	Micros int64 `json:"us"`
	// Goroutine is the worker that sent it.
	Goroutine string `json:"goroutine"`
	// Command is the command's name: GET, INCR, EXEC, ZADD.
	Command string `json:"command"`
	// Value is the count a read returned or a write left, when the reply
	// says it.
	Value *int64 `json:"value,omitempty"`
}

// explained is what explain needs of a limiter: its description, and how
// to build it on a client.
type explained struct {
	info  algorithms.Info
	build func(redis.UniversalClient) (algorithms.Limiter, error)
}

// explainSetup bounds what an explanation does besides its trial: opening
// the connections, mapping them, reading the end of the trace.
const explainSetup = 30 * time.Second

// explain runs one more trial of e at key, each goroutine on a connection
// of its own, with MONITOR open on the server that holds key from before
// the release to after the last reply, and explains what Redis executed.
// A server that refuses MONITOR gives an Explanation that says so.
func explain(ctx context.Context, client redis.UniversalClient, cfg Config, e explained, key string) (Explanation, error) {
	var workers []*worker
	var t Trial
	ex, tr, err := traceTrial(ctx, client, cfg, key,
		func(ctx context.Context, clients []*redis.Client, logs []*clientLog) (err error) {
			workers, err = limiterWorkers(ctx, clients, logs, e.build)
			return err
		},
		func(ctx context.Context) (err error) {
			t, err = runTrial(ctx, client, workers[0].lim, e.info, key, cfg, workers)
			return err
		})
	ex.Trial = t
	if err != nil || ex.Skipped != "" {
		return ex, err
	}
	keys := algorithms.KeysOf(workers[0].lim, key)
	return analyse(ex, tr.capt, tr.addrs, tr.logs, keys, cfg.Policy.Limit, cmp.Or(cfg.ExplainLines, DefaultExplainLines)), nil
}

// trace is what a monitor saw of a trial: the lines it captured, the
// goroutines' connections by the addresses the server saw, and what each
// goroutine sent.
type trace struct {
	capt  capture
	addrs map[string]int
	logs  []*clientLog
}

// traceTrial runs one trial with MONITOR open on the server that holds
// key, from before the release to after the last reply. prepare builds the
// goroutines' limiters on clients, one per goroutine, each of one
// connection to that server, recorded in its log; trial runs the trial.
// A server that cannot be traced gives an Explanation whose Skipped says
// why, and no error.
func traceTrial(ctx context.Context, client redis.UniversalClient, cfg Config, key string,
	prepare func(context.Context, []*redis.Client, []*clientLog) error, trial func(context.Context) error) (Explanation, trace, error) {
	ctx, cancel := context.WithTimeout(ctx, cfg.TrialTimeout+explainSetup)
	defer cancel()
	node, err := nodeOptions(ctx, client, cfg.Redis, key)
	if err != nil {
		return Explanation{}, trace{}, err
	}
	ex := Explanation{Node: node.Addr, Key: key}
	if node.Network == "unix" {
		ex.Skipped = "MONITOR shows every client of a Unix socket by the same address, so the goroutines cannot be told apart: explain over TCP"
		return ex, trace{}, nil
	}
	tag := randid.Hex(4)
	named := true
	logs, closeAll, err := tracedClients(ctx, node, cfg, tag, named, prepare)
	if redis.HasErrorPrefix(err, "NOPERM") {
		// A user without +client may not name its connections: they are
		// told apart by the addresses they were dialled from.
		closeAll()
		named = false
		logs, closeAll, err = tracedClients(ctx, node, cfg, tag, named, prepare)
	}
	defer closeAll()
	if err != nil {
		return ex, trace{}, err
	}
	controlName := ""
	if named {
		controlName = "ratelab-" + tag + "-control"
	}
	control := redis.NewClient(connOptions(node, controlName))
	defer control.Close()
	addrs, err := addresses(ctx, control, tag, logs)
	if err != nil {
		return ex, trace{}, err
	}
	// The monitor opens last, so that the server queues nothing for it
	// before its reader runs.
	mon, err := openMonitor(ctx, node, "ratelab-"+tag+"-monitor")
	var refused *monitorRefusedError
	if errors.As(err, &refused) {
		ex.Skipped = refused.Error()
		return ex, trace{}, nil
	}
	if err != nil {
		return ex, trace{}, err
	}
	defer mon.Close()

	start, end := "ratelab-"+tag+"-start", "ratelab-"+tag+"-end"
	_ = mon.conn.SetReadDeadline(time.Now().Add(cfg.TrialTimeout + explainSetup))
	var capt capture
	var readErr error
	read := make(chan struct{})
	go func() {
		defer close(read)
		capt, readErr = mon.read(start, end, addrs, MaxExplainEvents)
		if readErr != nil || capt.full {
			mon.Close() // nobody reads it any more: the server must not queue for it
		}
	}()
	// Whatever happens, the monitor is closed before traceTrial returns,
	// and the reader has stopped.
	defer func() { mon.Close(); <-read }()
	for _, l := range logs {
		l.reset()
	}
	if err := startMarker(ctx, control, start); err != nil {
		return ex, trace{}, err
	}
	if err := trial(ctx); err != nil {
		return ex, trace{}, err
	}
	if err := echo(ctx, control, end); err != nil {
		return ex, trace{}, err
	}
	// The end marker follows every command of the trial: the reader stops
	// on it, or at this deadline.
	_ = mon.conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	<-read
	mon.Close()
	switch {
	case capt.full:
		ex.Skipped = fmt.Sprintf("the trace passed %d commands: explain a smaller trial", MaxExplainEvents)
		return ex, trace{}, nil
	case readErr != nil:
		return ex, trace{}, readErr
	}
	return ex, trace{capt: capt, addrs: addrs, logs: logs}, nil
}

// nodeOptions are the options of one connection to the server that holds
// key: the one server, or the master of key's slot on a Cluster.
func nodeOptions(ctx context.Context, client redis.UniversalClient, base *redis.UniversalOptions, key string) (*redis.Options, error) {
	o := base.Simple()
	if cc, ok := client.(*redis.ClusterClient); ok {
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		n, err := cc.MasterForKey(ctx, key)
		if err != nil {
			return nil, fmt.Errorf("the node of %s: %w", key, err)
		}
		o.Addr = n.Options().Addr
	}
	o.DialTimeout = cmp.Or(o.DialTimeout, redisrun.DialTimeout)
	o.ReadTimeout = cmp.Or(o.ReadTimeout, redisrun.IOTimeout)
	o.WriteTimeout = cmp.Or(o.WriteTimeout, redisrun.IOTimeout)
	return o, nil
}

// connOptions are node's options for a client of exactly one connection,
// named name on the server, that never retries.
func connOptions(node *redis.Options, name string) *redis.Options {
	o := *node
	o.ClientName = name
	o.PoolSize = 1
	o.MinIdleConns = 0
	o.MaxIdleConns = 1
	o.MaxActiveConns = 1
	o.PipelinePoolSize = -1 // pipelines on the same connection
	o.MaxRetries = -1
	return &o
}

// tracedClients opens cfg.Concurrency clients of one connection each
// (named ratelab-<tag>-g<i> when named), each recorded in its log, hands
// them to prepare, and checks every connection. closeAll closes the
// clients.
func tracedClients(ctx context.Context, node *redis.Options, cfg Config, tag string, named bool,
	prepare func(context.Context, []*redis.Client, []*clientLog) error) ([]*clientLog, func(), error) {
	n := cfg.Concurrency
	logs := make([]*clientLog, n)
	clients := make([]*redis.Client, 0, n)
	closeAll := func() {
		for _, c := range clients {
			c.Close()
		}
	}
	for i := range n {
		logs[i] = &clientLog{}
		name := ""
		if named {
			name = fmt.Sprintf("ratelab-%s-%s", tag, goroutine(i))
		}
		c := redis.NewClient(connOptions(node, name))
		c.AddHook(recorder{log: logs[i]})
		roundtrip.Attach(c)
		if cfg.hook != nil {
			c.AddHook(cfg.hook)
		}
		clients = append(clients, c)
	}
	ctx, cancel := context.WithTimeout(ctx, explainSetup)
	defer cancel()
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(64)
	for _, c := range clients {
		g.Go(func() error { return c.Ping(gctx).Err() })
	}
	if err := g.Wait(); err != nil {
		return nil, closeAll, fmt.Errorf("opening %d traced connections: %w", n, err)
	}
	if err := prepare(ctx, clients, logs); err != nil {
		return nil, closeAll, err
	}
	return logs, closeAll, nil
}

// limiterWorkers builds a worker for each client, with its own limiter,
// recorded in its log.
func limiterWorkers(ctx context.Context, clients []*redis.Client, logs []*clientLog,
	build func(redis.UniversalClient) (algorithms.Limiter, error)) ([]*worker, error) {
	workers := make([]*worker, len(clients))
	for i, c := range clients {
		lim, err := build(c)
		if err != nil {
			return nil, err
		}
		workers[i] = &worker{lim: lim, log: logs[i]}
	}
	// The script is in the server's cache already; this makes sure.
	if l, ok := workers[0].lim.(algorithms.Loader); ok {
		if err := l.Load(ctx); err != nil {
			return nil, err
		}
	}
	return workers, nil
}

// goroutine names worker i in traces: g1, g2, …
func goroutine(i int) string { return "g" + strconv.Itoa(i+1) }

// addresses maps each worker's connection, by the address the server sees
// it from, to the worker: from CLIENT LIST by the names the connections
// gave themselves, or, where CLIENT LIST is refused, by the local
// addresses they were dialled from.
func addresses(ctx context.Context, control *redis.Client, tag string, logs []*clientLog) (map[string]int, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	list, listErr := control.ClientList(ctx).Result()
	addrs := map[string]int{}
	prefix := "ratelab-" + tag + "-g"
	for _, line := range strings.Split(list, "\n") {
		var addr, name string
		for _, kv := range strings.Fields(line) {
			if v, ok := strings.CutPrefix(kv, "addr="); ok {
				addr = v
			} else if v, ok := strings.CutPrefix(kv, "name="); ok {
				name = v
			}
		}
		if n, ok := strings.CutPrefix(name, prefix); ok {
			if i, err := strconv.Atoi(n); err == nil && i >= 1 && i <= len(logs) {
				addrs[addr] = i - 1
			}
		}
	}
	if len(addrs) == len(logs) {
		return addrs, nil
	}
	listed := len(addrs)
	clear(addrs)
	for i, l := range logs {
		if l.local != "" {
			addrs[l.local] = i
		}
	}
	if len(addrs) == len(logs) {
		return addrs, nil
	}
	if listErr != nil {
		return nil, fmt.Errorf("cannot tell which connection is which goroutine's: client list: %w", listErr)
	}
	return nil, fmt.Errorf("cannot tell which connection is which goroutine's: client list named %d of %d", listed, len(logs))
}

// startMarker marks the start of the trace with startScript, whose lines
// tell where the server shows a script's commands; where scripts may not
// run, with an ECHO.
func startMarker(ctx context.Context, c *redis.Client, marker string) error {
	sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := c.Eval(sctx, startScript, nil, marker).Err(); err == nil {
		return nil
	}
	return echo(ctx, c, marker)
}

// echo sends a marker the monitor will see.
func echo(ctx context.Context, c *redis.Client, marker string) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := c.Echo(ctx, marker).Err(); err != nil {
		return fmt.Errorf("echo: %w", err)
	}
	return nil
}
