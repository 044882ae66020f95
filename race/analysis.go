package race

import (
	"slices"
	"sort"
	"time"
)

// analyse builds the trace from the captured lines and what each goroutine
// sent, and explains it.
func analyse(ex Explanation, capt capture, addrs map[string]int, logs []*clientLog, keys []string,
	limit int64, maxLines int) Explanation {
	return analyseTrace(ex, capt, addrs, logs, keys, limit, maxLines, nil)
}

// holdTimes is, for one decision of an in-flight limiter's trial, whether
// it was admitted, when its reply came, and when its holder stopped
// holding (released, killed, or dropped its release).
type holdTimes struct {
	admitted     bool
	replied, end time.Time
}

// analyseHeld explains the trace of an in-flight limiter's trial: holds
// has, per goroutine and decision, its holdTimes; ttl is the lease's time
// to live, 0 for a limiter whose slots never expire. An admission beyond
// the limit is one made when more than the limit were surely held at its
// write (see heldAdmissions).
func analyseHeld(ex Explanation, tr trace, keys []string, limit int64, maxLines int, holds [][]holdTimes, ttl time.Duration) Explanation {
	return analyseTrace(ex, tr.capt, tr.addrs, tr.logs, keys, limit, maxLines, &inFlightHolds{byDecision: holdsByDecision(tr.logs, holds), ttl: ttl})
}

// inFlightHolds is what heldAdmissions needs of an in-flight trial.
type inFlightHolds struct {
	byDecision []holdTimes
	ttl        time.Duration
}

// analyseTrace is analyse, or analyseHeld when holds is not nil.
func analyseTrace(ex Explanation, capt capture, addrs map[string]int, logs []*clientLog, keys []string,
	limit int64, maxLines int, holds *inFlightHolds) Explanation {
	events, unmatched := buildTrace(capt, addrs, logs)
	ex.Unmatched = unmatched
	decisions := assignDecisions(events, logs)
	for _, l := range logs {
		ex.Decisions += int64(len(l.decisions))
	}
	if len(events) == 0 && ex.Decisions > 0 {
		// Every command was taken for another client's: the addresses the
		// server saw are not those the connections were dialled from.
		return Explanation{Node: ex.Node, Key: ex.Key, Trial: ex.Trial,
			Skipped: "MONITOR showed none of the goroutines' commands under the addresses they were known by (a proxy or NAT between ratelab and Redis?)"}
	}
	ex.Commands = len(events)
	ex.Counts = map[string]int{}
	for _, e := range events {
		ex.Counts[e.name]++
	}
	if len(events) == 0 {
		return ex
	}
	ex.SpanMicros = events[len(events)-1].line.micros - events[0].line.micros

	a := &analyser{events: events, decisions: decisions, keys: keys, limit: limit, expected: ex.Trial.Expected}
	a.split()
	a.countStaleReads(&ex)
	var moments []Moment
	if holds != nil {
		moments = a.heldAdmissions(&ex, *holds)
	} else {
		moments = a.admissions(&ex)
	}
	moments = append(moments, a.aborts(&ex)...)
	moments = append(moments, a.phantoms(&ex)...)
	moments = append(moments, a.scripts(&ex)...)
	sort.SliceStable(moments, func(i, j int) bool { return momentAt(moments[i]) < momentAt(moments[j]) })
	if len(moments) > maxMoments {
		moments = moments[:maxMoments]
	}
	ex.Moments = moments

	first := events[0].line.micros
	for _, i := range cutTrace(len(events), momentEvents(moments[:min(len(moments), momentsCut)]), maxLines) {
		e := events[i]
		ev := Event{Index: i, Micros: e.line.micros - first, Goroutine: goroutine(e.g), Command: commandText(e.line.args),
			Script: e.script, Mark: e.mark}
		if e.sent != nil {
			ev.Reply = e.sent.reply
		}
		ex.Events = append(ex.Events, ev)
	}
	ex.Lanes, ex.LanesCut = lanes(events)
	return ex
}

// holdsByDecision lays holds out by decision, in the order
// assignDecisions numbers them: goroutine by goroutine, each one's in order.
func holdsByDecision(logs []*clientLog, holds [][]holdTimes) []holdTimes {
	var out []holdTimes
	for g, l := range logs {
		for k := range l.decisions {
			var h holdTimes
			if g < len(holds) && k < len(holds[g]) {
				h = holds[g][k]
			}
			out = append(out, h)
		}
	}
	return out
}

// lanes sorts the goroutines' commands into one lane each, in the
// goroutines' order, up to MaxLaneCommands of them.
func lanes(events []traceEvent) ([]Lane, int) {
	first := events[0].line.micros
	byG := map[int][]LaneCommand{}
	type place struct{ g, i int }
	at := map[int]place{} // where each kept event stands in its lane
	kept, cut := 0, 0
	for i, e := range events {
		if e.script {
			continue
		}
		if kept == MaxLaneCommands {
			cut++
			continue
		}
		kept++
		at[i] = place{e.g, len(byG[e.g])}
		byG[e.g] = append(byG[e.g], LaneCommand{Micros: e.line.micros - first, Name: e.name, Role: role(e.name), Mark: e.mark})
	}
	// A script's commands are in its call: so is their mark (a script's
	// write over the limit marks the call that made it).
	for _, e := range events {
		if !e.script || e.mark == "" {
			continue
		}
		if p, ok := at[e.owner]; ok && byG[p.g][p.i].Mark == "" {
			byG[p.g][p.i].Mark = e.mark
		}
	}
	gs := make([]int, 0, len(byG))
	for g := range byG {
		gs = append(gs, g)
	}
	slices.Sort(gs)
	out := make([]Lane, 0, len(gs))
	for _, g := range gs {
		out = append(out, Lane{Goroutine: goroutine(g), Commands: byG[g]})
	}
	return out, cut
}
