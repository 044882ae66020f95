package race

import (
	"slices"
	"sort"
)

// momentsCut is how many of the first moments a trace is cut around.
const momentsCut = 3

// cutTrace chooses at most limit of n events: those the moments point at,
// first moments first, and as many of their neighbours as fit, the same
// number on each side of each.
func cutTrace(n int, important []int, limit int) []int {
	if n <= limit {
		return upTo(n)
	}
	var seeds []int
	seen := map[int]bool{}
	for _, i := range important {
		if !seen[i] && len(seeds) < limit {
			seen[i] = true
			seeds = append(seeds, i)
		}
	}
	if len(seeds) == 0 {
		return upTo(limit)
	}
	slices.Sort(seeds)
	// covered is how many events windows of radius k around the seeds hold.
	covered := func(k int) int {
		total, end := 0, -1
		for _, s := range seeds {
			lo, hi := max(s-k, end+1), min(s+k, n-1)
			if hi >= lo {
				total += hi - lo + 1
				end = hi
			}
		}
		return total
	}
	k := sort.Search(n, func(k int) bool { return covered(k+1) > limit })
	keep := map[int]bool{}
	for _, s := range seeds {
		for i := max(s-k, 0); i <= min(s+k, n-1); i++ {
			keep[i] = true
		}
	}
	for _, s := range seeds {
		for _, i := range []int{s - k - 1, s + k + 1} {
			if len(keep) < limit && i >= 0 && i < n {
				keep[i] = true
			}
		}
	}
	out := make([]int, 0, len(keep))
	for i := range keep {
		out = append(out, i)
	}
	slices.Sort(out)
	return out
}

// upTo is 0, 1, … n-1.
func upTo(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i
	}
	return out
}
