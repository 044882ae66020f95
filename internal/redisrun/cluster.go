package redisrun

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Cluster is a private Redis Cluster of redis-server processes on loopback,
// every one a master with an even share of the 16,384 slots.
type Cluster struct {
	// Servers are the masters, in slot order.
	Servers []*Server
}

// Addrs lists the masters' addresses.
func (c *Cluster) Addrs() []string {
	addrs := make([]string, len(c.Servers))
	for i, s := range c.Servers {
		addrs[i] = s.Addr
	}
	return addrs
}

// Version is the servers' version.
func (c *Cluster) Version() string { return c.Servers[0].Version }

// Stop stops every server.
func (c *Cluster) Stop() {
	for _, s := range c.Servers {
		s.Stop()
	}
}

// StartCluster starts masters redis-server processes in cluster mode, gives
// each a contiguous range of slots, introduces them, and returns once every
// node reports the cluster state ok and knows every other node.
func StartCluster(ctx context.Context, masters int, opts Options) (*Cluster, error) {
	if masters < 1 {
		return nil, fmt.Errorf("a cluster needs at least one master (got %d)", masters)
	}
	c := &Cluster{}
	opts.Args = append(opts.Args, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
		"--cluster-node-timeout", "5000")
	opts.MaxPort = 65535 - 10000 // the cluster bus listens on port + 10000
	for range masters {
		s, err := Start(ctx, opts)
		if err != nil {
			c.Stop()
			return nil, err
		}
		c.Servers = append(c.Servers, s)
	}
	if err := c.form(ctx); err != nil {
		c.Stop()
		return nil, fmt.Errorf("cluster: %w", err)
	}
	return c, nil
}

func (c *Cluster) form(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	clients := make([]*redis.Client, len(c.Servers))
	for i, s := range c.Servers {
		clients[i] = redis.NewClient(&redis.Options{Addr: s.Addr, DialTimeout: 2 * time.Second, MaxRetries: -1})
		defer clients[i].Close()
	}
	const slots = 16384
	for i, cl := range clients {
		lo, hi := i*slots/len(clients), (i+1)*slots/len(clients)-1
		err := cl.Do(ctx, "CLUSTER", "ADDSLOTSRANGE", lo, hi).Err()
		if err != nil && strings.Contains(strings.ToLower(err.Error()), "unknown subcommand") {
			slots := make([]int, 0, hi-lo+1) // Redis before 7 has only ADDSLOTS
			for s := lo; s <= hi; s++ {
				slots = append(slots, s)
			}
			err = cl.ClusterAddSlots(ctx, slots...).Err()
		}
		if err != nil {
			return fmt.Errorf("addslots on %s: %w", c.Servers[i].Addr, err)
		}
	}
	// Distinct config epochs, as redis-cli --cluster create gives them:
	// nodes that all start at 0 settle their collisions by gossip for a
	// while, and a slot moved meanwhile can fall back to its old owner.
	for i, cl := range clients {
		if err := cl.Do(ctx, "CLUSTER", "SET-CONFIG-EPOCH", i+1).Err(); err != nil {
			return fmt.Errorf("set-config-epoch on %s: %w", c.Servers[i].Addr, err)
		}
	}
	for _, s := range c.Servers[1:] {
		host, port, _ := strings.Cut(s.Addr, ":")
		p, _ := strconv.Atoi(port)
		if err := clients[0].ClusterMeet(ctx, host, strconv.Itoa(p)).Err(); err != nil {
			return fmt.Errorf("meet %s: %w", s.Addr, err)
		}
	}
	// Readiness: every node sees every other and every slot served.
	want := "cluster_known_nodes:" + strconv.Itoa(len(clients))
	for i, cl := range clients {
		for {
			info, err := cl.ClusterInfo(ctx).Result()
			if err == nil && strings.Contains(info, "cluster_state:ok") && strings.Contains(info, want) {
				break
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("%s not ready: %w (last: %v)", c.Servers[i].Addr, ctx.Err(), firstLines(info, err))
			case <-time.After(20 * time.Millisecond):
			}
		}
	}
	return nil
}

func firstLines(info string, err error) string {
	if err != nil {
		return err.Error()
	}
	lines := strings.SplitN(info, "\n", 3)
	return strings.Join(lines[:min(2, len(lines))], " ")
}
