package race_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratelab/ratelab/internal/redisrun"
	"github.com/ratelab/ratelab/internal/redisrun/redistest"
	"github.com/ratelab/ratelab/internal/testwait"
	"github.com/ratelab/ratelab/race"
)

// The tests of explanations do not run in parallel: each starts servers
// and a MONITOR, a load a small machine takes better alone. Go runs them
// before any parallel test.

// ownServer starts a redis-server for one test: a MONITOR sees, and slows,
// every command of its server, and the package's server is shared.
func ownServer(t *testing.T) *redisrun.Server {
	t.Helper()
	redistest.Client(t, srv) // skips without redis-server, fails under CI
	s, err := redisrun.Start(context.Background(), redisrun.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	return s
}

// explainOne races one limiter for a trial and explains it, keeping the
// whole trace.
func explainOne(t *testing.T, cfg race.Config) (race.Result, race.Explanation) {
	t.Helper()
	cfg.Trials = 1
	cfg.Explain = cfg.Limiters
	cfg.ExplainLines = race.MaxExplainLines
	rep, err := race.Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	r := rep.Results[0]
	if r.Explain == nil {
		t.Fatalf("%s: no explanation", r.Limiter)
	}
	ex := *r.Explain
	if ex.Skipped != "" {
		t.Fatalf("%s: explanation skipped: %s", r.Limiter, ex.Skipped)
	}
	return r, ex
}

// checkTrace asserts what every whole trace shows: every command of the
// goroutines and none other, in order, each reply matched, and the
// explanation's counts those of the trial it explains and of the key.
func checkTrace(t *testing.T, ex race.Explanation, concurrency int) {
	t.Helper()
	if ex.Unmatched != 0 {
		t.Errorf("%d commands matched nothing the goroutines sent", ex.Unmatched)
	}
	if ex.Decisions != int64(concurrency) || len(ex.Events) != ex.Commands {
		t.Errorf("%d decisions, %d events of %d commands; want %d decisions and every command", ex.Decisions, len(ex.Events), ex.Commands, concurrency)
	}
	if ex.Admitted != ex.Trial.Admitted || ex.Trial.StateVerified == nil || !*ex.Trial.StateVerified {
		t.Errorf("the trace shows %d admitted, the trial counted %d (its key verified: %v)", ex.Admitted, ex.Trial.Admitted, ptr(ex.Trial.StateVerified))
	}
	if want := max(ex.Trial.Admitted-ex.Trial.Expected, 0); ex.OverAdmitted != want {
		t.Errorf("the trace shows %d over-admitted, the trial %d (%d admitted where %d allowed)",
			ex.OverAdmitted, want, ex.Trial.Admitted, ex.Trial.Expected)
	}
	goroutines := map[string]bool{}
	for i := range concurrency {
		goroutines[fmt.Sprintf("g%d", i+1)] = true
	}
	for i, e := range ex.Events {
		if e.Index != i || (i > 0 && e.Micros < ex.Events[i-1].Micros) || !goroutines[e.Goroutine] {
			t.Fatalf("event %d: %+v (the one before: %+v)", i, e, ex.Events[max(i-1, 0)])
		}
		if !e.Script && e.Reply == "" {
			t.Errorf("event %d (%s %s) has no reply", i, e.Goroutine, e.Command)
		}
	}
	checkLanes(t, ex, concurrency)
}

// checkLanes: the lanes hold, goroutine by goroutine and in order, every
// command of the trace a goroutine sent, as the whole trace has it.
func checkLanes(t *testing.T, ex race.Explanation, concurrency int) {
	t.Helper()
	want := map[string][]race.LaneCommand{}
	for _, e := range ex.Events {
		if e.Script {
			continue
		}
		name, _, _ := strings.Cut(e.Command, " ")
		want[e.Goroutine] = append(want[e.Goroutine], race.LaneCommand{Micros: e.Micros, Name: name, Mark: e.Mark})
	}
	if len(ex.Lanes) != len(want) || len(ex.Lanes) != concurrency || ex.LanesCut != 0 {
		t.Fatalf("%d lanes (%d commands cut) for %d goroutines that sent commands, %d raced", len(ex.Lanes), ex.LanesCut, len(want), concurrency)
	}
	roles := map[string]int{}
	var over int64
	for i, l := range ex.Lanes {
		if l.Goroutine != fmt.Sprintf("g%d", i+1) || len(l.Commands) != len(want[l.Goroutine]) {
			t.Fatalf("lane %d: %s with %d commands; the trace has %d", i, l.Goroutine, len(l.Commands), len(want[l.Goroutine]))
		}
		for j, c := range l.Commands {
			w := want[l.Goroutine][j]
			// A script call carries its commands' mark.
			if c.Micros != w.Micros || c.Name != w.Name || (c.Mark != w.Mark && (w.Mark != "" || c.Role != race.RoleCall)) {
				t.Fatalf("%s's command %d: %+v in its lane, %+v in the trace", l.Goroutine, j, c, w)
			}
			roles[c.Role]++
			if c.Mark == "over" {
				over++
			}
		}
	}
	if over != ex.OverAdmitted {
		t.Errorf("lanes: %d commands marked over, %d over-admitted", over, ex.OverAdmitted)
	}
	if int64(roles[race.RoleRead]) < ex.Reads-ex.ScriptCalls || int64(roles[race.RoleCall]) != ex.ScriptCalls {
		t.Errorf("lanes: %v by role; the trace has %d reads and %d script calls", roles, ex.Reads, ex.ScriptCalls)
	}
}

// count counts the events of ex whose command starts with name and which
// carry mark ("" for any).
func count(ex race.Explanation, name, mark string) int64 {
	var n int64
	for _, e := range ex.Events {
		if strings.HasPrefix(e.Command, name+" ") || e.Command == name {
			if mark == "" || e.Mark == mark {
				n++
			}
		}
	}
	return n
}

// TestExplainNaive: the explained naive trial shows the race. With every
// goroutine's GET before any INCR (a barrier between them), each INCR of
// the trace is an admission, as many as the trial counted and the key
// holds; those past the limit are marked, each based on a read of a count
// that another goroutine had also read before either wrote.
func TestExplainNaive(t *testing.T) {
	// At a limit of 1, two reads before the first INCR make the race.
	cfg := config(t, ownServer(t).Addr, "naive")
	cfg.Policy.Limit = 1
	r, ex := explainOne(t, race.WithReadBarrier(cfg))
	checkTrace(t, ex, 100)
	if ex.Counts["GET"] != 100 || ex.Counts["INCR"] != 100 || ex.Trial.Admitted != 100 || ex.Trial.State != 100 {
		t.Fatalf("%d GETs, %d INCRs; the trial admitted %d and its key holds %d; want 100 of each",
			ex.Counts["GET"], ex.Counts["INCR"], ex.Trial.Admitted, ex.Trial.State)
	}
	if ex.OverAdmitted != 100-ex.Trial.Expected || count(ex, "INCR", "over") != ex.OverAdmitted {
		t.Errorf("%d INCRs marked over, %d over-admitted, %d allowed", count(ex, "INCR", "over"), ex.OverAdmitted, ex.Trial.Expected)
	}
	lastGet, firstIncr := -1, len(ex.Events)
	for i, e := range ex.Events {
		switch {
		case strings.HasPrefix(e.Command, "GET "):
			lastGet = i
		case strings.HasPrefix(e.Command, "INCR "):
			firstIncr = min(firstIncr, i)
			// The INCRs past the limit are the admissions over it.
			if n, err := strconv.ParseInt(e.Reply, 10, 64); err != nil || (e.Mark == "over") != (n > ex.Trial.Expected) {
				t.Errorf("INCR by %s returned %s, marked %q, with %d allowed", e.Goroutine, e.Reply, e.Mark, ex.Trial.Expected)
			}
		}
	}
	if lastGet > firstIncr {
		t.Errorf("a GET at %d after the first INCR at %d: the barrier did not hold", lastGet, firstIncr)
	}
	if ex.StaleReads < ex.OverAdmitted || ex.Reads != 100 {
		t.Errorf("%d of %d reads stale, %d over-admitted: each admission over the limit was based on a stale read",
			ex.StaleReads, ex.Reads, ex.OverAdmitted)
	}
	pairs := 0
	for _, m := range ex.Moments {
		if m.Kind != race.MomentOver || m.OtherRead == nil {
			continue
		}
		// Both reads returned the same count before either wrote.
		if m.Read.Value == nil || m.OtherRead.Value == nil || *m.Read.Value != *m.OtherRead.Value || m.Read.Event >= m.OtherWrite.Event || m.OtherRead.Event >= m.Write.Event ||
			m.Read.Goroutine == m.OtherRead.Goroutine {
			t.Errorf("not a pair of stale reads: %+v", m)
		}
		pairs++
	}
	if pairs == 0 {
		t.Fatalf("%d over-admitted, and no moment shows two reads of one count", ex.OverAdmitted)
	}
	t.Logf("%s: %d of %d reads stale, %d admitted where %d allowed, %d pairs told; %d trials admitted %d",
		r.Limiter, ex.StaleReads, ex.Reads, ex.Trial.Admitted, ex.Trial.Expected, pairs, r.Trials, r.Admitted)
}

// TestExplainLua: one EVALSHA per decision, and between a call's read
// (ZCARD) and its write (ZADD) nothing but the same script's commands.
func TestExplainLua(t *testing.T) {
	_, ex := explainOne(t, config(t, ownServer(t).Addr, "lua"))
	checkTrace(t, ex, 100)
	if ex.Counts["EVALSHA"] != 100 || ex.Counts["EVAL"] != 0 || ex.ScriptCalls != 100 || ex.Interleaved != 0 {
		t.Fatalf("%d EVALSHA, %d EVAL, %d script calls, %d interleaved; want 100, 0, 100, 0",
			ex.Counts["EVALSHA"], ex.Counts["EVAL"], ex.ScriptCalls, ex.Interleaved)
	}
	if int64(ex.Counts["ZADD"]) != ex.Trial.Admitted || ex.Trial.State != 5 || ex.StaleReads != 0 || ex.OverAdmitted != 0 {
		t.Fatalf("%d ZADDs, the key holds %d, %d stale reads, %d over-admitted; want 5, 5, 0, 0",
			ex.Counts["ZADD"], ex.Trial.State, ex.StaleReads, ex.OverAdmitted)
	}
	calls := map[string]int{}
	for i, e := range ex.Events {
		if !e.Script {
			calls[e.Goroutine]++
			continue
		}
		if !strings.HasPrefix(e.Command, "ZCARD ") {
			continue
		}
		// From the read to the script's last command (its write among
		// them), only this script.
		for j := i + 1; j < len(ex.Events) && ex.Events[j].Script; j++ {
			if ex.Events[j].Goroutine != e.Goroutine {
				t.Fatalf("%s's script read at %d, then %s's command at %d", e.Goroutine, i, ex.Events[j].Goroutine, j)
			}
		}
	}
	for g, n := range calls {
		if n != 1 {
			t.Errorf("%s sent %d commands, want one EVALSHA", g, n)
		}
	}
	if len(calls) != 100 {
		t.Errorf("%d goroutines sent commands, want 100", len(calls))
	}
}

// TestExplainLeakingScript: a script that over-admits (its members
// collide, so its count stays at one) has each admission past the limit
// marked, on the script's write in the trace and on its call in the lanes.
func TestExplainLeakingScript(t *testing.T) {
	_, ex := explainOne(t, config(t, ownServer(t).Addr, "lua-shared-member"))
	// Its key holds one member for 100 admitted: the trial's state check
	// fails by design, so the lanes are checked alone.
	checkLanes(t, ex, 100)
	if ex.Unmatched != 0 || ex.OverAdmitted != 95 || ex.ScriptCalls != 100 {
		t.Fatalf("%d unmatched, %d over-admitted, %d script calls; want 0, 95 (100 admitted where 5 allowed) and 100",
			ex.Unmatched, ex.OverAdmitted, ex.ScriptCalls)
	}
}

// TestExplainWatchAndMulti: watch's aborted EXECs are the ones the client
// counted (with every goroutine's WATCH and read before any EXEC, all of
// the first attempts' but one), and no stale read was written on; multi's
// phantoms are its denied requests, each taken back by a ZREM.
func TestExplainWatchAndMulti(t *testing.T) {
	own := ownServer(t)
	_, ex := explainOne(t, race.WithReadBarrier(config(t, own.Addr, "watch")))
	checkTrace(t, ex, 100)
	if ex.AbortedExecs != ex.Trial.AbortedTransactions || count(ex, "EXEC", "aborted") != ex.AbortedExecs || ex.AbortedExecs < 99 {
		t.Errorf("%d aborted EXECs in the trace (%d marked), the client counted %d; want at least 99",
			ex.AbortedExecs, count(ex, "EXEC", "aborted"), ex.Trial.AbortedTransactions)
	}
	if ex.StaleReads > ex.AbortedExecs || ex.OverAdmitted != 0 || ex.Admitted != 5 {
		t.Errorf("%d stale reads, %d aborted, %d over, %d admitted: every stale read's EXEC aborts",
			ex.StaleReads, ex.AbortedExecs, ex.OverAdmitted, ex.Admitted)
	}
	for _, m := range ex.Moments {
		if m.Kind == race.MomentAborted && m.OtherWrite != nil && (m.OtherWrite.Event < m.Watch.Event || m.OtherWrite.Event > m.Write.Event) {
			t.Errorf("the write that aborted %s's EXEC is not between its WATCH and its EXEC: %+v", m.Goroutine, m)
		}
	}

	_, ex = explainOne(t, config(t, own.Addr, "multi"))
	checkTrace(t, ex, 100)
	if ex.Phantoms != int64(ex.Counts["ZREM"]) || ex.Phantoms != ex.Decisions-ex.Trial.Admitted || count(ex, "ZADD", "phantom") != ex.Phantoms {
		t.Errorf("%d phantoms, %d ZREMs, %d denied", ex.Phantoms, ex.Counts["ZREM"], ex.Decisions-ex.Trial.Admitted)
	}
}

// TestExplainRefused: a user whose ACL lacks +monitor gets the race and,
// for each explained limiter, the server's refusal instead of a trace.
func TestExplainRefused(t *testing.T) {
	c := redistest.Client(t, srv)
	ctx := context.Background()
	user := redistest.Prefix(t)
	if err := c.Do(ctx, "ACL", "SETUSER", user, "on", ">pw", "~*", "&*", "+@all", "-monitor").Err(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Do(context.Background(), "ACL", "DELUSER", user) })
	cfg := config(t, srv.Addr, "naive", "lua")
	cfg.Redis.Username, cfg.Redis.Password = user, "pw"
	cfg.Trials = 2
	cfg.Explain = []string{"naive", "lua"}
	rep, err := race.Run(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rep.Results {
		if r.Trials != 2 || r.Requests != 200 {
			t.Errorf("%s: %d trials, %d requests; the race is reported whatever MONITOR says", r.Limiter, r.Trials, r.Requests)
		}
		ex := r.Explain
		if ex == nil || !strings.Contains(ex.Skipped, "refused MONITOR") || !strings.Contains(ex.Skipped, "NOPERM") ||
			len(ex.Events) != 0 || ex.Commands != 0 {
			t.Errorf("%s: explanation %+v, want one skipped with the server's refusal", r.Limiter, ex)
		}
	}
}

// TestExplainWithoutClientCommands: a user that may MONITOR but not use
// CLIENT (no names, no CLIENT LIST) still gets the whole trace, its
// connections told apart by the addresses they were dialled from.
func TestExplainWithoutClientCommands(t *testing.T) {
	own := ownServer(t)
	c := redistest.Client(t, own)
	ctx := context.Background()
	user := redistest.Prefix(t)
	if err := c.Do(ctx, "ACL", "SETUSER", user, "on", ">pw", "~*", "&*", "+@all", "-client").Err(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Do(context.Background(), "ACL", "DELUSER", user) })
	cfg := config(t, own.Addr, "naive")
	cfg.Redis.Username, cfg.Redis.Password = user, "pw"
	_, ex := explainOne(t, cfg)
	checkTrace(t, ex, 100)
	if ex.Counts["GET"] != 100 {
		t.Errorf("%d GETs of 100 goroutines in the trace", ex.Counts["GET"])
	}
}

// TestExplainEmbedded: the embedded server has no MONITOR, and says so.
func TestExplainEmbedded(t *testing.T) {
	emb, err := redisrun.StartEmbedded()
	if err != nil {
		t.Fatal(err)
	}
	defer emb.Stop()
	cfg := config(t, emb.Addr, "naive")
	cfg.Trials = 1
	cfg.Explain = []string{"naive"}
	rep, err := race.Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if ex := rep.Results[0].Explain; ex == nil || !strings.Contains(ex.Skipped, "does not support MONITOR") {
		t.Fatalf("explanation %+v, want one skipped: no MONITOR", ex)
	}
}

// clients lists the clients of c's server whose name starts with prefix,
// and counts the monitors among all.
func clients(t *testing.T, c *redis.Client, prefix string) (named []string, monitors int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	list, err := c.ClientList(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(list, "\n") {
		for _, kv := range strings.Fields(line) {
			if name, ok := strings.CutPrefix(kv, "name="); ok && strings.HasPrefix(name, prefix) {
				named = append(named, name)
			}
			if flags, ok := strings.CutPrefix(kv, "flags="); ok && strings.Contains(flags, "O") {
				monitors++
			}
		}
	}
	return named, monitors
}

// TestExplainClosesItsConnections: after an explained run, and after one
// interrupted while its monitor is open, the server holds no monitor and
// none of the traced connections.
func TestExplainClosesItsConnections(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: a long test")
	}
	own := ownServer(t)
	c := redistest.Client(t, own)
	// gone waits, a bounded while, for the server to drop what was closed.
	gone := func(when string) {
		t.Helper()
		testwait.Eventually(t, 10*time.Second, func() (bool, string) {
			named, monitors := clients(t, c, "ratelab-")
			return len(named) == 0 && monitors == 0,
				fmt.Sprintf("%s: %d monitors and the connections %v are still open", when, monitors, named)
		})
	}

	cfg := config(t, own.Addr, "naive")
	cfg.Trials = 1
	cfg.Explain = []string{"naive"}
	if _, err := race.Run(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	gone("after the run")

	// A run of 1,000 goroutines opens 1,000 traced connections with its
	// monitor open: interrupt it then. A run may end before its monitor is
	// seen (a starved machine): a few more may be started.
	cfg.Concurrency = 1000
	cfg.RequestsPerWorker = 10
	for attempt := 1; ; attempt++ {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			_, err := race.Run(ctx, cfg)
			done <- err
		}()
		seen, ended := false, false
		for !seen && !ended {
			select {
			case err := <-done:
				if err != nil {
					t.Fatal(err)
				}
				ended = true
				continue
			default:
			}
			named, _ := clients(t, c, "ratelab-")
			for _, n := range named {
				seen = seen || strings.HasSuffix(n, "-monitor")
			}
		}
		cancel()
		if ended {
			if attempt == 5 {
				t.Fatal("5 runs ended before their monitor was seen")
			}
			continue
		}
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Fatalf("the interrupted run returned %v", err)
		}
		gone("after the interrupted run")
		return
	}
}

// TestExplainOnCluster: on a three-master Cluster the monitor is on the
// master of the key's slot, and the trace adds up as on one server.
func TestExplainOnCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: a long test")
	}
	cl := redistest.Cluster(t, srv)
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs()})
	defer cc.Close()
	for _, name := range []string{"naive", "lua"} {
		cfg := config(t, cl.Addrs()[0], name)
		cfg.Redis = redisOptions(cl.Addrs()...)
		cfg.Redis.IsClusterMode = true
		_, ex := explainOne(t, cfg)
		checkTrace(t, ex, 100)
		node, err := cc.MasterForKey(context.Background(), ex.Key)
		if err != nil {
			t.Fatal(err)
		}
		if ex.Node != node.Options().Addr {
			t.Errorf("%s: monitored %s, but %s holds %s", name, ex.Node, node.Options().Addr, ex.Key)
		}
	}
}
