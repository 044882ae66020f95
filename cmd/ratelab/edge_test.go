package main

import (
	"strings"
	"testing"

	"github.com/ratelab/ratelab/internal/redisrun/redistest"
)

// TestEdgeOpenRestyWithoutNginx: with no nginx on PATH, ratelab edge
// --engine openresty is refused with exit 2 naming the flag, and sends
// nothing to Redis.
func TestEdgeOpenRestyWithoutNginx(t *testing.T) {
	c := redistest.Client(t, srv)
	t.Setenv("PATH", t.TempDir())
	before := connections(t, c)
	code, _, stderr := ratelab(t, "edge", "--redis", srv.URL(), "--listen", "127.0.0.1:0", "--admin", "",
		"--upstream", "builtin", "--engine", "openresty")
	if code != exitUsage || !strings.Contains(stderr, "--engine openresty needs nginx") {
		t.Errorf("exit %d, stderr %q; want 2 and --engine naming the missing nginx", code, stderr)
	}
	if after := connections(t, c); after != before {
		t.Errorf("the server accepted connections (%s, then %s): something was sent", before, after)
	}
}
