// Package randid makes random identifiers, such as the consumer prefix that
// keeps one run's Redis keys apart from every other run's.
package randid

import (
	"crypto/rand"
	"encoding/hex"
)

// Hex returns n random bytes from crypto/rand as 2n lower-case hex digits.
func Hex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // crypto/rand.Read never fails on supported platforms
	return hex.EncodeToString(b)
}
