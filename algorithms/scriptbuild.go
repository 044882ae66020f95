package algorithms

import (
	"embed"
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// Each algorithm is written once, in algorithms/lua/ALGORITHM.lua: its
// check, its commit and its refund, as Lua statements between "-- @check",
// "-- @commit" and "-- @refund" lines, after the comment that says what its
// state is and a "-- @state" line naming what its check hands its commit.
// A name that ends in "_" is the limit's own: its inputs (key_, key2_,
// limit_, window_, burst_, need_, take_, take_s_ and window_s_ as text as
// they came, member_, mark_), its answers (ok_, room_, left_, retry_,
// reset0_, reset1_, mark_) and its state; now, now_s and asked are the
// request's time. Every script Redis runs for an algorithm is built from
// these files:
//
//   - decide.lua, every algorithm in one script that interprets its
//     arguments: algorithms/lua/decide.lua with each algorithm's statements
//     made functions. It is checked in, for the nginx module and for users
//     to copy; go generate ./algorithms writes it, and TestDecideIsBuilt
//     fails when it is not what these files build.
//   - a script per shape (the algorithms of a request's limits, in order,
//     and which are shadows), built when a Decider first meets the shape:
//     each limit's statements in line, with their names numbered, and no
//     arguments to interpret but the limits' numbers. The Decider decides
//     with it, and the package's limiters run the shape of their one limit.
//
//go:generate go test . -count=1 -run ^TestDecideIsBuilt$ -update

//go:embed lua/*.lua
var luaSources embed.FS

// fragment is one algorithm's source.
type fragment struct {
	doc                   string   // the comment before "-- @state"
	state                 []string // what check hands commit
	check, commit, refund string
}

// fragmentOf reads the source of algorithm name.
func fragmentOf(name string) (fragment, error) {
	b, err := luaSources.ReadFile("lua/" + name + ".lua")
	if err != nil {
		return fragment{}, err
	}
	var f fragment
	section := "doc"
	parts := map[string]*strings.Builder{}
	for _, line := range strings.SplitAfter(string(b), "\n") {
		trimmed := strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(trimmed, "-- @state"):
			f.state = strings.Fields(strings.TrimPrefix(trimmed, "-- @state"))
			continue
		case trimmed == "-- @check", trimmed == "-- @commit", trimmed == "-- @refund":
			section = strings.TrimPrefix(trimmed, "-- @")
			continue
		}
		if parts[section] == nil {
			parts[section] = &strings.Builder{}
		}
		parts[section].WriteString(line)
	}
	text := func(s string) string {
		if parts[s] == nil {
			return ""
		}
		return parts[s].String()
	}
	f.doc, f.check, f.commit, f.refund = text("doc"), text("check"), text("commit"), text("refund")
	if len(f.state) == 0 || len(f.state) > 3 || f.check == "" || f.commit == "" || f.refund == "" {
		return fragment{}, fmt.Errorf("lua/%s.lua: want a @state of one to three names, a @check, a @commit and a @refund", name)
	}
	return f, nil
}

// uses reports whether the fragment's check or commit reads the limit's
// input name.
func (f fragment) uses(name string) bool {
	re := regexp.MustCompile(`\b` + regexp.QuoteMeta(name) + `(\W|$)`)
	return re.MatchString(f.check) || re.MatchString(f.commit)
}

// limitNames are a limit's own names in the sources: those that end in "_".
var limitNames = regexp.MustCompile(`\b[a-z][a-z0-9_]*_\b`)

// numbered is src with the limit's own names numbered i.
func numbered(src string, i int) string {
	return limitNames.ReplaceAllStringFunc(src, func(name string) string { return name + strconv.Itoa(i) })
}

// indent indents each line of src that is not empty by prefix.
func indent(src, prefix string) string {
	lines := strings.SplitAfter(src, "\n")
	for i, l := range lines {
		if strings.TrimSpace(l) != "" {
			lines[i] = prefix + l
		}
	}
	return strings.Join(lines, "")
}

// luaName is name as a Lua identifier: fixed-window is fixed_window.
func luaName(name string) string { return strings.ReplaceAll(name, "-", "_") }

// preamble is the first lines of every built script: the shebang and what
// it means.
func preamble() (string, error) {
	b, err := luaSources.ReadFile("lua/decide.lua")
	if err != nil {
		return "", err
	}
	lines := strings.SplitAfter(string(b), "\n")
	return strings.Join(lines[:5], ""), nil
}

// buildDecide builds decide.lua: the driver in lua/decide.lua with every
// algorithm's check, commit and refund made functions where it says
// "-- @algorithms", each made only when the run names its algorithm.
func buildDecide() (string, error) {
	b, err := luaSources.ReadFile("lua/decide.lua")
	if err != nil {
		return "", err
	}
	var algs strings.Builder
	for i, name := range algorithmNames {
		f, err := fragmentOf(name)
		if err != nil {
			return "", err
		}
		state := strings.Join(f.state, ", ")
		if i > 0 {
			algs.WriteString("\n")
		}
		algs.WriteString(f.doc)
		fmt.Fprintf(&algs, "if used['%s'] then\n", name)
		fmt.Fprintf(&algs, "  check['%s'] = function(key_, key2_, now, now_s, asked, limit_, window_, burst_, need_, take_)\n", name)
		fmt.Fprintf(&algs, "    local ok_, room_, left_, retry_, reset0_, reset1_\n    local %s\n", state)
		algs.WriteString(indent(f.check, "    "))
		fmt.Fprintf(&algs, "    return ok_, room_, left_, retry_, reset0_, reset1_, %s\n  end\n", state)
		fmt.Fprintf(&algs, "  commit['%s'] = function(key_, key2_, limit_, window_, burst_, take_, take_s_, window_s_, member_, %s)\n", name, state)
		algs.WriteString("    local mark_\n")
		algs.WriteString(indent(f.commit, "    "))
		algs.WriteString("    return mark_\n  end\n")
		algs.WriteString("  if refunds then\n")
		fmt.Fprintf(&algs, "    refund['%s'] = function(key_, key2_, limit_, window_, burst_, take_, member_, mark_)\n", name)
		algs.WriteString(indent(f.refund, "      "))
		algs.WriteString("    end\n  end\nend\n")
	}
	src := string(b)
	const mark = "-- @algorithms\n"
	if !strings.Contains(src, mark) {
		return "", fmt.Errorf("lua/decide.lua: no %q line", strings.TrimSpace(mark))
	}
	return strings.Replace(src, mark, algs.String(), 1), nil
}

// algorithmNames are the algorithms decide.lua implements, in the order
// Algorithms lists them (TestIsAlgorithmIsAlgorithms holds them equal),
// and the in-flight limit (InFlight), which decides in the same call.
var algorithmNames = []string{"fixed-window", "sliding-log", "sliding-counter", "token-bucket", "gcra", InFlight}

// shapeLimit is one limit of a shape: its algorithm, and whether it is a
// shadow.
type shapeLimit struct {
	algorithm string
	shadow    bool
}

// maxShape is the most limits a script built per shape decides: each
// takes up to twenty of the 200 locals a Lua function may have. A request
// of more is decided by decide.lua.
const maxShape = 8

// shape is what a script built per shape takes: in ARGV "decide" and the
// request's time, as decide.lua, then per limit its limit, window in ms and
// cost, then the member when the algorithm keeps a log, the burst when it
// has one.
type shape struct {
	limits []shapeLimit
	// members and bursts say which limits take a member and a burst.
	members, bursts []bool
	// args and keys are a request's ARGV and KEYS.
	args, keys int
}

// shapeOf is the shape of limits: what each takes, and the script's text.
func shapeOf(limits []shapeLimit) (shape, string, error) {
	if len(limits) == 0 || len(limits) > maxShape {
		return shape{}, "", fmt.Errorf("a shape of %d limits: want 1 to %d", len(limits), maxShape)
	}
	pre, err := preamble()
	if err != nil {
		return shape{}, "", err
	}
	s := shape{limits: limits, members: make([]bool, len(limits)), bursts: make([]bool, len(limits)), args: 2}
	var names []string
	var body, answers strings.Builder
	var admits []string
	text := false // a limit reads the time as text (now_s)
	for j, l := range limits {
		i := j + 1
		f, err := fragmentOf(l.algorithm)
		if err != nil {
			return shape{}, "", err
		}
		name := l.algorithm
		if l.shadow {
			name += " (shadow)"
		} else {
			admits = append(admits, "ok_"+strconv.Itoa(i))
		}
		names = append(names, name)
		fmt.Fprintf(&body, "  -- %d: %s\n", i, name)
		fmt.Fprintf(&body, "  local key_%d = KEYS[k + %d]\n", i, s.keys)
		s.keys++
		if f.uses("key2_") {
			fmt.Fprintf(&body, "  local key2_%d = KEYS[k + %d]\n", i, s.keys)
			s.keys++
		}
		at := s.args
		fmt.Fprintf(&body, "  local limit_%[1]d, window_%[1]d, take_%[1]d = tonumber(ARGV[a + %[2]d]), tonumber(ARGV[a + %[3]d]), tonumber(ARGV[a + %[4]d])\n", i, at, at+1, at+2)
		s.args += 3
		if f.uses("take_s_") {
			fmt.Fprintf(&body, "  local take_s_%d = ARGV[a + %d]\n", i, at+2)
		}
		text = text || f.uses("now_s")
		if f.uses("window_s_") {
			fmt.Fprintf(&body, "  local window_s_%d = ARGV[a + %d]\n", i, at+1)
		}
		if f.uses("member_") {
			s.members[j] = true
			fmt.Fprintf(&body, "  local member_%d = ARGV[a + %d]\n", i, s.args)
			s.args++
		}
		if f.uses("burst_") {
			s.bursts[j] = true
			fmt.Fprintf(&body, "  local burst_%d = tonumber(ARGV[a + %d])\n", i, s.args)
			s.args++
		}
		fmt.Fprintf(&body, "  local need_%[1]d = max(take_%[1]d, 1)\n", i)
		fmt.Fprintf(&body, "  local ok_%[1]d, room_%[1]d, left_%[1]d, retry_%[1]d, reset0_%[1]d, reset1_%[1]d\n", i)
		fmt.Fprintf(&body, "  local %s\n", numbered(strings.Join(f.state, ", "), i))
		body.WriteString("  do\n")
		body.WriteString(indent(numbered(f.check, i), "    "))
		body.WriteString("  end\n")

		fmt.Fprintf(&answers, "  do\n    local mark_%[1]d, remaining, retry, reset = 0, room_%[1]d, 0, reset0_%[1]d\n", i)
		fmt.Fprintf(&answers, "    if ok_%[1]d then\n      if allowed and take_%[1]d > 0 then\n", i)
		answers.WriteString(indent(numbered(f.commit, i), "        "))
		fmt.Fprintf(&answers, "        remaining, reset = left_%[1]d, reset1_%[1]d\n      end\n    else\n      retry = retry_%[1]d\n    end\n", i)
		r := 2 + 5*j
		fmt.Fprintf(&answers, "    reply[%d], reply[%d], reply[%d], reply[%d], reply[%d] = ok_%d and 1 or 0, remaining, retry, max(reset, 0), mark_%d\n  end\n",
			r, r+1, r+2, r+3, r+4, i, i)
	}
	allowed := "true"
	if len(admits) > 0 {
		allowed = strings.Join(admits, " and ")
	}
	var src strings.Builder
	src.WriteString(pre)
	fmt.Fprintf(&src, `-- Decides a request of %d limits: %s.
-- Built by ratelab for this shape from algorithms/lua, as decide.lua is,
-- and decides as decide.lua does, without interpreting its arguments.
-- KEYS: each limit's keys. ARGV: "decide", now in ms from the caller (""
-- to read Redis's TIME), then per limit its limit, window in ms and cost,
-- and its request's member (a log) or its burst (a bucket). The reply is
-- decide.lua's; joined requests as decide.lua's: %d arguments and %d keys
-- each.
`, len(limits), strings.Join(names, ", "), s.args, s.keys)
	src.WriteString(`local floor, ceil, max, min, tonumber, tostring = math.floor, math.ceil, math.max, math.min, tonumber, tostring

-- Redis's time in ms, read at most once per run, and as text, made at
-- most once per run by the shapes whose limits read it.
local clock, clock_s
local function redis_time()
  if not clock then
    if redis.replicate_commands then
      redis.replicate_commands()
    end
    local t = redis.call('TIME')
    clock = tonumber(t[1]) * 1000 + floor(tonumber(t[2]) / 1000)
  end
  return clock
end

local function request(a, k)
  local now_s = ARGV[a + 1]
  local now = tonumber(now_s)
  if not now then
    now = redis_time()
`)
	if text {
		src.WriteString(`    if not clock_s then
      clock_s = tostring(clock)
    end
    now_s = clock_s
`)
	}
	src.WriteString(`  end
  local asked = now
`)
	src.WriteString(body.String())
	// The reply's table made whole at once: Lua grows a table filled one
	// index at a time three times for one limit.
	fmt.Fprintf(&src, "  local allowed = %s\n  local reply = {0%s}\n  if allowed then\n    reply[1] = 1\n  end\n", allowed,
		strings.Repeat(", 0", 5*len(limits)))
	src.WriteString(answers.String())
	fmt.Fprintf(&src, `  return reply
end

if #ARGV == %[1]d then
  return request(1, 1)
end

-- Joined: each request decided in turn, its error its own.
local replies = {}
local a, k, n = 1, 1, #ARGV
while a <= n do
  local ok, reply = pcall(request, a, k)
  if not ok then
    if type(reply) == 'table' and reply.err then
      reply = redis.error_reply(reply.err)
    else
      reply = redis.error_reply(tostring(reply))
    end
  end
  replies[#replies + 1] = reply
  a, k = a + %[1]d, k + %[2]d
end
return replies
`, s.args, s.keys)
	return s, src.String(), nil
}
