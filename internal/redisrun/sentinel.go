package redisrun

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// ErrSentinelNotFound is returned by StartSentinel when there is no
// redis-sentinel on PATH (on Debian: apt-get install redis-sentinel).
var ErrSentinelNotFound = errors.New("redis-sentinel not found on PATH")

// SentinelOptions tune StartSentinel.
type SentinelOptions struct {
	// Name is the name the primary is monitored as.
	Name string
	// Primary is the primary's host:port.
	Primary string
	// DownAfter is how long the primary may be silent before the sentinel
	// holds it down and fails over; 1s by default.
	DownAfter time.Duration
	// StartTimeout bounds the wait for the sentinel to monitor the primary;
	// 10s by default.
	StartTimeout time.Duration
}

// StartSentinel runs one redis-sentinel from PATH on a free loopback port,
// in a temporary directory, monitoring o.Primary with a quorum of one, and
// returns once it monitors it. Alone, it is the majority: it fails over by
// itself.
func StartSentinel(ctx context.Context, o SentinelOptions) (*Server, error) {
	path, err := exec.LookPath("redis-sentinel")
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrSentinelNotFound, err)
	}
	host, port, err := splitAddr(o.Primary)
	if err != nil {
		return nil, err
	}
	down := o.DownAfter
	if down <= 0 {
		down = time.Second
	}
	timeout := o.StartTimeout
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	pr := proc{ready: "+monitor master " + o.Name, conf: func(dir string, _ int) (string, error) {
		conf := filepath.Join(dir, "sentinel.conf")
		body := fmt.Sprintf("sentinel monitor %s %s %d 1\nsentinel down-after-milliseconds %s %d\nsentinel failover-timeout %s %d\n",
			o.Name, host, port, o.Name, down.Milliseconds(), o.Name, max(3*down, 2*time.Second).Milliseconds())
		return conf, os.WriteFile(conf, []byte(body), 0o600)
	}}
	var lastErr error
	for range 5 {
		srv, err := startOnce(ctx, path, nil, 0, 0, pr)
		if err == nil {
			return srv, nil
		}
		lastErr = err
		if !errors.Is(err, errAddrInUse) || ctx.Err() != nil {
			break
		}
	}
	return nil, lastErr
}

func splitAddr(addr string) (string, int, error) {
	host, p, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, err
	}
	port, err := strconv.Atoi(p)
	if err != nil {
		return "", 0, fmt.Errorf("port of %s: %w", addr, err)
	}
	return host, port, nil
}

// Kill ends the server at once (SIGKILL), as a crash would, and removes
// its directory. Safe to call twice, and after Stop.
func (s *Server) Kill() {
	s.once.Do(func() {
		if s.mini != nil {
			s.mini.Close()
			return
		}
		_ = s.cmd.Process.Kill()
		<-s.done
		os.RemoveAll(s.dir)
	})
}

// StartReplica starts a redis-server replicating primary (host:port) and
// returns once its link to the primary is up and the first sync is done.
func StartReplica(ctx context.Context, primary string, opts Options) (*Server, error) {
	host, port, err := splitAddr(primary)
	if err != nil {
		return nil, err
	}
	opts.Args = append(opts.Args, "--replicaof", host, strconv.Itoa(port))
	srv, err := Start(ctx, opts)
	if err != nil {
		return nil, err
	}
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, DialTimeout: DialTimeout, ReadTimeout: IOTimeout, MaxRetries: -1})
	defer c.Close()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for {
		info, err := c.Info(ctx, "replication").Result()
		if err == nil && strings.Contains(info, "master_link_status:up") {
			return srv, nil
		}
		select {
		case <-ctx.Done():
			srv.Stop()
			return nil, fmt.Errorf("replica of %s: the link is not up: %w", primary, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}
