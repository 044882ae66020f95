// Package plural writes counts and lists in words: "1 consumer", "5
// consumers", "a, b and c", "400 × 240, 503 × 2".
package plural

import (
	"maps"
	"slices"
	"strconv"
	"strings"
)

// Count writes n and noun, with an s after noun unless n is 1. noun is
// a regular noun in the singular ("consumer", "Poisson client").
func Count[T ~int | ~int32 | ~int64](n T, noun string) string {
	s := strconv.FormatInt(int64(n), 10) + " " + noun
	if n != 1 {
		s += "s"
	}
	return s
}

// List joins words as a sentence does: "a", "a and b", "a, b and c"
// (with conj "and"; "a, b or c" with "or").
func List(words []string, conj string) string {
	if len(words) < 2 {
		return strings.Join(words, "")
	}
	return strings.Join(words[:len(words)-1], ", ") + " " + conj + " " + words[len(words)-1]
}

// Tally lists the counts whose key keep accepts, in key order, as
// "400 × 240, 429 × 3"; empty when none.
func Tally(counts map[string]int64, keep func(key string) bool) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(counts)) {
		if n := counts[k]; n > 0 && keep(k) {
			parts = append(parts, k+" × "+strconv.FormatInt(n, 10))
		}
	}
	return strings.Join(parts, ", ")
}
