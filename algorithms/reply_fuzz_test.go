package algorithms

import (
	"encoding/binary"
	"math"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// replyError is an error reply, as go-redis hands one over in an array.
type replyError string

func (e replyError) Error() string { return string(e) }
func (replyError) RedisError()     {}

var _ redis.Error = replyError("")

// replyOf builds a script's reply from fuzz bytes, in the shapes go-redis
// hands one over (RESP2 and RESP3): nil, integers small and large, strings,
// arrays, floats, booleans, errors and maps, nested a few deep.
func replyOf(b []byte, depth int) (any, []byte) {
	if len(b) == 0 {
		return nil, b
	}
	tag, b := b[0], b[1:]
	next := func() byte {
		if len(b) == 0 {
			return 0
		}
		c := b[0]
		b = b[1:]
		return c
	}
	switch tag % 9 {
	case 0:
		return nil, b
	case 1:
		return int64(int8(next())), b
	case 2:
		var buf [8]byte
		n := copy(buf[:], b)
		b = b[n:]
		return int64(binary.BigEndian.Uint64(buf[:])), b
	case 3:
		n := min(int(next()%16), len(b))
		s := string(b[:n])
		return s, b[n:]
	case 4, 5:
		n := int(next() % 5)
		if depth > 3 {
			n = 0
		}
		arr := make([]any, n)
		for i := range arr {
			arr[i], b = replyOf(b, depth+1)
		}
		return arr, b
	case 6:
		return float64(int8(next())) / 2, b
	case 7:
		return next()%2 == 1, b
	default:
		if next()%2 == 0 {
			return replyError("ERR " + string(b)), nil
		}
		k, rest := replyOf(b, depth+1)
		v, rest := replyOf(rest, depth+1)
		switch k.(type) {
		case []any, map[any]any: // a map's key is a plain value
			k = "key"
		}
		return map[any]any{k: v}, rest
	}
}

// FuzzParseReply reads any reply as ratelab's scripts' and as a user's
// script's. A bad reply is an error, never a panic; a decision read is
// what the reply said: admitted only on 1, with no Retry-After, or denied
// with the Retry-After in ms it gave, never negative nor wrapped around.
func FuzzParseReply(f *testing.F) {
	f.Add([]byte{4, 3, 1, 1, 1, 4, 1, 0})                         // {1, 4, 0}
	f.Add([]byte{4, 3, 1, 0, 1, 0, 2, 0, 0, 0, 0, 0, 0, 3, 232})  // {0, 0, 1000}
	f.Add([]byte{1, 1})                                           // 1
	f.Add([]byte{4, 3, 1, 0, 1, 0, 2, 0x40, 0, 0, 0, 0, 0, 0, 0}) // {0, 0, 2^62}
	f.Add([]byte{4, 3, 1, 0, 1, 0, 1, 0xf6})                      // {0, 0, -10}
	f.Add([]byte{4, 2, 3, 1, 'x', 1, 1})                          // {"x", 1}
	f.Add([]byte{4, 0})                                           // {}
	f.Add([]byte{8, 0, 'o', 'o', 'm'})                            // an error
	f.Add([]byte{8, 1, 3, 1, 'a', 1, 1})                          // a map
	f.Add([]byte{6, 2})                                           // 1.0
	f.Fuzz(func(t *testing.T, b []byte) {
		reply, _ := replyOf(b, 0)
		for name, parse := range map[string]replyFunc{"parseReply": parseReply, "parseUserReply": parseUserReply} {
			d, err := parse(reply)
			if err != nil {
				continue
			}
			vals, ok := reply.([]any)
			if !ok {
				vals = []any{reply}
			}
			first, _ := vals[0].(int64)
			if d.Allowed != (first == 1) || d.RetryAfter < 0 || (d.Allowed && d.RetryAfter != 0) {
				t.Fatalf("%s(%#v) = %+v", name, reply, d)
			}
			if len(vals) > 2 && !d.Allowed {
				if ms, _ := vals[2].(int64); ms > math.MaxInt64/int64(time.Millisecond) || d.RetryAfter != time.Duration(ms)*time.Millisecond {
					t.Fatalf("%s(%#v) = %+v: Retry-After is not the reply's", name, reply, d)
				}
			}
		}
	})
}
