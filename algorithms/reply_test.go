package algorithms

import "testing"

// A reply's retry-after that is negative, or too long for a time.Duration
// (it would wrap around into a short or negative wait), is a bad reply.
func TestReplyRetryAfterOutOfRange(t *testing.T) {
	for _, reply := range []any{
		[]any{int64(0), int64(0), int64(-10)},
		[]any{int64(0), int64(0), int64(1 << 62)},
	} {
		if d, err := parseReply(reply); err == nil {
			t.Errorf("parseReply(%v) = %+v", reply, d)
		}
		if d, err := parseUserReply(reply); err == nil {
			t.Errorf("parseUserReply(%v) = %+v", reply, d)
		}
	}
}

// An admission has no retry-after, whatever the reply's third element says.
func TestReplyAdmissionHasNoRetryAfter(t *testing.T) {
	if d, err := parseReply([]any{int64(1), int64(4), int64(5)}); err != nil || !d.Allowed || d.RetryAfter != 0 {
		t.Errorf("parseReply({1, 4, 5}) = %+v, %v: want admitted with no retry-after", d, err)
	}
}
