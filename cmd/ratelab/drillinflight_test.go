package main

import (
	"strings"
	"testing"
)

// TestDrillInFlightBadInput: each bad flag is refused with exit 2, naming
// the flag, before anything starts.
func TestDrillInFlightBadInput(t *testing.T) {
	for _, tc := range []struct {
		args []string
		flag string
	}{
		{[]string{"--in-flight", "0"}, "--in-flight"},
		{[]string{"--in-flight-lease", "10ms"}, "--in-flight-lease"},
		{[]string{"--upstream-delay", "3s"}, "--upstream-delay"},
		{[]string{"--engine", "rls"}, "--engine"},
		{[]string{"--consumers", "0"}, "--consumers"},
		{[]string{"--watch", "-1s"}, "--watch"},
	} {
		code, stdout, stderr := ratelab(t, append([]string{"drill", "in-flight"}, tc.args...)...)
		if code != exitUsage || !strings.Contains(stderr, tc.flag) || stdout != "" {
			t.Errorf("%v: exit %d, stderr %q, stdout %q; want 2 naming %s", tc.args, code, stderr, stdout, tc.flag)
		}
	}
}
