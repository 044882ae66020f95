package redisrun_test

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/ratelab/ratelab/internal/field"
	"github.com/ratelab/ratelab/internal/redisrun"
	"github.com/ratelab/ratelab/internal/redisrun/redistest"
	"github.com/ratelab/ratelab/internal/testwait"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func needRedisServer(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		if redistest.InCI() {
			t.Fatal("no redis-server on PATH under CI")
		}
		t.Skip("no redis-server on PATH")
	}
}

func ping(t *testing.T, addr string) error {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr, DialTimeout: time.Second, MaxRetries: -1})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	return c.Ping(ctx).Err()
}

// TestStartStop: the server is ready when Start returns, on loopback, with
// its version read; Stop ends it and removes nothing but its own directory.
func TestStartStop(t *testing.T) {
	needRedisServer(t)
	srv, err := redisrun.Start(context.Background(), redisrun.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(srv.Addr, "127.0.0.1:") || srv.Addr == "127.0.0.1:6379" {
		t.Errorf("Addr = %s, want a free loopback port", srv.Addr)
	}
	if srv.Mode != redisrun.Ephemeral || srv.Version == "" {
		t.Errorf("Mode %q, Version %q", srv.Mode, srv.Version)
	}
	if err := ping(t, srv.Addr); err != nil {
		t.Fatalf("not ready when Start returned: %v", err)
	}
	srv.Stop()
	srv.Stop() // twice is fine
	if err := ping(t, srv.Addr); err == nil {
		t.Fatal("still answering after Stop")
	}
}

// TestTwoServers get different ports.
func TestTwoServers(t *testing.T) {
	needRedisServer(t)
	a, err := redisrun.Start(context.Background(), redisrun.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Stop()
	b, err := redisrun.Start(context.Background(), redisrun.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Stop()
	if a.Addr == b.Addr {
		t.Fatalf("both on %s", a.Addr)
	}
}

func TestStartErrors(t *testing.T) {
	_, err := redisrun.Start(context.Background(), redisrun.Options{Binary: "no-such-redis-server"})
	if !errors.Is(err, redisrun.ErrNotFound) {
		t.Errorf("missing binary: %v, want ErrNotFound", err)
	}
	needRedisServer(t)
	_, err = redisrun.Start(context.Background(), redisrun.Options{Args: []string{"--no-such-option", "1"}})
	if err == nil || !strings.Contains(err.Error(), "exited before it was ready") {
		t.Errorf("bad option: %v, want the server's own complaint", err)
	}
}

func TestEmbedded(t *testing.T) {
	srv, err := redisrun.StartEmbedded()
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	if srv.Mode != redisrun.Embedded || !strings.HasPrefix(srv.Version, "miniredis") {
		t.Errorf("Mode %q, Version %q", srv.Mode, srv.Version)
	}
	if err := ping(t, srv.Addr); err != nil {
		t.Fatal(err)
	}
}

func TestInCI(t *testing.T) {
	for v, want := range map[string]bool{"": false, "false": false, "0": false, "true": true, "1": true} {
		t.Setenv("CI", v)
		if got := redistest.InCI(); got != want {
			t.Errorf("CI=%q: InCI() = %v", v, got)
		}
	}
}

func TestCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: a long test")
	}
	needRedisServer(t)
	cl, err := redisrun.StartCluster(context.Background(), 3, redisrun.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Stop()
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs(), MaxRetries: -1})
	defer c.Close()
	ctx := context.Background()
	// Keys in many slots land on all three masters.
	for i := range 100 {
		if err := c.Set(ctx, "k"+strconv.Itoa(i), i, time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
	}
	var masters atomic.Int32 // ForEachMaster calls in parallel
	err = c.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error {
		if n.DBSize(ctx).Val() > 0 {
			masters.Add(1)
		}
		return nil
	})
	if err != nil || masters.Load() != 3 {
		t.Fatalf("keys on %d of 3 masters (%v)", masters.Load(), err)
	}
}

// TestSentinelFailover: a primary, a replica and a redis-sentinel; a
// target named by --redis-sentinel writes through the primary, and after
// the primary is killed, through the replica the sentinel promoted.
func TestSentinelFailover(t *testing.T) {
	needRedisServer(t)
	if testing.Short() {
		t.Skip("-short: a failover takes seconds")
	}
	t.Parallel()
	ctx := context.Background()
	primary, err := redisrun.Start(ctx, redisrun.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer primary.Kill()
	replica, err := redisrun.StartReplica(ctx, primary.Addr, redisrun.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer replica.Stop()
	sentinel, err := redisrun.StartSentinel(ctx, redisrun.SentinelOptions{Name: "drill", Primary: primary.Addr, DownAfter: 500 * time.Millisecond})
	if errors.Is(err, redisrun.ErrSentinelNotFound) && !redistest.InCI() {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer sentinel.Stop()
	target, err := redisrun.Open(ctx, redisrun.TargetConfig{Sentinel: "drill@" + sentinel.Addr})
	if err != nil {
		t.Fatal(err)
	}
	if target.Addr != "drill@"+sentinel.Addr || target.Mode != string(redisrun.External) {
		t.Fatalf("target %+v", target.Info)
	}
	c := redis.NewUniversalClient(target.Options)
	defer c.Close()
	if err := c.Set(ctx, "before", "1", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.Do(ctx, "WAIT", 1, 2000).Err(); err != nil {
		t.Fatal(err)
	}
	primary.Kill()
	testwait.Eventually(t, 20*time.Second, func() (bool, string) {
		wctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		err := c.Set(wctx, "after", "1", 0).Err()
		return err == nil, fmt.Sprintf("no write through the sentinel since the primary was killed: %v", err)
	})
	rc := redis.NewClient(&redis.Options{Addr: replica.Addr})
	defer rc.Close()
	if info := rc.Info(ctx, "replication").Val(); !strings.Contains(info, "role:master") || rc.Get(ctx, "before").Val() != "1" {
		t.Fatalf("the replica was not promoted with the data: %s", info)
	}
}

func TestSentinelConfig(t *testing.T) {
	for _, tc := range []struct {
		c     redisrun.TargetConfig
		field string
	}{
		{redisrun.TargetConfig{Sentinel: "m@127.0.0.1:26379,127.0.0.1:26380"}, ""},
		{redisrun.TargetConfig{Sentinel: "127.0.0.1:26379"}, "Sentinel"},
		{redisrun.TargetConfig{Sentinel: "m@127.0.0.1"}, "Sentinel"},
		{redisrun.TargetConfig{Sentinel: "m@127.0.0.1:26379", URL: "redis://x:1"}, "Sentinel"},
		{redisrun.TargetConfig{Sentinel: "m@127.0.0.1:26379", ClusterLocal: true}, "Sentinel"},
		{redisrun.TargetConfig{Sentinel: "m@127.0.0.1:26379", Insecure: true}, "Insecure"},
	} {
		o, err := tc.c.ClientOptions()
		var fe *field.Error
		switch {
		case tc.field == "" && (err != nil || o.MasterName != "m" || len(o.Addrs) != 2):
			t.Errorf("%+v: %+v, %v", tc.c, o, err)
		case tc.field != "" && (!errors.As(err, &fe) || fe.Field != tc.field):
			t.Errorf("%+v: %v, want an error in %s", tc.c, err, tc.field)
		}
	}
}

// TestURLWithoutScheme: an address given where a URL is wanted is refused
// with the URL it most likely meant, and never with its password.
func TestURLWithoutScheme(t *testing.T) {
	for _, tc := range []struct{ url, want string }{
		{"127.0.0.1:6379", `"127.0.0.1:6379": want a URL: redis://127.0.0.1:6379`},
		{"localhost:6379", `"localhost:6379": want a URL: redis://localhost:6379`},
		{"redis-1", `"redis-1": want a URL: redis://redis-1`},
		{"10.0.0.1:7000, 10.0.0.2:7000", `"10.0.0.1:7000, 10.0.0.2:7000": want a URL: redis://10.0.0.1:7000,redis://10.0.0.2:7000`},
		{"redis://10.0.0.1:7000,10.0.0.2:7000", `want a URL: redis://10.0.0.1:7000,redis://10.0.0.2:7000`},
		{"/run/redis.sock", `"/run/redis.sock": want a URL: unix:///run/redis.sock`},
		{":s3cret@10.0.0.1:6379", `"…@10.0.0.1:6379": want a URL: redis://…@10.0.0.1:6379`},
	} {
		err := redisrun.TargetConfig{URL: tc.url}.Validate()
		var fe *field.Error
		if !errors.As(err, &fe) || fe.Field != "URL" || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v; want an error in URL saying %q", tc.url, err, tc.want)
		}
		if err != nil && strings.Contains(err.Error(), "s3cret") {
			t.Errorf("%q: the password is in %q", tc.url, err)
		}
	}
	for _, ok := range []string{"redis://127.0.0.1:6379", "unix:///run/redis.sock", "rediss://h:1"} {
		if err := (redisrun.TargetConfig{URL: ok}).Validate(); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
}

// TestBadURLHidesPassword: a URL that does not parse is quoted without its
// password, in the reason too.
func TestBadURLHidesPassword(t *testing.T) {
	err := redisrun.TargetConfig{URL: "redis://u:s3cret@127.0.0.1:x"}.Validate()
	if err == nil || strings.Contains(err.Error(), "s3cret") || !strings.Contains(err.Error(), `invalid port ":x" after host`) {
		t.Fatalf("%v; want the reason without the password", err)
	}
}

// TestIsCluster: a Redis Cluster is named by IsClusterMode or by several
// addresses, never with a sentinel's MasterName; without one, go-redis
// builds a ClusterClient for exactly those options.
func TestIsCluster(t *testing.T) {
	for _, tc := range []struct {
		name string
		o    *redis.UniversalOptions
		want bool
	}{
		{"nil", nil, false},
		{"one address", &redis.UniversalOptions{Addrs: []string{"127.0.0.1:1"}}, false},
		{"one address in cluster mode", &redis.UniversalOptions{Addrs: []string{"127.0.0.1:1"}, IsClusterMode: true}, true},
		{"several addresses", &redis.UniversalOptions{Addrs: []string{"127.0.0.1:1", "127.0.0.1:2"}}, true},
		{"sentinels", &redis.UniversalOptions{Addrs: []string{"127.0.0.1:1", "127.0.0.1:2"}, MasterName: "m"}, false},
		{"sentinels in cluster mode", &redis.UniversalOptions{Addrs: []string{"127.0.0.1:1"}, MasterName: "m", IsClusterMode: true}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := redisrun.IsCluster(tc.o); got != tc.want {
				t.Fatalf("IsCluster is %t, want %t", got, tc.want)
			}
			if tc.o == nil || tc.o.MasterName != "" {
				return
			}
			c := redis.NewUniversalClient(tc.o)
			defer c.Close()
			if _, built := c.(*redis.ClusterClient); built != tc.want {
				t.Fatalf("go-redis builds a %T, which IsCluster (%t) does not say", c, tc.want)
			}
		})
	}
}
