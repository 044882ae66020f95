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

// TestDrillEngineRLS: --engine rls drills ratelab rls through its gRPC
// service: a fault under open runs, and local, which the service does not
// have, is reported as skipped, saying why. An engine the drill does not
// know is refused with exit 2 naming the flag.
func TestDrillEngineRLS(t *testing.T) {
	if _, err := exec.LookPath("redis-server"); err != nil {
		if redistest.InCI() {
			t.Fatalf("under CI: %v", err)
		}
		t.Skip(err)
	}
	code, stdout, stderr := ratelab(t, "drill", "--engine", "rls", "--faults", "hang", "--on-redis-error", "closed,local",
		"--consumers", "2", "--steady", "300ms", "--fault-duration", "500ms", "--after", "500ms", "--output", "json")
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var rep drill.Report
	decodeJSON(t, stdout, &rep)
	if len(rep.Results) != 1 || rep.Results[0].Engine != drill.EngineRLS || rep.Results[0].OnRedisError != "closed" {
		t.Fatalf("ran %+v, want the rls service's one run, fail closed", rep.Results)
	}
	if r := rep.Results[0]; r.OverAdmitted != 0 || r.Errors == 0 || r.DetectMillis == nil {
		t.Errorf("hang, rls, fail closed: %d over-admitted, %d errors, detect %v; want none over and the fault seen", r.OverAdmitted, r.Errors, r.DetectMillis)
	}
	if len(rep.Skipped) != 1 || rep.Skipped[0].Engine != drill.EngineRLS || rep.Skipped[0].OnRedisError != "local" ||
		!strings.Contains(rep.Skipped[0].Reason, "no local limiter") {
		t.Fatalf("skipped %+v, want the rls run under local, for want of a local limiter", rep.Skipped)
	}

	code, stdout, stderr = ratelab(t, "drill", "--engine", "envoy", "--faults", "hang")
	if code != exitUsage || !strings.Contains(stderr, `--engine: "envoy": want go, openresty or rls`) || stdout != "" {
		t.Errorf("--engine envoy: exit %d, stderr %q; want 2 naming --engine", code, stderr)
	}
}
