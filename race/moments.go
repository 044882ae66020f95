package race

import (
	"slices"
	"sort"
)

// unit is one attempt of a decision: the whole decision, or one WATCH
// attempt of it. Its fields are event indices, -1 when absent.
type unit struct {
	decision int
	// first is its first event.
	first int
	// watch is the WATCH that began it, call its script call.
	watch, call int
	// read is its first read of the count, write its first write of it
	// that Redis executed, aborted the EXEC Redis refused, undo the ZREM
	// that took its write back.
	read, write, aborted, undo int
}

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
				u = unit{decision: d, first: i, watch: -1, call: -1, read: -1, write: -1, aborted: -1, undo: -1}
				started = true
			}
			switch {
			case e.name == "WATCH":
				u.watch = i
			case scriptCalls[e.name] && !e.script:
				u.call = i
			case countReads[e.name] && a.onKey(e) && u.read < 0:
				u.read = i
			case a.isWrite(i) && u.write < 0:
				u.write = i
			case e.name == "EXEC" && e.sent != nil && e.sent.aborted:
				u.aborted = i
			case e.name == "ZREM" && a.onKey(e) && u.write >= 0:
				u.undo = i
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
		if u.read >= 0 {
			a.readAt = append(a.readAt, k)
		}
	}
	slices.SortFunc(a.readAt, func(x, y int) int { return a.units[x].read - a.units[y].read })
}

// target is what a unit did on its read: its write, or the EXEC Redis
// refused; -1 when it did neither after the read.
func (a *analyser) target(u unit) int {
	switch {
	case u.read < 0:
		return -1
	case u.write > u.read:
		return u.write
	case u.aborted > u.read:
		return u.aborted
	}
	return -1
}

// stale counts the reads and the stale ones, and marks the stale ones.
func (a *analyser) stale(ex *Explanation) []Moment {
	for _, u := range a.units {
		if u.read < 0 {
			continue
		}
		ex.Reads++
		if t := a.target(u); t >= 0 && a.writes[t]-a.writes[u.read+1] > 0 {
			ex.StaleReads++
			a.events[u.read].mark = "stale"
		}
	}
	return nil
}

// admitted is the event that shows decision d's admission, or -1 when the
// trace shows none: the script call's reply, or a write that stayed.
func (a *analyser) admitted(d int) int {
	dec := a.decisions[d]
	for _, k := range a.byDecision[d] {
		u := a.units[k]
		if u.call >= 0 {
			if !dec.allowed {
				return -1
			}
			return cmpOr(u.write, u.call)
		}
		if u.write >= 0 && u.undo < 0 {
			return u.write
		}
	}
	return -1
}

func cmpOr(a, b int) int {
	if a >= 0 {
		return a
	}
	return b
}

// unitOf is the unit of decision d that holds event i.
func (a *analyser) unitOf(d, i int) (unit, bool) {
	for _, k := range a.byDecision[d] {
		if u := a.units[k]; u.write == i || u.call == i {
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
		if at := a.admitted(d); at >= 0 {
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
		if ok && u.read >= 0 && u.read < ad.at {
			m.Read = a.step(u.read)
			m.WritesBetween = a.writes[ad.at] - a.writes[u.read+1]
			if p, ok := a.partner(u, ad.at); ok {
				m.OtherRead, m.OtherWrite = a.step(p.read), a.step(p.write)
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
	v := a.events[u.read].sent
	if v == nil || !v.hasCount {
		return unit{}, false
	}
	g := a.decisions[u.decision].g
	var best unit
	found := false
	for _, k := range a.readAt {
		p := a.units[k]
		if p.read >= write || (found && p.read > u.read) {
			break
		}
		pv := a.events[p.read].sent
		if a.decisions[p.decision].g == g || p.write < p.read || pv == nil || !pv.hasCount || pv.count != v.count {
			continue
		}
		if u.read < p.write {
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
		if u.aborted < 0 {
			continue
		}
		ex.AbortedExecs++
		a.events[u.aborted].mark = "aborted"
		// Every one is kept here: the units are in the order their attempts
		// began, and the moments are cut in the trace's order (analyse).
		g := a.decisions[u.decision].g
		m := Moment{Kind: MomentAborted, Goroutine: goroutine(g), Write: a.step(u.aborted)}
		if u.watch >= 0 {
			m.Watch = a.step(u.watch)
		}
		if u.read >= 0 {
			m.Read = a.step(u.read)
		}
		// Any write after the WATCH aborts the EXEC.
		k := sort.SearchInts(a.writeAt, u.watch+1)
		for ; k < len(a.writeAt) && a.writeAt[k] < u.aborted; k++ {
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
		if u.write >= 0 && u.undo > u.write && u.call < 0 {
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
		alive[p.write+1]++
		alive[p.undo]--
	}
	for i := 1; i < len(alive); i++ {
		alive[i] += alive[i-1]
	}
	// A read denied that would have admitted without the others' phantoms.
	deniedBy := func(u unit) bool {
		s := a.events[u.read].sent
		if s == nil || !s.hasCount || a.decisions[u.decision].allowed {
			return false
		}
		others := alive[u.read]
		if u.write >= 0 && u.write < u.read && u.undo > u.read {
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
		a.events[p.write].mark = "phantom" // every one is kept here; analyse cuts them in the trace's order
		m := Moment{Kind: MomentPhantom, Goroutine: goroutine(a.decisions[p.decision].g), Write: a.step(p.write), Undo: a.step(p.undo)}
		if p.read >= 0 {
			m.Read = a.step(p.read)
		}
		for _, k := range a.readAt {
			r := a.units[k]
			if r.read <= p.write || r.read >= p.undo || r.decision == p.decision {
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
		if u.call < 0 {
			continue
		}
		ex.ScriptCalls++
		own := a.decisions[u.decision].events
		lo, hi := u.call, u.call
		n := 0
		for _, i := range own {
			if i == u.call || (a.events[i].script && a.events[i].owner == u.call) {
				lo, hi = min(lo, i), max(hi, i)
				n++
			}
		}
		between := hi - lo + 1 - n
		if between > 0 {
			ex.Interleaved++
		}
		if (ex.ScriptCalls == 1 || between > 0) && len(moments) < maxMoments {
			m := Moment{Kind: MomentAtomic, Goroutine: goroutine(a.decisions[u.decision].g), Call: a.step(u.call), Between: between}
			if u.read >= 0 {
				m.Read = a.step(u.read)
			}
			if u.write >= 0 {
				m.Write = a.step(u.write)
			}
			moments = append(moments, m)
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
