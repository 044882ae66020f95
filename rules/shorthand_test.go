package rules

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestShorthand(t *testing.T) {
	s, err := Shorthand{Limits: []string{"5/1s", "12/10s:gcra"}, KeyBy: "header:x-consumer-id", Algorithm: "token-bucket"}.Set()
	if err != nil {
		t.Fatal(err)
	}
	ls := s.Limits()
	if len(ls) != 2 || ls[0].ID != "per-1s" || ls[0].Algorithm != "token-bucket" || ls[0].Policy.Limit != 5 || ls[0].Policy.Window != time.Second ||
		ls[1].ID != "per-10s" || ls[1].Algorithm != "gcra" || ls[1].Policy.Window != 10*time.Second {
		t.Errorf("limits %v %v", ls[0], ls[1])
	}
	if s.Domain != ShorthandDomain || !s.Gateway() {
		t.Errorf("domain %q, gateway %v", s.Domain, s.Gateway())
	}
	// By header, else by address, as --key-by header:NAME always did.
	if got := ids(s.Match(Request{Header: hdr("X-Consumer-Id", "alice")})); !slices.Equal(got, []string{"per-1s", "per-10s"}) {
		t.Errorf("with the header: %v", got)
	}
	hits := s.Match(Request{RemoteAddress: "10.0.0.1"})
	if len(hits) != 2 || hits[0].Entries[0].Key != "remote_address" {
		t.Errorf("without the header: %+v", hits)
	}

	one, err := Shorthand{Limits: []string{"100/1m"}, KeyBy: "ip"}.Set()
	if err != nil {
		t.Fatal(err)
	}
	if l := one.Limits()[0]; l.ID != "default" || l.Algorithm != DefaultAlgorithm || l.TagKey() != "remote_address" {
		t.Errorf("one limit: %+v", l)
	}
	if again, _ := (Shorthand{Limits: []string{"100/1m"}, KeyBy: "ip"}).Set(); again.Version != one.Version {
		t.Error("one shorthand, two versions")
	}
}

// TestShorthandBurst: a burst on a limit, or nginx's rate, reads into the
// rules the shorthand stands for, for the limit's algorithm or the
// default one.
func TestShorthandBurst(t *testing.T) {
	s, err := Shorthand{Limits: []string{"10r/s:gcra:burst=6", "100/1m:burst=150"}, KeyBy: "ip", Algorithm: "token-bucket"}.Set()
	if err != nil {
		t.Fatal(err)
	}
	ls := s.Limits()
	if len(ls) != 2 || ls[0].Algorithm != "gcra" || ls[0].Policy.Limit != 10 || ls[0].Policy.Window != time.Second || ls[0].Policy.Burst != 6 ||
		ls[1].Algorithm != "token-bucket" || ls[1].Policy.Burst != 150 {
		t.Fatalf("limits %+v %+v", ls[0].Policy, ls[1].Policy)
	}
	if got := ls[0].String(); !strings.HasSuffix(got, "a burst of 6, then 10 per 1s (gcra)") {
		t.Errorf("described as %q", got)
	}
	if got := s.Summary(); got != "2 limits: per-1s 10 per 1s (gcra, burst 6), per-1m 100 per 1m0s (token-bucket, burst 150)" {
		t.Errorf("summary %q", got)
	}
}

func TestShorthandMistakes(t *testing.T) {
	for _, tc := range []struct {
		s            Shorthand
		field, inMsg string
	}{
		{Shorthand{Limits: []string{"5/1s", "10/1000ms"}, KeyBy: "ip"}, "Limits", "5/1s and 10/1000ms are two limits on one window (1s): keep one"},
		{Shorthand{Limits: []string{"5/1s", "5/1s"}, KeyBy: "ip"}, "Limits", "two limits on one window"},
		{Shorthand{Limits: []string{"5/1s:gcra", "6/1s"}, KeyBy: "ip"}, "Limits", "two limits on one window"},
		{Shorthand{Limits: []string{"5/1s:leaky"}, KeyBy: "ip"}, "Limits", `"5/1s:leaky": "leaky" is not an algorithm`},
		{Shorthand{Limits: []string{"5/1s:naive"}, KeyBy: "ip"}, "Limits", `"naive" is not an algorithm`},
		{Shorthand{Limits: []string{"0/1s"}, KeyBy: "ip"}, "Limits", "limit must be at least 1"},
		{Shorthand{Limits: []string{"5"}, KeyBy: "ip"}, "Limits", "want requests/window"},
		{Shorthand{Limits: []string{"5/9000h"}, KeyBy: "ip"}, "Limits", "at most a year"},
		{Shorthand{KeyBy: "ip"}, "Limits", "none given"},
		{Shorthand{Limits: []string{"5/1s"}, KeyBy: "cookie:x"}, "KeyBy", `unknown key "cookie:x"`},
		{Shorthand{Limits: []string{"5/1s"}, KeyBy: "header:"}, "KeyBy", "is not a header name"},
		{Shorthand{Limits: []string{"5/1s"}, KeyBy: "ip", Algorithm: "lua"}, "Algorithm", `"lua" is not an algorithm`},
		{Shorthand{Limits: []string{"10/1s:burst=6"}, KeyBy: "ip"}, "Limits",
			`"10/1s:burst=6": burst is for token-bucket and gcra, and the algorithm is sliding-log: name one, as in 10/1s:gcra:burst=6`},
		{Shorthand{Limits: []string{"10/1s:fixed-window:burst=6"}, KeyBy: "ip"}, "Limits", "fixed-window has none"},
		{Shorthand{Limits: []string{"10/1s:gcra:burst=0"}, KeyBy: "ip"}, "Limits", "burst must be at least 1 (got 0)"},
		{Shorthand{Limits: []string{"10/s"}, KeyBy: "ip"}, "Limits", `the window "s" needs a number: a window such as 1s`},
	} {
		_, err := tc.s.Set()
		var e *Error
		if !errors.As(err, &e) || e.Field != tc.field || !strings.Contains(e.Message, tc.inMsg) || e.File != "" {
			t.Errorf("%+v: got %v, want field %s and %q", tc.s, err, tc.field, tc.inMsg)
		}
	}
}
