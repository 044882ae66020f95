package race

import (
	"testing"
	"time"
)

// TestMostAtOnce: the most spans over one instant, and each span's count
// at its start; a span that ends as another starts does not meet it, and
// an empty one covers nothing.
func TestMostAtOnce(t *testing.T) {
	t.Parallel()
	at := func(ms int) time.Time { return time.UnixMilli(int64(ms)) }
	spans := []span{
		{at(0), at(10)},
		{at(5), at(20)},
		{at(10), at(30)}, // starts as the first ends
		{at(12), at(14)},
		{at(15), at(15)}, // empty
		{at(13), at(40)},
	}
	most, counts := mostAtOnce(spans)
	if most != 4 {
		t.Errorf("most %d, want 4 (at 13 ms)", most)
	}
	want := []int64{1, 2, 2, 3, 0, 4}
	for i := range want {
		if counts[i] != want[i] {
			t.Errorf("counts %v, want %v", counts, want)
			break
		}
	}
	if most, _ := mostAtOnce(nil); most != 0 {
		t.Errorf("no spans: %d", most)
	}
}

// TestWrongful: a denial is wrongful when fewer than the limit of the
// spans met it, from its send to its reply, at any instant of it.
func TestWrongful(t *testing.T) {
	t.Parallel()
	at := func(ms int) time.Time { return time.UnixMilli(int64(ms)) }
	spans := []span{{at(0), at(10)}, {at(5), at(20)}, {at(18), at(30)}}
	for _, tc := range []struct {
		denial span
		limit  int64
		want   int64
	}{
		{span{at(6), at(7)}, 2, 0},   // two held
		{span{at(6), at(7)}, 3, 1},   // two of three
		{span{at(11), at(12)}, 2, 1}, // one
		{span{at(11), at(19)}, 2, 0}, // one, then two by its reply
		{span{at(10), at(10)}, 2, 0}, // the first ends as it is sent: met, to be safe
		{span{at(31), at(32)}, 1, 1}, // none
	} {
		if got := wrongful([]span{tc.denial}, spans, tc.limit); got != tc.want {
			t.Errorf("denial %v..%v at limit %d: %d wrongful, want %d", tc.denial.from.UnixMilli(), tc.denial.to.UnixMilli(), tc.limit, got, tc.want)
		}
	}
}

// TestFaultDealer: after n admissions ⌈n × share⌉ of each kind were dealt
// (a kind yields to the ones before it, never falling behind by more than
// their collisions), the first admission is killed, and no fault is dealt
// with no shares.
func TestFaultDealer(t *testing.T) {
	t.Parallel()
	d := newFaultDealer(Faults{Kill: 0.2, LoseRelease: 0.1, RetryRelease: 0.1})
	var got []fault
	var n [4]int
	for i := range 100 {
		f := d.next()
		got = append(got, f)
		n[f]++
		if kills := n[faultKill]; kills != (i+1+4)/5 {
			t.Fatalf("after %d admissions %d killed, want %d", i+1, kills, (i+1+4)/5)
		}
		if n[faultLose] < n[faultRetry] {
			t.Fatalf("after %d admissions %d lost and %d retried: lost releases come first", i+1, n[faultLose], n[faultRetry])
		}
	}
	if got[0] != faultKill || n[faultKill] != 20 || n[faultLose] != 10 || n[faultRetry] != 10 || n[faultNone] != 60 {
		t.Errorf("first %v; counts %v, want 20 killed, 10 lost, 10 retried of 100", got[0], n)
	}
	none := newFaultDealer(Faults{})
	for range 10 {
		if f := none.next(); f != faultNone {
			t.Fatalf("dealt %v with no shares", f)
		}
	}
}
