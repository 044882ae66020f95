package skew

import (
	"slices"
	"time"

	"github.com/ratelab/ratelab/algorithms"
)

// flight is one decision from the outside: sent, answered, and how.
type flight struct {
	send, reply time.Time
	allowed     bool
	failed      bool
}

// judge makes cell ci's row from its decisions. offset is Redis's clock
// against this process's: on Redis's clock, aligned windows are Redis's.
func judge(cfg Config, c *cell, ci int, reqs []request, offset Offset) Row {
	p := cfg.Policy
	row := Row{
		Algorithm:     c.algorithm,
		Clock:         c.clock.String(),
		MaxSkewMillis: spread(c.offsets).Milliseconds(),
		Guarantee:     c.info.Guarantee.Rule(p),
	}
	for _, o := range c.offsets {
		row.OffsetsMillis = append(row.OffsetsMillis, o.Milliseconds())
	}
	// On the callers' clocks no one clock decides: the guarantee is held
	// to the true time. On Redis's, its clock decides, and the true time
	// maps onto it within the measured offset.
	lo, hi := time.Duration(0), time.Duration(0)
	if c.clock == algorithms.ClockRedis {
		lo, hi = time.Duration(offset.Lo)*time.Microsecond, time.Duration(offset.Hi)*time.Microsecond
	}
	clients := make([][]flight, len(c.keys))
	for _, r := range reqs {
		if int(r.cell) != ci {
			continue
		}
		clients[r.client] = append(clients[r.client], flight{send: r.send, reply: r.reply, allowed: r.allowed, failed: r.failed})
	}
	for k, fs := range clients {
		var admitted []flight
		for _, f := range fs {
			row.Decisions++
			switch {
			case f.failed:
				row.Errors++
			case f.allowed:
				row.Admitted++
				admitted = append(admitted, f)
			}
		}
		over := overAdmitted(c.info.Guarantee, p, admitted, lo, hi)
		denied := falseDenied(p, fs)
		row.OverAdmitted += over
		row.FalseDenied += denied
		if over > row.WorstClientOverAdmitted || (over == row.WorstClientOverAdmitted && denied > row.WorstClientFalseDenied) {
			row.WorstClient, row.WorstClientOverAdmitted, row.WorstClientFalseDenied = clientName(k), over, denied
		}
	}
	return row
}

// overAdmitted counts the admissions beyond g, taking them in the order
// their replies came: one is counted when, with the earlier ones that were
// not, a span from the send of one of them to its own reply holds more whole
// flights than g allows over it (the span mapped onto the clock that
// decides by [lo, hi]). Every decision lies within its flight, so a limiter
// that keeps g on that clock is never counted. Spans longer than two windows
// are not searched: the count can only be lower for it.
func overAdmitted(g algorithms.Guarantee, p algorithms.Policy, admitted []flight, lo, hi time.Duration) int64 {
	slices.SortStableFunc(admitted, func(a, b flight) int { return a.reply.Compare(b.reply) })
	horizon := 2 * p.Window
	var kept []flight // the admissions not counted, in reply order
	var over int64
	for _, j := range admitted {
		starts := []time.Time{j.send}
		for i := len(kept) - 1; i >= 0 && !kept[i].reply.Before(j.reply.Add(-horizon)); i-- {
			if s := kept[i].send; !s.After(j.send) && !s.Before(j.reply.Add(-horizon)) {
				starts = append(starts, s)
			}
		}
		beyond := false
		for _, x := range starts {
			n := int64(1) // j itself
			for i := len(kept) - 1; i >= 0 && !kept[i].reply.Before(x); i-- {
				if !kept[i].send.Before(x) {
					n++
				}
			}
			if n > g.Max(p, algorithms.Span{From: x.Add(lo), To: j.reply.Add(hi)}) {
				beyond = true
				break
			}
		}
		if beyond {
			over++
			continue
		}
		kept = append(kept, j)
	}
	return over
}

// falseDenied counts the denials that an exact sliding window on the true
// time would certainly have admitted: fewer than the limit of the client's
// other admissions and failed decisions had flights that could put them in
// the window before some moment of the denial's flight (a millisecond wider,
// for the scripts' whole milliseconds).
func falseDenied(p algorithms.Policy, fs []flight) int64 {
	var n int64
	for i, d := range fs {
		if d.allowed || d.failed {
			continue
		}
		from := d.send.Add(-p.Window - time.Millisecond)
		var inWindow int64
		for k, f := range fs {
			if k != i && (f.allowed || f.failed) && f.reply.After(from) && !f.send.After(d.reply) {
				inWindow++
			}
		}
		if inWindow < p.Limit {
			n++
		}
	}
	return n
}
