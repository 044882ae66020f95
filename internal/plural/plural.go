// Package plural writes a count with its noun: "1 consumer", "5 consumers".
package plural

import "strconv"

// Count writes n and noun, with an s after noun unless n is 1. noun is
// a regular noun in the singular ("consumer", "Poisson client").
func Count[T ~int | ~int32 | ~int64](n T, noun string) string {
	s := strconv.FormatInt(int64(n), 10) + " " + noun
	if n != 1 {
		s += "s"
	}
	return s
}
