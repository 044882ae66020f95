// Package edits measures how far apart two short names are, for the
// "did you mean" of flags and of rules files' keys.
package edits

// Distance is the Levenshtein distance between a and b: the single-byte
// insertions, deletions and substitutions that make a into b. Names longer
// than 64 bytes are far from everything (len(a) + len(b)), so that a
// hostile name costs no quadratic work.
func Distance(a, b string) int {
	if len(a) > 64 || len(b) > 64 {
		return len(a) + len(b)
	}
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
