package bench

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/ratelab/ratelab/audit"
)

// TestRLSMeetingSets: with a mix of sets, each call is judged by the set
// it sent (its route): by ExpectLimit, each descriptor's text is one limit
// over every set, met by the calls that sent it; the schedule sends each
// consumer the sets by their weights, exactly over whole rounds.
func TestRLSMeetingSets(t *testing.T) {
	var sets []DescriptorSet
	for _, s := range []string{"1:a={consumer};g=global", "3:b={consumer};g=global"} {
		set, err := ParseDescriptorSet(s)
		if err != nil {
			t.Fatal(err)
		}
		sets = append(sets, set)
	}
	cfg := RLSConfig{Target: "127.0.0.1:1", Domain: "d", Sets: sets, Consumers: 2, Requests: 1, ExpectLimit: 5, ExpectWindow: time.Second}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	calls, err := newRLSCalls(cfg)
	if err != nil {
		t.Fatal(err)
	}
	schedule := spread([]int{1, 3})
	var samples []audit.Sample
	perSet := map[[2]int]int{}
	for j := range int64(32) {
		consumer := int(j % 2)
		set := scheduled(schedule, j, consumer, 2)
		perSet[[2]int{consumer, set}]++
		s := audit.NewSample(consumer, time.Duration(j)*time.Millisecond, time.Duration(j)*time.Millisecond+1, rlsOK)
		s.Route = uint16(set)
		samples = append(samples, s)
		first := calls.request(set, consumer).GetDescriptors()[0].GetEntries()[0]
		if want := [2]string{"a", "b"}[set] + "=" + consumerName(int32(consumer)); first.GetKey()+"="+first.GetValue() != want {
			t.Fatalf("call %d of set %d sends %s=%s, want %s", j, set, first.GetKey(), first.GetValue(), want)
		}
	}
	for c := range 2 {
		if perSet[[2]int{c, 0}] != 4 || perSet[[2]int{c, 1}] != 12 {
			t.Errorf("consumer %d sent the sets %d and %d times, want 4 and 12", c, perSet[[2]int{c, 0}], perSet[[2]int{c, 1}])
		}
	}
	rec := audit.Record{Samples: samples}
	a, m := cfg.service(calls).Judge(context.Background(), &rec, audit.NewCoverage(0, -1, false, false), nil, "not here", consumerName)
	var got []string
	for k, l := range a.Limits {
		got = append(got, fmt.Sprintf("%s×%d×%d", l.ID, m.Met(k), l.Requests))
	}
	if want := []string{"a={consumer}×8×8", "g=global×32×32", "b={consumer}×24×24"}; !slices.Equal(got, want) {
		t.Errorf("limits met %v, want %v", got, want)
	}
}
