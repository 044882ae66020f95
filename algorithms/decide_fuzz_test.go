package algorithms

import (
	"encoding/binary"
	"testing"
)

// decideReplyOf builds a reply from fuzz bytes: mostly an array of small
// integers (-16 to 207), as decide.lua returns, with large integers and
// any other reply shape (replyOf) mixed in; or, when the first byte is a
// multiple of 4, any reply at all.
func decideReplyOf(b []byte) any {
	if len(b) < 2 || b[0]%4 == 0 {
		r, _ := replyOf(b, 0)
		return r
	}
	n := int(b[1]) % 24
	b = b[2:]
	vals := make([]any, n)
	for i := range vals {
		if len(b) == 0 {
			vals[i] = int64(0)
			continue
		}
		v := b[0]
		b = b[1:]
		switch {
		case v < 0xe0:
			vals[i] = int64(v) - 16
		case v < 0xf0:
			var buf [8]byte
			k := copy(buf[:], b)
			b = b[k:]
			vals[i] = int64(binary.BigEndian.Uint64(buf[:]))
		default:
			vals[i], b = replyOf(b, 1)
		}
	}
	return vals
}

// FuzzParseDecideReply reads any reply as decide.lua's for up to 4 limits,
// shadow or not. A bad reply is an error, never a panic; a reply read is
// consistent: one decision per limit, the request admitted exactly when
// every limit not in shadow admitted, no retry-after on an admission, and
// nothing negative.
func FuzzParseDecideReply(f *testing.F) {
	f.Add(byte(2), byte(0), []byte{1, 11, 17, 17, 20, 16, 26, 16, 17, 19, 16, 21, 16})         // {1, 1,4,0,10,0, 1,3,0,5,0}
	f.Add(byte(2), byte(2), []byte{1, 11, 17, 17, 20, 16, 26, 16, 16, 16, 23, 21, 16})         // the second, in shadow, denies
	f.Add(byte(2), byte(0), []byte{1, 11, 16, 17, 20, 16, 26, 16, 16, 16, 23, 21, 16})         // denied by the second
	f.Add(byte(1), byte(0), []byte{1, 6, 17, 17, 20, 17, 26, 16})                              // admitted with a retry-after
	f.Add(byte(1), byte(0), []byte{1, 6, 16, 16, 15, 16, 26, 16})                              // negative remaining
	f.Add(byte(1), byte(0), []byte{1, 6, 16, 16, 16, 0xe0, 0x40, 0, 0, 0, 0, 0, 0, 0, 16, 16}) // retry-after wraps
	f.Add(byte(1), byte(0), []byte{1, 6, 18, 17, 16, 16, 16, 16})                              // a flag of 2
	f.Add(byte(1), byte(0), []byte{1, 6, 17, 0xf0, 3, 1, 'x', 16, 16, 16, 16})                 // a string element
	f.Add(byte(0), byte(0), []byte{0, 1, 1})                                                   // an integer
	f.Fuzz(func(t *testing.T, n, shadowBits byte, b []byte) {
		shadows := make([]bool, n%5)
		for i := range shadows {
			shadows[i] = shadowBits&(1<<i) != 0
		}
		reply := decideReplyOf(b)
		r, err := parseDecideReply(reply, shadows)
		if err != nil {
			return
		}
		if len(r.decisions) != len(shadows) || len(r.marks) != len(shadows) {
			t.Fatalf("parseDecideReply(%#v) read %d decisions for %d limits", reply, len(r.decisions), len(shadows))
		}
		want := true
		for i, d := range r.decisions {
			if d.Remaining < 0 || d.RetryAfter < 0 || d.Reset < 0 || r.marks[i] < 0 || (d.Allowed && d.RetryAfter != 0) {
				t.Fatalf("parseDecideReply(%#v): limit %d read as %+v, mark %d", reply, i+1, d, r.marks[i])
			}
			if !d.Allowed && !shadows[i] {
				want = false
			}
		}
		if r.allowed != want {
			t.Fatalf("parseDecideReply(%#v): allowed %t, its limits say %t", reply, r.allowed, want)
		}
	})
}
