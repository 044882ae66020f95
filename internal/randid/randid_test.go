package randid_test

import (
	"encoding/hex"
	"strings"
	"testing"

	"github.com/ratelab/ratelab/internal/randid"
)

// TestHex: 2n lower-case hex digits, different on every call.
func TestHex(t *testing.T) {
	for _, n := range []int{0, 1, 4, 16} {
		s := randid.Hex(n)
		if len(s) != 2*n || s != strings.ToLower(s) {
			t.Errorf("Hex(%d) = %q, want %d lower-case hex digits", n, s, 2*n)
		}
		if _, err := hex.DecodeString(s); err != nil {
			t.Errorf("Hex(%d) = %q: %v", n, s, err)
		}
	}
	// 128 random bits: equal twice only by a broken source.
	if a, b := randid.Hex(16), randid.Hex(16); a == b {
		t.Errorf("Hex(16) returned %s twice", a)
	}
}
