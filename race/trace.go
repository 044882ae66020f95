package race

import (
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
	pos    int   // where sent stands in the goroutine's log, when sent is known
	// decision is the index of the event's decision, and decided whether
	// the event has one.
	decision int
	decided  bool
	mark     string
}

// decision is one Allow call as the trace shows it.
type decision struct {
	g       int
	allowed bool // as the client saw it
	events  []int
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
		e := traceEvent{line: l, name: strings.ToUpper(l.args[0]), g: g}
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
			e.decision, e.decided = offset[e.g]+k, true
		}
	}
	for i := range events {
		e := &events[i]
		if e.script {
			e.decision, e.decided = events[e.owner].decision, events[e.owner].decided
		}
		if e.decided {
			decisions[e.decision].events = append(decisions[e.decision].events, i)
		}
	}
	return decisions
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
