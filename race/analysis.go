package race

import (
	"slices"
	"sort"
	"strconv"
	"strings"
)

// Classes of commands, by what they do to a limiter's count.
var (
	// countReads read the count a limiter decides on.
	countReads = set("GET", "MGET", "HGET", "HMGET", "HGETALL", "ZCARD", "ZCOUNT", "LLEN", "SCARD")
	// countWrites raise it (or set it).
	countWrites = set("INCR", "INCRBY", "DECR", "DECRBY", "SET", "SETEX", "PSETEX", "SETNX", "GETSET",
		"ZADD", "HSET", "HMSET", "HSETNX", "HINCRBY", "HINCRBYFLOAT", "LPUSH", "RPUSH", "SADD")
	// countReplies answer with the count they left.
	countReplies = set("INCR", "INCRBY", "DECR", "DECRBY", "HINCRBY")
	// scriptCalls run a script.
	scriptCalls = set("EVAL", "EVALSHA", "EVAL_RO", "EVALSHA_RO", "FCALL", "FCALL_RO")
)

func set(names ...string) map[string]bool {
	m := make(map[string]bool, len(names))
	for _, n := range names {
		m[n] = true
	}
	return m
}

// traceEvent is one command of the trace as analysed.
type traceEvent struct {
	line   monLine
	name   string // upper-case
	g      int    // the goroutine: the sender, or the script's caller
	script bool
	owner  int   // for a script's command, the event of its call
	sent   *sent // what the goroutine sent and got back; nil where unknown
	pos    int   // where sent stands in the goroutine's log
	// decision is the index of the event's decision; -1 when none.
	decision int
	mark     string
}

// decision is one Allow call as the trace shows it.
type decision struct {
	g       int
	allowed bool // as the client saw it
	events  []int
}

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

// analyse builds the trace from the captured lines and what each goroutine
// sent, and explains it.
func analyse(ex Explanation, capt capture, addrs map[string]int, logs []*clientLog, keys []string,
	limit int64, maxLines int) Explanation {
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
	moments := a.stale(&ex)
	moments = append(moments, a.admissions(&ex)...)
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
		if p, ok := at[e.owner]; ok && e.script && e.mark != "" && byG[p.g][p.i].Mark == "" {
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

// role says what a command does to a limiter's count.
func role(name string) string {
	switch {
	case countReads[name]:
		return RoleRead
	case countWrites[name]:
		return RoleWrite
	case scriptCalls[name]:
		return RoleCall
	}
	return RoleOther
}

// buildTrace keeps the captured lines of the goroutines and of the
// scripts they called, in the order Redis executed them, and matches each
// goroutine's lines with what it sent. It returns the events and how many
// of the goroutines' lines matched nothing sent.
func buildTrace(capt capture, addrs map[string]int, logs []*clientLog) ([]traceEvent, int) {
	lines := capt.lines
	const (
		other  = -1 // another client's commands
		script = -2 // a script's
	)
	who := make([]int, len(lines))
	for i, l := range lines {
		g, ours := addrs[l.addr]
		switch {
		case l.addr == "lua":
			who[i] = script
		case ours:
			who[i] = g
		default:
			who[i] = other
		}
	}
	isCall := func(i int) bool {
		return i >= 0 && i < len(lines) && who[i] >= 0 && scriptCalls[strings.ToUpper(lines[i].args[0])]
	}
	// Redis shows a script's commands right after its call (or, in some
	// versions, right before it). The start marker said which; if it could
	// not, the first run of them next to a call on one side only says.
	type run struct{ from, to int }
	var runs []run
	for i := 0; i < len(lines); i++ {
		if who[i] != script {
			continue
		}
		j := i
		for j < len(lines) && who[j] == script {
			j++
		}
		runs = append(runs, run{i, j})
		i = j - 1
	}
	before := capt.order == scriptsBeforeCall // whether a script's commands come before its call
	for _, r := range runs {
		if b, a := isCall(r.from-1), isCall(r.to); capt.order == orderUnknown && b != a {
			before = a
			break
		}
	}
	callOf := make(map[int]int) // line of a script's command -> line of its call
	for _, r := range runs {
		call := r.from - 1
		if before {
			call = r.to
		}
		if !isCall(call) {
			continue // another client's script
		}
		for i := r.from; i < r.to; i++ {
			callOf[i] = call
		}
	}

	next := make([]int, len(logs)) // per goroutine, the next command of its log to match
	var events []traceEvent
	unmatched := 0
	eventOf := make(map[int]int) // line -> event
	for i, l := range lines {
		g := who[i]
		call, inScript := callOf[i]
		if g == other || (g == script && !inScript) {
			continue
		}
		e := traceEvent{line: l, name: strings.ToUpper(l.args[0]), g: g, owner: -1, pos: -1, decision: -1}
		if g == script {
			e.g, e.script, e.owner = who[call], true, call // a line for now; an event below
		} else {
			// A goroutine's commands reach Redis in the order it sent them;
			// the commands it queued in a transaction Redis aborted never
			// run, so they are passed over.
			cmds := logs[g].cmds
			matched := false
			for j := next[g]; j < len(cmds) && j < next[g]+16; j++ {
				if strings.EqualFold(cmds[j].name, l.args[0]) {
					e.sent, e.pos, next[g], matched = &cmds[j], j, j+1, true
					break
				}
			}
			if !matched {
				unmatched++
			}
		}
		eventOf[i] = len(events)
		events = append(events, e)
	}
	for i := range events {
		if events[i].script {
			events[i].owner = eventOf[events[i].owner]
		}
	}
	return events, unmatched
}

// assignDecisions gives each event its decision, from where its command
// stands in its goroutine's log (a script's commands, their call's), and
// lists the decisions with their events.
func assignDecisions(events []traceEvent, logs []*clientLog) []decision {
	offset := make([]int, len(logs))
	var decisions []decision
	for g, l := range logs {
		offset[g] = len(decisions)
		for _, d := range l.decisions {
			decisions = append(decisions, decision{g: g, allowed: d.allowed && !d.failed})
		}
	}
	for i := range events {
		e := &events[i]
		if e.script || e.sent == nil {
			continue
		}
		ds := logs[e.g].decisions
		k := sort.Search(len(ds), func(k int) bool { return ds[k].to > e.pos })
		if k < len(ds) && ds[k].from <= e.pos {
			e.decision = offset[e.g] + k
		}
	}
	for i := range events {
		e := &events[i]
		if e.script {
			e.decision = events[e.owner].decision
		}
		if e.decision >= 0 {
			decisions[e.decision].events = append(decisions[e.decision].events, i)
		}
	}
	return decisions
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

// momentsCut is how many of the first moments a trace is cut around.
const momentsCut = 3

// cutTrace chooses at most limit of n events: those the moments point at,
// first moments first, and as many of their neighbours as fit, the same
// number on each side of each.
func cutTrace(n int, important []int, limit int) []int {
	if n <= limit {
		return upTo(n)
	}
	var seeds []int
	seen := map[int]bool{}
	for _, i := range important {
		if !seen[i] && len(seeds) < limit {
			seen[i] = true
			seeds = append(seeds, i)
		}
	}
	if len(seeds) == 0 {
		return upTo(limit)
	}
	slices.Sort(seeds)
	// covered is how many events windows of radius k around the seeds hold.
	covered := func(k int) int {
		total, end := 0, -1
		for _, s := range seeds {
			lo, hi := max(s-k, end+1), min(s+k, n-1)
			if hi >= lo {
				total += hi - lo + 1
				end = hi
			}
		}
		return total
	}
	k := sort.Search(n, func(k int) bool { return covered(k+1) > limit })
	keep := map[int]bool{}
	for _, s := range seeds {
		for i := max(s-k, 0); i <= min(s+k, n-1); i++ {
			keep[i] = true
		}
	}
	for _, s := range seeds {
		for _, i := range []int{s - k - 1, s + k + 1} {
			if len(keep) < limit && i >= 0 && i < n {
				keep[i] = true
			}
		}
	}
	out := make([]int, 0, len(keep))
	for i := range keep {
		out = append(out, i)
	}
	slices.Sort(out)
	return out
}

// upTo is 0, 1, … n-1.
func upTo(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i
	}
	return out
}

// commandText renders a command as Redis executed it: the name in
// capitals, each argument bare, or quoted when it must be.
func commandText(args []string) string {
	var b strings.Builder
	b.WriteString(strings.ToUpper(args[0]))
	for _, a := range args[1:] {
		b.WriteByte(' ')
		if a == "" || strings.ContainsAny(a, " \"\\") || strconv.Quote(a) != `"`+a+`"` {
			b.WriteString(strconv.Quote(a))
		} else {
			b.WriteString(a)
		}
	}
	return b.String()
}
