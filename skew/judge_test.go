package skew

import (
	"slices"
	"testing"
	"time"

	"github.com/ratelab/ratelab/algorithms"
)

var t0 = time.UnixMilli(1_700_000_000_000) // an aligned edge of 1 s windows

// fl is a flight from a to b ms after t0.
func fl(a, b int64, allowed bool) flight {
	return flight{send: t0.Add(time.Duration(a) * time.Millisecond), reply: t0.Add(time.Duration(b) * time.Millisecond), allowed: allowed}
}

func TestOverAdmitted(t *testing.T) {
	p := algorithms.Policy{Limit: 2, Window: time.Second}
	for _, tc := range []struct {
		name string
		g    algorithms.Guarantee
		adm  []flight
		want int64
	}{
		{"three in a few ms", algorithms.SlidingWindow, []flight{fl(0, 1, true), fl(1, 2, true), fl(3, 4, true)}, 1},
		{"a window apart", algorithms.SlidingWindow, []flight{fl(0, 1, true), fl(1, 2, true), fl(1001, 1002, true), fl(1002, 1003, true)}, 0},
		// A slow flight could have been decided a window after the others: never counted.
		{"a slow flight", algorithms.SlidingWindow, []flight{fl(0, 1000, true), fl(10, 20, true), fl(30, 40, true)}, 0},
		{"across an edge", algorithms.AlignedWindows, []flight{fl(-2, -1, true), fl(-2, -1, true), fl(1, 2, true), fl(1, 2, true)}, 0},
		{"within one window", algorithms.AlignedWindows, []flight{fl(1, 2, true), fl(1, 2, true), fl(3, 4, true), fl(5, 6, true)}, 2},
		{"a refill's worth", algorithms.BurstRefill, []flight{fl(0, 1, true), fl(0, 1, true), fl(500, 501, true), fl(502, 503, true)}, 1},
	} {
		if got := overAdmitted(tc.g, p, slices.Clone(tc.adm), 0, 0); got != tc.want {
			t.Errorf("%s: %d over-admitted, want %d", tc.name, got, tc.want)
		}
	}
	// Redis's clock a second ahead moves the aligned windows: the same four
	// are then split by an edge.
	adm := []flight{fl(1, 2, true), fl(1, 2, true), fl(3, 4, true), fl(5, 6, true)}
	if got := overAdmitted(algorithms.AlignedWindows, p, adm, 998*time.Millisecond, 998*time.Millisecond); got != 0 {
		t.Errorf("shifted onto another clock's windows: %d over-admitted, want 0", got)
	}
}

func TestFalseDenied(t *testing.T) {
	p := algorithms.Policy{Limit: 2, Window: time.Second}
	fs := []flight{fl(0, 1, true), fl(10, 11, false), fl(20, 21, true), fl(30, 31, false), fl(1500, 1501, false)}
	// The first denial had one admission before it: an exact window admits it.
	// The second had two. The third came after both had left the window.
	if got := falseDenied(p, fs); got != 2 {
		t.Fatalf("%d falsely denied, want 2", got)
	}
	// A failed decision may have been admitted: it fills the window too.
	fs[2] = flight{send: fs[2].send, reply: fs[2].reply, failed: true}
	fs[0] = fl(0, 1, true)
	if got := falseDenied(p, fs[:4]); got != 1 {
		t.Fatalf("%d falsely denied with a failed decision in the window, want 1", got)
	}
}

func TestLevels(t *testing.T) {
	got := levels(DefaultSkews())
	want := [][]time.Duration{
		{0, 0, 0, 0},
		{0, 13 * time.Millisecond, -50 * time.Millisecond, 250 * time.Millisecond},
		{0, 25 * time.Millisecond, -100 * time.Millisecond, 500 * time.Millisecond},
		DefaultSkews(),
	}
	if len(got) != len(want) {
		t.Fatalf("levels %v, want %v", got, want)
	}
	for i := range want {
		if !slices.Equal(got[i], want[i]) || spread(got[i]) != []time.Duration{0, 300, 600, 1200}[i]*time.Millisecond {
			t.Errorf("level %d: %v (spread %s), want %v", i, got[i], spread(got[i]), want[i])
		}
	}
	if got := levels([]time.Duration{0}); len(got) != 1 {
		t.Errorf("one true node: %d levels, want 1", len(got))
	}
}
