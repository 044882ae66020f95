package algorithms

import (
	"slices"
	"testing"
	"time"
)

// TestIsAlgorithmIsAlgorithms: the names Check.Validate accepts are exactly
// those Algorithms lists, of every registered name and a few others.
func TestIsAlgorithmIsAlgorithms(t *testing.T) {
	names := append(Names(), "", "Fixed-Window", "fixed-window ", "lua")
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			if got, want := isAlgorithm(name), slices.Contains(Algorithms(), name); got != want {
				t.Errorf("isAlgorithm(%q) = %v, Algorithms lists it: %v", name, got, want)
			}
		})
	}
}

// BenchmarkCheckValidate is what validating one check costs a decision.
func BenchmarkCheckValidate(b *testing.B) {
	c := Check{Key: "k", Algorithm: "gcra", Policy: Policy{Limit: 10, Window: time.Second}, Cost: 1}
	b.ReportAllocs()
	for b.Loop() {
		if err := c.Validate(); err != nil {
			b.Fatal(err)
		}
	}
}
