package race

import (
	"slices"
	"sort"
)

// unit is one attempt of a decision: the whole decision, or one WATCH
// attempt of it.
type unit struct {
	decision int
	// first is its first event.
	first int
	// watch is the WATCH that began it, call its script call.
	watch, call ref
	// read is its first read of the count, write its first write of it
	// that Redis executed, aborted the EXEC Redis refused, undo the ZREM
	// that took its write back.
	read, write, aborted, undo ref
}

// ref is an event of the trace, by its index, or none.
type ref struct {
	i  int
	ok bool
}

// refTo is event i.
func refTo(i int) ref { return ref{i: i, ok: true} }

// get is the event's index, and whether there is one.
func (r ref) get() (int, bool) { return r.i, r.ok }

// is reports whether r is event i.
func (r ref) is(i int) bool { return r.ok && r.i == i }

// before reports whether r and s are both events and r came first.
func (r ref) before(s ref) bool { return r.ok && s.ok && r.i < s.i }

// analyser holds a trace while it is explained.
type analyser struct {
	events     []traceEvent
	decisions  []decision
	units      []unit
	byDecision [][]int // the units of each decision
	keys       []string
	limit      int64
	expected   int64
	// writes[i] counts the writes of the count among events[:i], and
	// writeAt lists where they are.
	writes  []int
	writeAt []int
	// readAt lists the units' reads, in trace order, by unit.
	readAt []int
}

func (a *analyser) onKey(e traceEvent) bool {
	for _, arg := range e.line.args[1:] {
		if slices.Contains(a.keys, arg) {
			return true
		}
	}
	return false
}

// isWrite reports whether event i wrote the count.
func (a *analyser) isWrite(i int) bool {
	return countWrites[a.events[i].name] && a.onKey(a.events[i])
}

// split cuts each decision into units, one per WATCH attempt, and finds
// each unit's read, write and the rest.
func (a *analyser) split() {
	a.writes = make([]int, len(a.events)+1)
	for i := range a.events {
		a.writes[i+1] = a.writes[i]
		if a.isWrite(i) {
			a.writes[i+1]++
			a.writeAt = append(a.writeAt, i)
		}
	}
	for d, dec := range a.decisions {
		var u unit
		started := false
		for _, i := range dec.events {
			e := a.events[i]
			if e.name == "WATCH" && started {
				a.units = append(a.units, u)
				started = false
			}
			if !started {
				u = unit{decision: d, first: i}
				started = true
			}
			switch {
			case e.name == "WATCH":
				u.watch = refTo(i)
			case scriptCalls[e.name] && !e.script:
				u.call = refTo(i)
			case countReads[e.name] && a.onKey(e) && !u.read.ok:
				u.read = refTo(i)
			case a.isWrite(i) && !u.write.ok:
				u.write = refTo(i)
			case e.name == "EXEC" && e.sent != nil && e.sent.aborted:
				u.aborted = refTo(i)
			case e.name == "ZREM" && a.onKey(e) && u.write.ok:
				u.undo = refTo(i)
			}
		}
		if started {
			a.units = append(a.units, u)
		}
	}
	slices.SortFunc(a.units, func(x, y unit) int { return x.first - y.first })
	a.byDecision = make([][]int, len(a.decisions))
	for k, u := range a.units {
		a.byDecision[u.decision] = append(a.byDecision[u.decision], k)
		if u.read.ok {
			a.readAt = append(a.readAt, k)
		}
	}
	slices.SortFunc(a.readAt, func(x, y int) int { return a.units[x].read.i - a.units[y].read.i })
}

// target is what a unit did on its read: its write, or the EXEC Redis
// refused; none when it did neither after the read.
func (a *analyser) target(u unit) ref {
	switch {
	case u.read.before(u.write):
		return u.write
	case u.read.before(u.aborted):
		return u.aborted
	}
	return ref{}
}

// countStaleReads counts the reads of the count, and the stale ones among
// them: those whose unit wrote (or tried to, with an EXEC) after another
// write had changed the count. It marks the stale ones; the moments that
// tell them are the admissions they led to (admissions).
func (a *analyser) countStaleReads(ex *Explanation) {
	for _, u := range a.units {
		if !u.read.ok {
			continue
		}
		ex.Reads++
		if t := a.target(u); t.ok && a.writes[t.i]-a.writes[u.read.i+1] > 0 {
			ex.StaleReads++
			a.events[u.read.i].mark = "stale"
		}
	}
}

// admitted is the event that shows decision d's admission, if the trace
// shows one: a script's write (or its call, when the script wrote
// nothing the trace shows) for a call that admitted, or a write that stayed.
func (a *analyser) admitted(d int) (int, bool) {
	dec := a.decisions[d]
	for _, k := range a.byDecision[d] {
		u := a.units[k]
		switch {
		case u.call.ok && !dec.allowed:
			return 0, false
		case u.call.ok && u.write.ok:
			return u.write.i, true
		case u.call.ok:
			return u.call.i, true
		case u.write.ok && !u.undo.ok:
			return u.write.i, true
		}
	}
	return 0, false
}

// unitOf is the unit of decision d that holds event i.
func (a *analyser) unitOf(d, i int) (unit, bool) {
	for _, k := range a.byDecision[d] {
		if u := a.units[k]; u.write.is(i) || u.call.is(i) {
			return u, true
		}
	}
	return unit{}, false
}

// admissions counts the admissions in the order Redis executed them,
// marks those beyond the guarantee, and tells the first of them: the read
// each was based on, and another goroutine's read of the same count
// before either wrote.
func (a *analyser) admissions(ex *Explanation) []Moment {
	type admission struct{ d, at int }
	var adm []admission
	for d := range a.decisions {
		if at, ok := a.admitted(d); ok {
			adm = append(adm, admission{d, at})
		}
	}
	slices.SortFunc(adm, func(x, y admission) int { return x.at - y.at })
	ex.Admitted = int64(len(adm))
	ex.OverAdmitted = max(ex.Admitted-a.expected, 0)
	var moments []Moment
	for k, ad := range adm {
		if int64(k) < a.expected {
			continue
		}
		a.events[ad.at].mark = "over"
		if len(moments) >= maxMoments {
			continue
		}
		m := Moment{Kind: MomentOver, Goroutine: goroutine(a.decisions[ad.d].g), Write: a.step(ad.at),
			Admission: int64(k + 1), Allowed: a.expected}
		u, ok := a.unitOf(ad.d, ad.at)
		if ok && u.read.before(refTo(ad.at)) {
			m.Read = a.step(u.read.i)
			m.WritesBetween = a.writes[ad.at] - a.writes[u.read.i+1]
			if p, ok := a.partner(u, ad.at); ok {
				m.OtherRead, m.OtherWrite = a.step(p.read.i), a.step(p.write.i)
			}
		}
		moments = append(moments, m)
	}
	return moments
}

// heldAdmissions counts the admissions of an in-flight limiter, in the
// order Redis made them, and marks those made when more than the limit
// were surely held: at an admission's write, a holder is surely held when
// Redis admitted it there or before, and it stopped holding (released,
// died, dropped its release) no sooner than the admitted request got its
// reply, which came after the write; for a lease, while its lease had not
// expired on Redis's clock. Each is told as an admission beyond the limit.
func (a *analyser) heldAdmissions(ex *Explanation, holds inFlightHolds) []Moment {
	type admission struct {
		d, at int
		h     holdTimes
	}
	var adm []admission
	for d := range a.decisions {
		at, ok := a.admitted(d)
		if !ok || !a.decisions[d].allowed || d >= len(holds.byDecision) || !holds.byDecision[d].admitted {
			continue
		}
		adm = append(adm, admission{d, at, holds.byDecision[d]})
	}
	slices.SortFunc(adm, func(x, y admission) int { return x.at - y.at })
	ex.Admitted = int64(len(adm))
	lease := (holds.ttl - leaseSlack(holds.ttl)).Microseconds()
	var moments []Moment
	for k, ad := range adm {
		var held int64
		for _, h := range adm[:k+1] {
			live := holds.ttl == 0 || a.events[ad.at].line.micros < a.events[h.at].line.micros+lease
			if !h.h.end.Before(ad.h.replied) && live {
				held++
			}
		}
		if held <= a.limit {
			continue
		}
		ex.OverAdmitted++
		a.events[ad.at].mark = "over"
		m := Moment{Kind: MomentOver, Goroutine: goroutine(a.decisions[ad.d].g), Write: a.step(ad.at),
			HeldAtOnce: held, Allowed: a.limit}
		if u, ok := a.unitOf(ad.d, ad.at); ok && u.read.before(refTo(ad.at)) {
			m.Read = a.step(u.read.i)
			m.WritesBetween = a.writes[ad.at] - a.writes[u.read.i+1]
			if p, ok := a.partner(u, ad.at); ok {
				m.OtherRead, m.OtherWrite = a.step(p.read.i), a.step(p.write.i)
			}
		}
		moments = append(moments, m)
	}
	return moments
}

// partner finds another goroutine's unit that read the same count as u
// and wrote, both reads before either write: the one whose read is
// closest before u's, else the first after it.
func (a *analyser) partner(u unit, write int) (unit, bool) {
	v := a.events[u.read.i].sent
	if v == nil || !v.hasCount {
		return unit{}, false
	}
	g := a.decisions[u.decision].g
	var best unit
	found := false
	for _, k := range a.readAt {
		p := a.units[k]
		if p.read.i >= write || (found && u.read.before(p.read)) {
			break
		}
		pv := a.events[p.read.i].sent
		if a.decisions[p.decision].g == g || !p.read.before(p.write) || pv == nil || !pv.hasCount || pv.count != v.count {
			continue
		}
		if u.read.before(p.write) {
			best, found = p, true
		}
	}
	return best, found
}

// aborts counts the EXECs Redis aborted, marks them, and tells the first:
// the WATCH, the read, and the other goroutine's write that came between
// the WATCH and the EXEC.
func (a *analyser) aborts(ex *Explanation) []Moment {
	var moments []Moment
	for _, u := range a.units {
		if !u.aborted.ok {
			continue
		}
		ex.AbortedExecs++
		a.events[u.aborted.i].mark = "aborted"
		// Every one is kept here: the units are in the order their attempts
		// began, and the moments are cut in the trace's order (analyse).
		g := a.decisions[u.decision].g
		m := Moment{Kind: MomentAborted, Goroutine: goroutine(g), Watch: a.stepAt(u.watch), Read: a.stepAt(u.read),
			Write: a.step(u.aborted.i)}
		// Any write after the WATCH aborts the EXEC.
		from := 0
		if u.watch.ok {
			from = u.watch.i + 1
		}
		k := sort.SearchInts(a.writeAt, from)
		for ; k < len(a.writeAt) && a.writeAt[k] < u.aborted.i; k++ {
			if a.events[a.writeAt[k]].g != g {
				m.OtherWrite = a.step(a.writeAt[k])
				break
			}
		}
		moments = append(moments, m)
	}
	return moments
}

// phantoms finds the members a transaction added and then removed (a
// denied request's), counts the decisions that read the count while they
// were in it and those denied because of them, and tells the first.
func (a *analyser) phantoms(ex *Explanation) []Moment {
	var ps []unit
	for _, u := range a.units {
		if u.write.before(u.undo) && !u.call.ok {
			ps = append(ps, u)
		}
	}
	ex.Phantoms = int64(len(ps))
	if len(ps) == 0 {
		return nil
	}
	// alive[i] counts the phantoms in the count at event i.
	alive := make([]int, len(a.events)+1)
	for _, p := range ps {
		alive[p.write.i+1]++
		alive[p.undo.i]--
	}
	for i := 1; i < len(alive); i++ {
		alive[i] += alive[i-1]
	}
	// A read denied that would have admitted without the others' phantoms.
	deniedBy := func(u unit) bool {
		s := a.events[u.read.i].sent
		if s == nil || !s.hasCount || a.decisions[u.decision].allowed {
			return false
		}
		others := alive[u.read.i]
		if u.write.before(u.read) && u.read.before(u.undo) {
			others-- // its own member, not a phantom yet
		}
		return others > 0 && s.count-int64(others) <= a.limit
	}
	for _, k := range a.readAt {
		if deniedBy(a.units[k]) {
			ex.PhantomDenials++
		}
	}
	var moments []Moment
	for _, p := range ps {
		a.events[p.write.i].mark = "phantom" // every one is kept here; analyse cuts them in the trace's order
		m := Moment{Kind: MomentPhantom, Goroutine: goroutine(a.decisions[p.decision].g), Read: a.stepAt(p.read),
			Write: a.step(p.write.i), Undo: a.step(p.undo.i)}
		for _, k := range a.readAt {
			r := a.units[k]
			if !p.write.before(r.read) || !r.read.before(p.undo) || r.decision == p.decision {
				continue
			}
			m.Counted++
			if deniedBy(r) {
				m.Denied++
			}
		}
		moments = append(moments, m)
	}
	return moments
}

// scripts counts the script calls and those with another goroutine's
// command between their first and last command, and tells the first call
// and every such one.
func (a *analyser) scripts(ex *Explanation) []Moment {
	var moments []Moment
	for _, u := range a.units {
		call, ok := u.call.get()
		if !ok {
			continue
		}
		ex.ScriptCalls++
		own := a.decisions[u.decision].events
		lo, hi := call, call
		n := 0
		for _, i := range own {
			if i == call || (a.events[i].script && a.events[i].owner == call) {
				lo, hi = min(lo, i), max(hi, i)
				n++
			}
		}
		between := hi - lo + 1 - n
		if between > 0 {
			ex.Interleaved++
		}
		if (ex.ScriptCalls == 1 || between > 0) && len(moments) < maxMoments {
			moments = append(moments, Moment{Kind: MomentAtomic, Goroutine: goroutine(a.decisions[u.decision].g),
				Call: a.step(call), Read: a.stepAt(u.read), Write: a.stepAt(u.write), Between: between})
		}
	}
	return moments
}

// step is event i as a moment points at it.
func (a *analyser) step(i int) *Step {
	e := a.events[i]
	s := &Step{Event: i, Micros: e.line.micros - a.events[0].line.micros, Goroutine: goroutine(e.g), Command: e.name}
	if e.sent != nil && e.sent.hasCount && (countReads[e.name] || countReplies[e.name]) {
		v := e.sent.count
		s.Value = &v
	}
	return s
}

// stepAt is the event r points at as a moment points at it; nil for none.
func (a *analyser) stepAt(r ref) *Step {
	if !r.ok {
		return nil
	}
	return a.step(r.i)
}

// momentAt is where a moment stands in the trace: at its write, or its
// script call.
func momentAt(m Moment) int {
	if m.Write != nil {
		return m.Write.Event
	}
	if m.Call != nil {
		return m.Call.Event
	}
	return -1
}

// momentEvents lists the events the moments point at, moment by moment.
func momentEvents(ms []Moment) []int {
	var out []int
	for _, m := range ms {
		for _, s := range []*Step{m.Call, m.Watch, m.OtherRead, m.Read, m.OtherWrite, m.Write, m.Undo} {
			if s != nil {
				out = append(out, s.Event)
			}
		}
	}
	return out
}
