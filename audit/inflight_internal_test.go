package audit

import (
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

const ms = time.Millisecond

// flights makes consumer 0's requests of status from [sent, done] pairs
// in milliseconds.
func flights(status int, pairs ...[2]int) []Sample {
	var ss []Sample
	for _, p := range pairs {
		ss = append(ss, NewSample(0, time.Duration(p[0])*ms, time.Duration(p[1])*ms, status))
	}
	return ss
}

func TestInFlightVerdicts(t *testing.T) {
	cov := NewCoverage(0, -1, false, false)
	five := flights(200, [2]int{0, 210}, [2]int{10, 220}, [2]int{20, 230}, [2]int{30, 240}, [2]int{40, 250})
	denial := flights(429, [2]int{50, 51})
	tests := []struct {
		name    string
		samples []Sample
		want    Verdict
		most    int64
	}{
		{"five at once and a denial held", append(append([]Sample{}, five...), denial...), Held, 5},
		{"six at once leaked", append(append(append([]Sample{}, five...), flights(200, [2]int{45, 260})...), denial...), Leaked, 6},
		{"no denial not reached", five, NotReached, 5},
		{"four at most not reached", append(append([]Sample{}, five[:4]...), denial...), NotReached, 4},
		// Back to back: the first may end its hold as the next begins.
		{"back to back never together", append(flights(200, [2]int{0, 200}, [2]int{200, 400}, [2]int{400, 600}), denial...), NotReached, 1},
		{"a flight shorter than the hold", append(append([]Sample{}, five...), flights(200, [2]int{300, 350})...), NoVerdict, 5},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := JudgeInFlight(tt.samples, 5, 200*ms, 1, cov, consumerName)
			if a.Verdict != tt.want || a.MostSurelyHeld != tt.most {
				t.Fatalf("verdict %s, most %d (%v); want %s, %d", a.Verdict, a.MostSurelyHeld, a.Reasons, tt.want, tt.most)
			}
			if int64(len(a.Example)) != a.MostSurelyHeld {
				t.Fatalf("example of %d flights for %d held", len(a.Example), a.MostSurelyHeld)
			}
		})
	}
}

// A flight of twice the hold or more has no instant it is surely in its
// hold, yet it surely meets a request whose sure hold covers its own
// possible starts and ends.
func TestInFlightLongFlight(t *testing.T) {
	ss := flights(200, [2]int{0, 450}, [2]int{60, 270})
	if got := len(surelyHeld(ss, 200*ms)); got != 2 {
		t.Fatalf("%d surely held, want 2", got)
	}
	// Two long flights never surely meet: each may hold while the other waits.
	ss = flights(200, [2]int{0, 600}, [2]int{0, 600})
	if got := len(surelyHeld(ss, 200*ms)); got != 1 {
		t.Fatalf("%d surely held, want 1", got)
	}
}

// surelyHeld finds the largest set of pairwise surely overlapping
// flights, as every subset checked by the pair condition does.
func TestSurelyHeldIsTheLargestSet(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	hold := 100 * time.Millisecond
	for trial := range 3000 {
		n := 1 + r.IntN(9)
		var ss []Sample
		for range n {
			sent := time.Duration(r.IntN(400)) * ms
			ss = append(ss, NewSample(0, sent, sent+hold+time.Duration(r.IntN(250))*ms, 200))
		}
		want := 0
		for set := 1; set < 1<<n; set++ {
			size, ok := 0, true
			for i := range n {
				if set&(1<<i) == 0 {
					continue
				}
				size++
				for j := range n {
					if j != i && set&(1<<j) != 0 && !(ss[i].Done-hold < ss[j].Sent+hold) {
						ok = false
					}
				}
			}
			if ok {
				want = max(want, size)
			}
		}
		got := surelyHeld(ss, hold)
		if len(got) != want {
			t.Fatalf("trial %d: %d surely held, want %d: %v", trial, len(got), want, ss)
		}
		for i := range got {
			for j := range got {
				if i != j && !(got[i].Done-hold < got[j].Sent+hold) {
					t.Fatalf("trial %d: the set found is not surely held: %v", trial, got)
				}
			}
		}
	}
}

func TestInFlightUnderAdmission(t *testing.T) {
	cov := NewCoverage(0, -1, false, false)
	held := flights(200, [2]int{0, 210}, [2]int{10, 220}, [2]int{20, 230}, [2]int{30, 240}, [2]int{40, 250})
	// Denied while five could be held: justified. Denied at 300, when at
	// most none could: wrongful. Denied over [215, 300]: four at most, at 215.
	ss := append(append([]Sample{}, held...), flights(429, [2]int{100, 101}, [2]int{300, 301}, [2]int{215, 300})...)
	a := JudgeInFlight(ss, 5, 200*ms, 1, cov, consumerName)
	if a.DenialsJudged != 3 || a.UnderAdmitted != 2 || a.UnderExample == nil || a.UnderExample.SentMicros != 215_000 || a.UnderExampleHeld != 4 {
		t.Fatalf("judged %d, under %d, example %v held %d; want 3, 2, 215 ms, 4", a.DenialsJudged, a.UnderAdmitted, a.UnderExample, a.UnderExampleHeld)
	}
	// A transport error may hold its slot for ever after its send.
	ss = append(ss, flights(0, [2]int{250, 260})...)
	if a := JudgeInFlight(ss, 1, 200*ms, 1, cov, consumerName); a.UnderAdmitted != 0 {
		t.Fatalf("under %d with a transport error outstanding, want 0", a.UnderAdmitted)
	}
	if a := JudgeInFlight(ss, 5, 200*ms, 1, NewCoverage(0, -1, true, false), consumerName); a.DenialsJudged != 0 || a.UnderSkipped == "" {
		t.Fatalf("partial samples: judged %d, skipped %q", a.DenialsJudged, a.UnderSkipped)
	}
}

// The limit was reached only by a consumer that had the limit surely held
// at once and was denied: one consumer's five and another's denial are
// not a limit tried.
func TestInFlightReachedByOneConsumer(t *testing.T) {
	cov := NewCoverage(0, -1, false, false)
	five := flights(200, [2]int{0, 210}, [2]int{10, 220}, [2]int{20, 230}, [2]int{30, 240}, [2]int{40, 250})
	other := []Sample{NewSample(1, 0, 210*ms, 200), NewSample(1, 50*ms, 51*ms, 429)}
	a := JudgeInFlight(append(append([]Sample{}, five...), other...), 5, 200*ms, 2, cov, consumerName)
	if a.Verdict != NotReached || a.MostSurelyHeld != 5 || len(a.Reasons) != 1 || !strings.Contains(a.Reasons[0], "never denied") {
		t.Fatalf("verdict %s, most %d, reasons %q; want not reached, 5, saying it was never denied", a.Verdict, a.MostSurelyHeld, a.Reasons)
	}
	// With a denial of its own, consumer-0 tried the limit.
	ss := append(append(append([]Sample{}, five...), other...), flights(429, [2]int{100, 101})...)
	if a := JudgeInFlight(ss, 5, 200*ms, 2, cov, consumerName); a.Verdict != Held {
		t.Fatalf("verdict %s (%q), want held", a.Verdict, a.Reasons)
	}
}

// A consumer denied while fewer than the limit could be held was not
// short of load: the reason says the gateway admits fewer, not to send
// more.
func TestInFlightNotReachedByAStingyGateway(t *testing.T) {
	cov := NewCoverage(0, -1, false, false)
	five := flights(200, [2]int{0, 210}, [2]int{10, 220}, [2]int{20, 230}, [2]int{30, 240}, [2]int{40, 250})
	ss := append(append([]Sample{}, five...), flights(429, [2]int{100, 101}, [2]int{120, 121})...)
	a := JudgeInFlight(ss, 6, 200*ms, 1, cov, consumerName)
	if a.Verdict != NotReached || a.UnderAdmitted != 2 || len(a.Reasons) != 1 ||
		!strings.Contains(a.Reasons[0], "fewer than 6") || strings.Contains(a.Reasons[0], "send more") {
		t.Fatalf("verdict %s, under %d, reasons %q; want not reached, 2, saying the gateway admits fewer", a.Verdict, a.UnderAdmitted, a.Reasons)
	}
}
