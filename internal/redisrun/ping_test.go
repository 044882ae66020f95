package redisrun_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/ratelab/ratelab/internal/redisrun"
	"github.com/ratelab/ratelab/internal/testwait"
)

func start(t *testing.T, args ...string) *redisrun.Server {
	t.Helper()
	srv, err := redisrun.Start(context.Background(), redisrun.Options{Args: args})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	return srv
}

func opts(addr, password string) *redis.UniversalOptions {
	return &redis.UniversalOptions{Addrs: []string{addr}, Password: password, Protocol: 2,
		DialTimeout: 2 * time.Second, ReadTimeout: 2 * time.Second, MaxRetries: -1}
}

// TestPing: the version comes from INFO, "unknown" where INFO is refused,
// and the options' password is used and never shown.
func TestPing(t *testing.T) {
	needRedisServer(t)
	ctx := context.Background()
	t.Run("version", func(t *testing.T) {
		srv := start(t)
		v, err := redisrun.Ping(ctx, opts(srv.Addr, ""))
		if err != nil || v != srv.Version {
			t.Fatalf("Ping = %q, %v; want %q, the version the server logged", v, err, srv.Version)
		}
	})
	t.Run("info refused", func(t *testing.T) {
		srv := start(t, "--rename-command", "INFO", "")
		v, err := redisrun.Ping(ctx, opts(srv.Addr, ""))
		if err != nil || v != "unknown" {
			t.Fatalf("Ping = %q, %v; want unknown and no error", v, err)
		}
	})
	t.Run("password", func(t *testing.T) {
		srv := start(t, "--requirepass", "right-password")
		if v, err := redisrun.Ping(ctx, opts(srv.Addr, "right-password")); err != nil || v != srv.Version {
			t.Fatalf("right password: Ping = %q, %v; want %q", v, err, srv.Version)
		}
		_, err := redisrun.Ping(ctx, opts(srv.Addr, "wrong-password"))
		if err == nil || !strings.Contains(err.Error(), "Redis at "+srv.Addr+" refused ratelab's credentials") || strings.Contains(err.Error(), "wrong-password") {
			t.Fatalf("wrong password: %v; want an error naming %s and not the password", err, srv.Addr)
		}
	})
	t.Run("cancelled", func(t *testing.T) {
		srv := start(t)
		ctx, cancel := context.WithCancel(ctx)
		cancel()
		if _, err := redisrun.Ping(ctx, opts(srv.Addr, "")); !errors.Is(err, context.Canceled) {
			t.Fatalf("Ping with a cancelled context: %v, want context.Canceled", err)
		}
	})
}

// TestPingRefused: a closed port is an error that names the address and
// wraps the refusal, and leaves nothing running once go-redis's own dial
// retry has given up.
func TestPingRefused(t *testing.T) {
	needRedisServer(t)
	srv := start(t)
	srv.Stop()
	_, err := redisrun.Ping(context.Background(), opts(srv.Addr, ""))
	if err == nil || !strings.HasPrefix(err.Error(), "cannot reach Redis at "+srv.Addr+": ") || !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("Ping(%s) after Stop: %v; want cannot reach %s wrapping ECONNREFUSED", srv.Addr, err, srv.Addr)
	}
	// go-redis retries a failed dial from a goroutine that sleeps a second
	// between tries and ends at the first try after the client was closed:
	// wait for it, then nothing may be left.
	testwait.Eventually(t, 20*time.Second, func() (bool, string) {
		err := goleak.Find()
		return err == nil, fmt.Sprintf("Ping left goroutines running: %v", err)
	})
}
