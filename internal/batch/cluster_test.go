package batch

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratelab/ratelab/internal/redisrun"
	"github.com/ratelab/ratelab/internal/redisrun/redistest"
	"github.com/ratelab/ratelab/internal/testwait"
)

// counted returns its own argument and how many times it has run on its
// key, so that a reply routed to the wrong caller, and a call run twice or
// never, both show.
var counted = redis.NewScript(`return {ARGV[1], redis.call('INCR', KEYS[1])}`)

// nodeTrips records, per node address, the pipelines of EVALSHAs a cluster
// client sent there and the EVALSHAs in them.
type nodeTrips struct {
	mu        sync.Mutex
	pipelines map[string]int
	commands  map[string]int
	moved     int // replies to EVALSHAs, in pipelines or alone, that were MOVED
}

func (n *nodeTrips) hook(addr string) redis.Hook { return nodeHook{n, addr} }

type nodeHook struct {
	n    *nodeTrips
	addr string
}

func (h nodeHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h nodeHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		h.n.mu.Lock()
		defer h.n.mu.Unlock()
		h.n.count(cmd)
		return err
	}
}
func (h nodeHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		h.n.mu.Lock()
		defer h.n.mu.Unlock()
		evalsha := 0
		for _, c := range cmds {
			if h.n.count(c) {
				evalsha++
			}
		}
		if evalsha > 0 {
			h.n.pipelines[h.addr]++
			h.n.commands[h.addr] += evalsha
		}
		return err
	}
}

// count counts a MOVED reply to cmd, and reports whether cmd is an
// EVALSHA: a new connection's HELLO and CLIENT SETINFO come as a pipeline
// too. n.mu is held.
func (n *nodeTrips) count(cmd redis.Cmder) bool {
	if cmd.Name() != "evalsha" {
		return false
	}
	if e := cmd.Err(); e != nil && strings.HasPrefix(e.Error(), "MOVED") {
		n.moved++
	}
	return true
}

func (n *nodeTrips) snapshot() (pipelines, commands map[string]int, moved int) {
	n.mu.Lock()
	defer n.mu.Unlock()
	pipelines, commands = map[string]int{}, map[string]int{}
	for a, v := range n.pipelines {
		pipelines[a] = v
	}
	for a, v := range n.commands {
		commands[a] = v
	}
	return pipelines, commands, n.moved
}

// clusterClient is a gateway's client of cl (no retries, bounded calls),
// with trips counting each node's pipelines.
func clusterClient(t *testing.T, cl *redisrun.Cluster, trips *nodeTrips) *redis.ClusterClient {
	t.Helper()
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs(), Protocol: 2, MaxRetries: -1,
		DialTimeout: 5 * time.Second, ReadTimeout: 5 * time.Second, WriteTimeout: 5 * time.Second, ContextTimeoutEnabled: true,
		ClusterStateReloadInterval: time.Hour}) // it learns that a slot moved from MOVED alone
	c.OnNewNode(func(node *redis.Client) { node.AddHook(trips.hook(node.Options().Addr)) })
	t.Cleanup(func() { c.Close() })
	return c
}

// burst runs counted on every key of keys, calls times each, all at once
// through b; each caller must get its own argument back. It returns, per
// key, the highest count a reply showed.
func burst(t *testing.T, b *Batcher, keys []string, calls int) map[string]int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var (
		mu   sync.Mutex
		high = map[string]int64{}
		wg   sync.WaitGroup
		gate sync.WaitGroup
	)
	gate.Add(1)
	for i := range len(keys) * calls {
		key := keys[i%len(keys)]
		wg.Add(1)
		go func() {
			defer wg.Done()
			gate.Wait()
			v, err := b.Run(ctx, counted, []string{key}, i)
			if err != nil {
				t.Errorf("caller %d on %s: %v", i, key, err)
				return
			}
			reply, ok := v.([]any)
			if !ok || len(reply) != 2 || reply[0] != strconv.Itoa(i) {
				t.Errorf("caller %d on %s got %v, want its own argument back", i, key, v)
				return
			}
			n, _ := reply[1].(int64)
			mu.Lock()
			high[key] = max(high[key], n)
			mu.Unlock()
		}()
	}
	gate.Done()
	wg.Wait()
	return high
}

// TestCluster: on a Redis Cluster of 3 masters, one batch of calls on keys
// in slots of every node goes out as one pipeline per node, and every call
// runs exactly once and answers its own caller: when the batches are sent
// as they are; when one node has lost the script (NOSCRIPT on its calls
// alone: loaded once, only they sent again); and after a key's slot moved
// to another node behind the client's back (MOVED: the client follows it;
// the call runs once, on the new owner, with the key's count intact).
func TestCluster(t *testing.T) {
	cl := redistest.Cluster(t, srv)
	ctx := context.Background()
	trips := &nodeTrips{pipelines: map[string]int{}, commands: map[string]int{}}
	c := clusterClient(t, cl, trips)
	if err := c.ForEachShard(ctx, func(ctx context.Context, shard *redis.Client) error { return shard.Ping(ctx).Err() }); err != nil {
		t.Fatal(err)
	}
	rec := &recorder{}
	b := newBatcher(t, c, Options{Max: 64, Flushers: 1, OnBatch: rec.onBatch})
	if err := counted.Load(ctx, c).Err(); err != nil {
		t.Fatal(err)
	}
	prefix := redistest.Prefix(t)
	var keys []string
	owners := map[string]string{} // key -> node address
	for i := range 24 {
		key := fmt.Sprintf("%s{k%d}", prefix, i)
		node, err := c.MasterForKey(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, key)
		owners[key] = node.Options().Addr
	}
	if n := len(distinct(owners)); n != 3 {
		t.Fatalf("the keys fall on %d nodes, want all 3", n)
	}
	const calls = 4

	t.Run("one pipeline per node", func(t *testing.T) {
		before, sent0, _ := trips.snapshot()
		sizes0, first0, _ := rec.snapshot()
		high := burst(t, b, keys, calls)
		for _, k := range keys {
			if high[k] != calls {
				t.Errorf("%s counted %d calls, want %d: each call runs exactly once", k, high[k], calls)
			}
		}
		after, sent, _ := trips.snapshot()
		sizes, first, _ := rec.snapshot()
		if first-first0 != len(keys)*calls {
			t.Errorf("the batcher sent %d calls, want %d", first-first0, len(keys)*calls)
		}
		var nodes int
		for addr := range sent {
			nodes += sent[addr] - sent0[addr]
		}
		if nodes != len(keys)*calls {
			t.Errorf("the nodes got %d EVALSHAs in pipelines, want %d", nodes, len(keys)*calls)
		}
		// Each pipeline of the batcher reaches each node at most once.
		batches := len(sizes) - len(sizes0)
		for addr := range distinct(owners) {
			if d := after[addr] - before[addr]; d < 1 || d > batches {
				t.Errorf("node %s got %d pipelines for %d batches, want 1 to %d", addr, d, batches, batches)
			}
		}
	})

	t.Run("NOSCRIPT on one node", func(t *testing.T) {
		lost := owners[keys[0]]
		node := redis.NewClient(&redis.Options{Addr: lost, Protocol: 2})
		defer node.Close()
		if err := node.ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		_, _, retries0 := rec.snapshot()
		high := burst(t, b, keys, calls)
		for _, k := range keys {
			if high[k] != 2*calls {
				t.Errorf("%s counted %d calls, want %d", k, high[k], 2*calls)
			}
		}
		if _, _, retries := rec.snapshot(); retries-retries0 < 1 {
			t.Errorf("no retry pipeline after %s lost the script", lost)
		}
	})

	t.Run("MOVED", func(t *testing.T) {
		key := keys[0]
		from := owners[key]
		var to string
		for addr := range distinct(owners) {
			if addr != from {
				to = addr
				break
			}
		}
		moveSlot(t, cl, key, from, to)
		_, _, moved0 := trips.snapshot()
		high := burst(t, b, keys, calls)
		for _, k := range keys {
			if high[k] != 3*calls {
				t.Errorf("%s counted %d calls, want %d", k, high[k], 3*calls)
			}
		}
		if _, _, moved := trips.snapshot(); moved-moved0 < 1 {
			t.Errorf("no call met MOVED: the slot did not move behind the client's back")
		}
		dst := redis.NewClient(&redis.Options{Addr: to, Protocol: 2})
		defer dst.Close()
		if n, err := dst.Get(ctx, key).Int(); err != nil || n != 3*calls {
			t.Errorf("on the new owner %s holds %d (%v), want %d", key, n, err, 3*calls)
		}
	})
}

func distinct(m map[string]string) map[string]bool {
	out := map[string]bool{}
	for _, v := range m {
		out[v] = true
	}
	return out
}

// moveSlot moves key's slot, and the keys in it, from the master at from to
// the one at to, and waits until every master agrees.
func moveSlot(t *testing.T, cl *redisrun.Cluster, key, from, to string) {
	t.Helper()
	m, err := startMove(cl, key, from, to)
	if err != nil {
		t.Fatal(err)
	}
	defer m.close()
	if err := m.finish(); err != nil {
		t.Fatal(err)
	}
	m.wait(t, key)
}

// slotMove moves one slot from one master to another step by step, as
// redis-cli --cluster reshard does: startMove marks it importing and
// migrating, migrate moves some of its keys, finish the rest and gives the
// slot to its new owner. Its calls return errors, so that a hook may make
// them.
type slotMove struct {
	cl       *redisrun.Cluster
	clients  map[string]*redis.Client
	ids      map[string]string
	slot     int64
	from, to string
}

// moveTimeout bounds each step of a slotMove.
const moveTimeout = 10 * time.Second

// startMove marks key's slot importing on to and migrating on from: from
// still serves the keys it holds, and sends the client to to for the others.
func startMove(cl *redisrun.Cluster, key, from, to string) (*slotMove, error) {
	ctx, cancel := context.WithTimeout(context.Background(), moveTimeout)
	defer cancel()
	m := &slotMove{cl: cl, clients: map[string]*redis.Client{}, ids: map[string]string{}, from: from, to: to}
	for _, addr := range cl.Addrs() {
		c := redis.NewClient(&redis.Options{Addr: addr, Protocol: 2, MaxRetries: -1})
		m.clients[addr] = c
		id, err := c.Do(ctx, "cluster", "myid").Text()
		if err != nil {
			m.close()
			return nil, err
		}
		m.ids[addr] = id
	}
	var err error
	if m.slot, err = m.clients[from].ClusterKeySlot(ctx, key).Result(); err != nil {
		m.close()
		return nil, err
	}
	err = errors.Join(m.clients[to].Do(ctx, "cluster", "setslot", m.slot, "importing", m.ids[from]).Err(),
		m.clients[from].Do(ctx, "cluster", "setslot", m.slot, "migrating", m.ids[to]).Err())
	if err != nil {
		m.close()
		return nil, err
	}
	return m, nil
}

func (m *slotMove) close() {
	for _, c := range m.clients {
		c.Close()
	}
}

// migrate moves keys, of the slot, to its new owner.
func (m *slotMove) migrate(keys ...string) error {
	ctx, cancel := context.WithTimeout(context.Background(), moveTimeout)
	defer cancel()
	host, port, err := net.SplitHostPort(m.to)
	if err != nil {
		return err
	}
	for _, k := range keys {
		if err := m.clients[m.from].Migrate(ctx, host, port, k, 0, 5*time.Second).Err(); err != nil {
			return fmt.Errorf("migrate %s: %w", k, err)
		}
	}
	return nil
}

// finish migrates the keys left in the slot and gives it to its new owner,
// telling every master: from then on the old owner answers MOVED.
func (m *slotMove) finish() error {
	ctx, cancel := context.WithTimeout(context.Background(), moveTimeout)
	defer cancel()
	left, err := m.clients[m.from].ClusterGetKeysInSlot(ctx, int(m.slot), 1000).Result()
	if err != nil {
		return err
	}
	if err := m.migrate(left...); err != nil {
		return err
	}
	// The destination first: it takes the slot with a new config epoch, so
	// that no gossip of the source's older claim can take it back.
	for _, addr := range append([]string{m.to, m.from}, m.others()...) {
		if err := m.clients[addr].Do(ctx, "cluster", "setslot", m.slot, "node", m.ids[m.to]).Err(); err != nil {
			return fmt.Errorf("setslot on %s: %w", addr, err)
		}
	}
	return nil
}

// others are the masters neither giving nor taking the slot.
func (m *slotMove) others() []string {
	var addrs []string
	for _, addr := range m.cl.Addrs() {
		if addr != m.to && addr != m.from {
			addrs = append(addrs, addr)
		}
	}
	return addrs
}

// wait waits until every master agrees that key is on the slot's new
// owner: it serves the key, the others send the client to it.
func (m *slotMove) wait(t *testing.T, key string) {
	t.Helper()
	testwait.Eventually(t, moveTimeout, func() (bool, string) {
		ctx, cancel := context.WithTimeout(context.Background(), moveTimeout)
		defer cancel()
		for addr, c := range m.clients {
			err := c.Exists(ctx, key).Err()
			switch {
			case addr == m.to && err != nil:
				return false, fmt.Sprintf("the new owner %s answers %v", addr, err)
			case addr != m.to && (err == nil || !strings.HasSuffix(err.Error(), " "+m.to)):
				return false, fmt.Sprintf("%s answers %v, want MOVED to %s", addr, err, m.to)
			}
		}
		return true, ""
	})
}
