package algorithms

import (
	"context"
	"slices"
	"strings"
	"time"
)

// refundTimeout bounds the call that gives back a denied request's
// consumption; it runs even when the caller's context is done.
const refundTimeout = 2 * time.Second

// hashTag is the part of key that Redis Cluster hashes: the text inside the
// first {…} when it is not empty, else the whole key.
func hashTag(key string) string {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			return key[i+1 : i+1+j]
		}
	}
	return key
}

// bySlot groups checks by their keys' hash tag, so that each group's keys
// share a Cluster slot: the largest group first (the identity's limits),
// groups of one size in the order their first check comes.
func bySlot(checks []Check) [][]int {
	var groups [][]int
	at := map[string]int{}
	for i, c := range checks {
		tag := hashTag(c.Key)
		g, ok := at[tag]
		if !ok {
			g = len(groups)
			at[tag] = g
			groups = append(groups, nil)
		}
		groups[g] = append(groups[g], i)
	}
	slices.SortStableFunc(groups, func(a, b []int) int { return len(b) - len(a) })
	return groups
}

// giveBack refunds what the calls in done consumed, the last first, and
// updates out's Remaining and Reset for them (what the limits hold once
// refunded) and its Calls.
func (d *Decider) giveBack(ctx context.Context, out *Outcome, groups [][]int, done []call) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), refundTimeout)
	defer cancel()
	for k := len(done) - 1; k >= 0; k-- {
		cl := done[k]
		var checks []Check
		var members []string
		var marks []int64
		var at []int
		for j := range cl.checks {
			if cl.consumed(j) {
				checks = append(checks, cl.checks[j])
				members = append(members, cl.member(j))
				marks = append(marks, cl.marks[j])
				at = append(at, groups[k][j])
			}
		}
		if len(checks) == 0 {
			continue
		}
		r, trips, err := d.run(ctx, "refund", checks, members, marks, cl.now)
		out.Calls += trips
		if err != nil {
			return err
		}
		for j, i := range at {
			out.Checks[i].Remaining = r.decisions[j].Remaining
			out.Checks[i].Reset = r.decisions[j].Reset
			out.Checks[i].Member = ""
		}
	}
	return nil
}
