package algorithms

import (
	"fmt"
	"math"
	"time"
)

// decideReply is decide.lua's reply read.
type decideReply struct {
	allowed   bool
	decisions []Decision // Allowed, Remaining, RetryAfter and Reset
	marks     []int64
}

// decideWidth is the number of integers decide.lua returns per limit.
const decideWidth = 5

// parseDecideReply reads decide.lua's reply for limits whose shadow flags
// are shadows: {allowed, then per limit: allowed, remaining,
// retry_after_ms, reset_ms, mark}. Every element must be an integer, each
// flag 0 or 1, remaining, mark and the times in range, a limit that admitted
// must give no retry-after, and the request must be admitted exactly when
// every limit not in shadow admitted.
func parseDecideReply(reply any, shadows []bool) (decideReply, error) {
	vals, ok := reply.([]any)
	if !ok || len(vals) != 1+decideWidth*len(shadows) {
		return decideReply{}, fmt.Errorf("bad reply %v: want {allowed, then %d per limit for %d limits}", reply, decideWidth, len(shadows))
	}
	var buf [1 + decideWidth*maxShape]int64
	nums := buf[:0]
	if len(vals) > len(buf) {
		nums = make([]int64, 0, len(vals))
	}
	nums = nums[:len(vals)]
	for i, v := range vals {
		n, ok := v.(int64)
		if !ok {
			return decideReply{}, fmt.Errorf("bad reply %v: element %d is %T, want an integer", reply, i+1, v)
		}
		nums[i] = n
	}
	flag := func(i int) (bool, error) {
		if nums[i] != 0 && nums[i] != 1 {
			return false, fmt.Errorf("bad reply %v: element %d is %d, want 0 or 1", reply, i+1, nums[i])
		}
		return nums[i] == 1, nil
	}
	r := decideReply{decisions: make([]Decision, len(shadows)), marks: make([]int64, len(shadows))}
	var err error
	if r.allowed, err = flag(0); err != nil {
		return decideReply{}, err
	}
	want := true
	for j := range shadows {
		at := 1 + decideWidth*j
		d := &r.decisions[j]
		if d.Allowed, err = flag(at); err != nil {
			return decideReply{}, err
		}
		if d.Remaining = nums[at+1]; d.Remaining < 0 {
			return decideReply{}, fmt.Errorf("bad reply %v: limit %d: remaining %d is negative", reply, j+1, d.Remaining)
		}
		if d.Allowed && nums[at+2] != 0 {
			return decideReply{}, fmt.Errorf("bad reply %v: limit %d admitted with a retry-after", reply, j+1)
		}
		if d.RetryAfter, err = retryAfterMillis(nums[at+2]); err != nil {
			return decideReply{}, fmt.Errorf("bad reply %v: limit %d: %w", reply, j+1, err)
		}
		if nums[at+3] < 0 || nums[at+3] > math.MaxInt64/int64(time.Millisecond) {
			return decideReply{}, fmt.Errorf("bad reply %v: limit %d: reset %d ms is out of range", reply, j+1, nums[at+3])
		}
		d.Reset = time.Duration(nums[at+3]) * time.Millisecond
		if r.marks[j] = nums[at+4]; r.marks[j] < 0 {
			return decideReply{}, fmt.Errorf("bad reply %v: limit %d: mark %d is negative", reply, j+1, r.marks[j])
		}
		if !d.Allowed && !shadows[j] {
			want = false
		}
	}
	if r.allowed != want {
		return decideReply{}, fmt.Errorf("bad reply %v: the request's allowed (%t) is not its limits' (%t)", reply, r.allowed, want)
	}
	return r, nil
}
