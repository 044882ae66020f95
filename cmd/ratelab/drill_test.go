package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ratelab/ratelab/drill"
	"github.com/ratelab/ratelab/internal/redisrun/redistest"
)

// TestDrillEngineWithoutNginx: with no nginx on PATH, an --engine that
// names openresty, alone or with go, is refused with exit 2 naming the
// flag before anything starts; left to its default, the drill runs the go
// engine and reports the openresty runs as skipped, saying why. PATH holds
// only a redis-server that notes each start.
func TestDrillEngineWithoutNginx(t *testing.T) {
	real, err := exec.LookPath("redis-server")
	if err != nil {
		if redistest.InCI() {
			t.Fatalf("under CI: %v", err)
		}
		t.Skip(err)
	}
	bin := t.TempDir()
	started := filepath.Join(t.TempDir(), "started")
	script := "#!/bin/sh\n: >> '" + started + "'\nexec '" + real + "' \"$@\"\n"
	if err := os.WriteFile(filepath.Join(bin, "redis-server"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", bin)
	short := []string{"drill", "--faults", "script-flush", "--on-redis-error", "open", "--consumers", "2",
		"--steady", "100ms", "--fault-duration", "100ms", "--after", "100ms", "--output", "json"}
	for _, engines := range []string{"go,openresty", "openresty", "openresty,go"} {
		t.Run(engines, func(t *testing.T) {
			os.Remove(started)
			code, stdout, stderr := ratelab(t, append(short, "--engine", engines)...)
			if code != exitUsage || !strings.Contains(stderr, "--engine names openresty") || !strings.Contains(stderr, "nginx") {
				t.Errorf("exit %d, stderr %q; want 2 and --engine naming openresty without nginx", code, stderr)
			}
			if stdout != "" {
				t.Errorf("printed a report: %q", stdout)
			}
			if _, err := os.Stat(started); err == nil {
				t.Fatalf("redis-server was started")
			}
		})
	}
	t.Run("default", func(t *testing.T) {
		os.Remove(started)
		code, stdout, stderr := ratelab(t, short...)
		if code != exitOK {
			t.Fatalf("exit %d: %s", code, stderr)
		}
		var rep drill.Report
		decodeJSON(t, stdout, &rep)
		if len(rep.Results) != 1 || rep.Results[0].Engine != "go" {
			t.Fatalf("ran %+v, want the go engine's one run", rep.Results)
		}
		if len(rep.Skipped) != 1 || rep.Skipped[0].Engine != "openresty" || !strings.Contains(rep.Skipped[0].Reason, "nginx") {
			t.Fatalf("skipped %+v, want the openresty run, for want of nginx", rep.Skipped)
		}
		if _, err := os.Stat(started); err != nil {
			t.Fatalf("the drill ran without the redis-server on PATH: %v", err)
		}
	})
}

// TestDrillBadBatch: a --redis-batch out of range is refused naming the
// flag, exit 2, before any redis-server starts.
func TestDrillBadBatch(t *testing.T) {
	for _, tc := range []struct{ value, want string }{
		{"0", "--redis-batch must be at least 1 (got 0)"},
		{"1025", "--redis-batch must be between 1 and 1024 (got 1025)"},
	} {
		t.Run(tc.value, func(t *testing.T) {
			code, stdout, stderr := ratelab(t, "drill", "--engine", "go", "--redis-batch", tc.value)
			if code != exitUsage || !strings.Contains(stderr, tc.want) || stdout != "" {
				t.Errorf("exit %d, stdout %q, stderr %q; want 2 and %q", code, stdout, stderr, tc.want)
			}
		})
	}
}
