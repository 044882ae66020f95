package race

import (
	"bufio"
	"net"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestParseMonitorLine: a line's time is in µs since the epoch (the
// reading itself is internal/monitor's).
func TestParseMonitorLine(t *testing.T) {
	t.Parallel()
	l, err := parseMonitorLine(`+1700000000.123456 [0 [::1]:5555] "get" "rl:{a}:naive\n"` + "\r\n")
	if err != nil || l.micros != 1_700_000_000_123_456 || l.addr != "[::1]:5555" || !slices.Equal(l.args, []string{"get", "rl:{a}:naive\n"}) {
		t.Fatalf("got %+v, %v", l, err)
	}
	if _, err := parseMonitorLine(`+1700000000.000010 [0 a:1] "get" "k`); err == nil || !strings.Contains(err.Error(), "unterminated") {
		t.Fatalf("err = %v, want one saying the argument is unterminated", err)
	}
}

// line makes a MONITOR line of client addr at µs.
func line(us int64, addr string, args ...string) monLine {
	return monLine{micros: 1_700_000_000_000_000 + us, addr: addr, args: args}
}

// TestScriptCommandsFollowTheirCall: a script's commands belong to the
// call next to them, whether Redis shows them after the call (7.0) or
// before it; another client's script is left out, even next to ours.
func TestScriptCommandsFollowTheirCall(t *testing.T) {
	t.Parallel()
	addrs := map[string]int{"a:1": 0, "a:2": 1}
	logs := func() []*clientLog {
		return []*clientLog{
			{cmds: []sent{{name: "evalsha", reply: "[1 4 0]"}}, decisions: []logged{{from: 0, to: 1, allowed: true}}},
			{cmds: []sent{{name: "evalsha", reply: "[0 0 9]"}}, decisions: []logged{{from: 0, to: 1}}},
		}
	}
	after := []monLine{
		line(0, "a:1", "evalsha", "x", "1", "k"), line(1, "lua", "ZCARD", "k"), line(2, "lua", "ZADD", "k", "1", "m"),
		{micros: 3}, line(4, "lua", "ZCARD", "other"), // another client's script after its call, left out
		line(5, "a:2", "evalsha", "x", "1", "k"), line(6, "lua", "ZCARD", "k"),
	}
	before := []monLine{
		line(1, "lua", "ZCARD", "k"), line(2, "lua", "ZADD", "k", "1", "m"), line(3, "a:1", "evalsha", "x", "1", "k"),
		line(4, "lua", "ZCARD", "k"), line(5, "a:2", "evalsha", "x", "1", "k"),
	}
	// Another client's call, then its script's commands, then ours.
	foreignFirst := append([]monLine{{micros: 0}, line(0, "lua", "ZCARD", "other")}, after...)
	wantAfter := []string{"g1 EVALSHA", "g1 ZCARD (script)", "g1 ZADD (script)", "g2 EVALSHA", "g2 ZCARD (script)"}
	wantBefore := []string{"g1 ZCARD (script)", "g1 ZADD (script)", "g1 EVALSHA", "g2 ZCARD (script)", "g2 EVALSHA"}
	for _, tc := range []struct {
		name string
		capt capture
		want []string
	}{
		{"after the call", capture{lines: after, order: scriptsAfterCall}, wantAfter},
		{"before the call", capture{lines: before, order: scriptsBeforeCall}, wantBefore},
		{"after the call, order guessed", capture{lines: after}, wantAfter},
		{"before the call, order guessed", capture{lines: before}, wantBefore},
		{"another client's script first", capture{lines: foreignFirst, order: scriptsAfterCall}, wantAfter},
	} {
		t.Run(tc.name, func(t *testing.T) {
			events, unmatched := buildTrace(tc.capt, addrs, logs())
			var got []string
			for _, e := range events {
				s := goroutine(e.g) + " " + e.name
				if e.script {
					s += " (script)"
				}
				got = append(got, s)
			}
			if !slices.Equal(got, tc.want) || unmatched != 0 {
				t.Fatalf("trace %q (%d unmatched), want %q", got, unmatched, tc.want)
			}
			ex := analyse(Explanation{Trial: Trial{Expected: 5}}, tc.capt, addrs, logs(), []string{"k"}, 5, 40)
			if ex.ScriptCalls != 2 || ex.Interleaved != 0 || ex.Admitted != 1 || ex.Reads != 2 || ex.StaleReads != 0 {
				t.Fatalf("calls %d, interleaved %d, admitted %d, reads %d, stale %d; want 2, 0, 1, 2, 0",
					ex.ScriptCalls, ex.Interleaved, ex.Admitted, ex.Reads, ex.StaleReads)
			}
		})
	}
}

// TestScriptAdmissions: a script call that admitted is an admission at
// its write of the count when the trace shows one, at the call when the
// script wrote nothing the trace shows; a call that denied is none.
func TestScriptAdmissions(t *testing.T) {
	t.Parallel()
	addrs := map[string]int{"a:1": 0, "a:2": 1, "a:3": 2}
	logs := []*clientLog{
		{cmds: []sent{{name: "evalsha", reply: "1"}}, decisions: []logged{{from: 0, to: 1, allowed: true}}},
		{cmds: []sent{{name: "evalsha", reply: "1"}}, decisions: []logged{{from: 0, to: 1, allowed: true}}},
		{cmds: []sent{{name: "evalsha", reply: "0"}}, decisions: []logged{{from: 0, to: 1}}},
	}
	lines := []monLine{
		line(0, "a:1", "evalsha", "x", "1", "k"), line(1, "lua", "ZCARD", "k"), line(2, "lua", "ZADD", "k", "1", "m"),
		line(3, "a:2", "evalsha", "x", "1", "k"), line(4, "lua", "ZCARD", "k"), // its write went elsewhere
		line(5, "a:3", "evalsha", "x", "1", "k"), line(6, "lua", "ZCARD", "k"),
	}
	ex := analyse(Explanation{Trial: Trial{Expected: 1}}, capture{lines: lines, order: scriptsAfterCall}, addrs, logs, []string{"k"}, 1, 40)
	var marks []string
	for _, e := range ex.Events {
		marks = append(marks, e.Mark)
	}
	if ex.Admitted != 2 || ex.OverAdmitted != 1 || !slices.Equal(marks, []string{"", "", "", "over", "", "", ""}) {
		t.Fatalf("admitted %d, over %d, marks %q; want 2, 1, the second call marked over", ex.Admitted, ex.OverAdmitted, marks)
	}
	if m := ex.Moments; len(m) != 2 || m[1].Kind != MomentOver || m[1].Write.Event != 3 || m[1].Read != nil {
		t.Fatalf("moments %+v; want the over-admission at the second call, with no read of its own", m)
	}
}

// TestMonitorRead: the reader skips what comes before the start marker,
// learns from it where scripts' commands stand, keeps the goroutines'
// lines and the scripts next to them, folds other clients' lines into one,
// stops at the end marker, and gives up (closing) past its bound.
func TestMonitorRead(t *testing.T) {
	t.Parallel()
	ours := `+1700000000.000100 [0 a:1] "evalsha" "x" "1" "k"`
	script := `+1700000000.000101 [0 lua] "ZCARD" "k"`
	other := `+1700000000.000102 [0 b:9] "get" "z"`
	call := `+1700000000.000001 [0 c:1] "eval" "` + startScript + `" "0" "s"`
	echo := `+1700000000.000002 [0 lua] "ECHO" "s"`
	plain := `+1700000000.000002 [0 c:1] "echo" "s"`
	end := `+1700000000.000200 [0 c:1] "echo" "e"`
	for _, tc := range []struct {
		name  string
		lines []string
		max   int
		order scriptOrder
		addrs []string // of the lines kept; "" for others folded
		full  bool
	}{
		// The second script run is kept, next to ours; buildTrace gives it
		// to the call before it: another client's.
		{"after the call", []string{ours, call, echo, ours, script, other, other, script, ours, end}, 10,
			scriptsAfterCall, []string{"a:1", "lua", "", "lua", "a:1"}, false},
		{"before the call", []string{echo, call, script, ours, end}, 10, scriptsBeforeCall, []string{"lua", "a:1"}, false},
		{"plain echo", []string{plain, ours, other, end}, 10, orderUnknown, []string{"a:1", ""}, false},
		{"full", []string{plain, ours, ours, ours, end}, 2, orderUnknown, []string{"a:1", "a:1"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			client, server := net.Pipe()
			defer server.Close()
			go func() {
				for _, l := range tc.lines {
					if _, err := server.Write([]byte(l + "\r\n")); err != nil {
						return // the reader closed: it is full
					}
				}
			}()
			m := &monitorConn{conn: client, rd: bufio.NewReader(client)}
			defer m.Close()
			_ = client.SetReadDeadline(time.Now().Add(5 * time.Second))
			c, err := m.read("s", "e", map[string]int{"a:1": 0}, tc.max)
			if err != nil {
				t.Fatal(err)
			}
			var addrs []string
			for _, l := range c.lines {
				addrs = append(addrs, l.addr)
			}
			if !slices.Equal(addrs, tc.addrs) || c.order != tc.order || c.full != tc.full {
				t.Fatalf("kept %q, order %d, full %v; want %q, %d, %v", addrs, c.order, c.full, tc.addrs, tc.order, tc.full)
			}
		})
	}
}

// TestNaiveTrace: two goroutines read 0 before either writes; with a limit
// of 1 the second INCR is the admission over it, based on a stale read.
func TestNaiveTrace(t *testing.T) {
	t.Parallel()
	addrs := map[string]int{"a:1": 0, "a:2": 1}
	logs := []*clientLog{
		{cmds: []sent{{name: "get", reply: "(nil)", hasCount: true}, {name: "incr", reply: "1", count: 1, hasCount: true}},
			decisions: []logged{{from: 0, to: 2, allowed: true}}},
		{cmds: []sent{{name: "get", reply: "(nil)", hasCount: true}, {name: "incr", reply: "2", count: 2, hasCount: true}},
			decisions: []logged{{from: 0, to: 2, allowed: true}}},
	}
	lines := []monLine{
		line(0, "a:1", "get", "k"), line(4, "a:2", "get", "k"), line(9, "a:1", "incr", "k"), line(12, "a:2", "incr", "k"),
	}
	ex := analyse(Explanation{Trial: Trial{Expected: 1}}, capture{lines: lines}, addrs, logs, []string{"k"}, 1, 40)
	if ex.Reads != 2 || ex.StaleReads != 1 || ex.Admitted != 2 || ex.OverAdmitted != 1 || len(ex.Moments) != 1 {
		t.Fatalf("reads %d, stale %d, admitted %d, over %d, %d moments; want 2, 1, 2, 1, 1",
			ex.Reads, ex.StaleReads, ex.Admitted, ex.OverAdmitted, len(ex.Moments))
	}
	m := ex.Moments[0]
	if m.Kind != MomentOver || m.Goroutine != "g2" || m.Read.Micros != 4 || m.OtherRead.Goroutine != "g1" ||
		m.OtherWrite.Micros != 9 || m.Write.Micros != 12 || *m.Write.Value != 2 || m.Admission != 2 || m.WritesBetween != 1 {
		t.Fatalf("moment %+v", m)
	}
	var marks []string
	for _, e := range ex.Events {
		marks = append(marks, e.Mark)
	}
	if !slices.Equal(marks, []string{"", "stale", "", "over"}) {
		t.Fatalf("marks %q", marks)
	}
}

func TestCutTrace(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		n         int
		important []int
		limit     int
		want      []int
	}{
		{"short", 5, []int{3}, 10, []int{0, 1, 2, 3, 4}},
		{"no moment", 10, nil, 3, []int{0, 1, 2}},
		{"around one", 100, []int{50}, 5, []int{48, 49, 50, 51, 52}},
		{"around two", 100, []int{10, 80}, 6, []int{9, 10, 11, 79, 80, 81}},
		{"at the edge", 100, []int{0}, 3, []int{0, 1, 2}},
		{"more than fit", 100, []int{5, 20, 40, 60}, 2, []int{5, 20}},
		{"odd room", 100, []int{50}, 4, []int{48, 49, 50, 51}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := cutTrace(tc.n, tc.important, tc.limit); !slices.Equal(got, tc.want) {
				t.Fatalf("cutTrace(%d, %v, %d) = %v, want %v", tc.n, tc.important, tc.limit, got, tc.want)
			}
		})
	}
}

// TestTraceOfStrangers: when the server showed the goroutines' commands
// under addresses other than those they were known by, nothing matches,
// and the explanation says so instead of reporting an empty race.
func TestTraceOfStrangers(t *testing.T) {
	t.Parallel()
	addrs := map[string]int{"a:1": 0}
	logs := []*clientLog{{cmds: []sent{{name: "get", reply: "(nil)", hasCount: true}, {name: "incr", reply: "1", count: 1, hasCount: true}},
		decisions: []logged{{from: 0, to: 2, allowed: true}}}}
	lines := []monLine{{micros: 0}} // what the capture keeps of other clients' lines
	ex := analyse(Explanation{Key: "k", Trial: Trial{Expected: 1, Admitted: 1}}, capture{lines: lines}, addrs, logs, []string{"k"}, 1, 40)
	if !strings.Contains(ex.Skipped, "showed none of the goroutines' commands") || ex.Commands != 0 || ex.Key != "k" || ex.Trial.Admitted != 1 {
		t.Fatalf("explanation %+v, want it skipped for want of the goroutines' commands", ex)
	}
}
