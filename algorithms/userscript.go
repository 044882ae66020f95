package algorithms

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ratelab/ratelab/internal/field"
)

// UserScript is a user's own Lua limiter, raced and compared like the
// built-in ones. The script gets the client's key as KEYS[1] and ARGV built
// from Args, a space-separated template whose placeholders are {limit},
// {window_ms}, {now_ms} (the caller's time; empty with ClockRedis) and
// {member} (unique per request); other words pass as they are. Its reply is
// an integer 1 (allowed) or 0, or an array whose first element is that,
// optionally followed by remaining and retry-after in milliseconds.
type UserScript struct {
	// Name is how reports call it.
	Name string
	// Source is the Lua source.
	Source string
	// Args is the ARGV template.
	Args string
}

// DefaultScriptArgs is the ARGV template of ratelab's own scripts.
const DefaultScriptArgs = "{limit} {window_ms} {now_ms} {member}"

var placeholders = []string{"{limit}", "{window_ms}", "{now_ms}", "{member}"}

// Validate checks the template and that there is a script.
func (u UserScript) Validate() error {
	if strings.TrimSpace(u.Source) == "" {
		return fmt.Errorf("script %s is empty", u.Name)
	}
	for _, w := range strings.Fields(u.Args) {
		if strings.HasPrefix(w, "{") && strings.HasSuffix(w, "}") && !contains(placeholders, w) {
			return fmt.Errorf("unknown placeholder %s (known: %s)", w, strings.Join(placeholders, " "))
		}
	}
	return nil
}

func contains(list []string, s string) bool {
	for _, l := range list {
		if l == s {
			return true
		}
	}
	return false
}

// Info describes the script for reports: atomic (Redis runs a script whole),
// state that ratelab cannot check, and judged by the sliding log's rule
// (at most the limit in any window-long span), the strictest of the
// guarantees, which a script of another algorithm may rightly break.
func (u UserScript) Info() Info {
	return Info{Name: u.Name, Description: "your script, ARGV " + u.Args, Atomic: true, State: StateNone,
		RoundTrips: "1", Clocks: true, CallerClock: true, KeysPerClient: 1, Guarantee: SlidingWindow}
}

// New builds the limiter on client: a Scripted with ARGV from the template
// and the reply read as described on UserScript.
func (u UserScript) New(client redis.UniversalClient, p Policy, opts ...Option) (Limiter, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	if err := u.Validate(); err != nil {
		return nil, err
	}
	o := Options{Now: time.Now}
	for _, opt := range opts {
		opt(&o)
	}
	return newScripted(u.Name, client, p, o, u.Source, 1, templateArgs(p, strings.Fields(u.Args)), parseUserReply), nil
}

// templateArgs builds ARGV from the template's words. A request has one
// member however often {member} appears; it is not reported in the
// Decision, since what the script keeps is its own.
func templateArgs(p Policy, words []string) argvFunc {
	ms := newMembers()
	return func(now string) ([]any, string) {
		args := make([]any, len(words))
		member := ""
		for i, w := range words {
			switch w {
			case "{limit}":
				args[i] = p.Limit
			case "{window_ms}":
				args[i] = p.windowMillis()
			case "{now_ms}":
				args[i] = now
			case "{member}":
				if member == "" {
					member = ms.next()
				}
				args[i] = member
			default:
				args[i] = w
			}
		}
		return args, ""
	}
}

// parseUserReply reads a user script's reply: 1 (allowed) or 0, or an array
// that starts with it, optionally followed by remaining and retry-after in
// ms (kept only for a denial); further elements are ignored.
func parseUserReply(reply any) (Decision, error) {
	vals, ok := reply.([]any)
	if !ok {
		vals = []any{reply}
	}
	if len(vals) == 0 {
		return Decision{}, errors.New("empty reply: want 1 or 0 first")
	}
	nums := make([]int64, 0, 3)
	for i, v := range vals[:min(len(vals), 3)] {
		n, ok := v.(int64)
		if !ok {
			return Decision{}, fmt.Errorf("reply element %d is %T (%v), want an integer", i+1, v, v)
		}
		nums = append(nums, n)
	}
	if nums[0] != 0 && nums[0] != 1 {
		return Decision{}, fmt.Errorf("reply starts with %d, want 1 (allowed) or 0", nums[0])
	}
	d := Decision{Allowed: nums[0] == 1}
	if len(nums) > 1 {
		d.Remaining = nums[1]
	}
	if len(nums) > 2 && !d.Allowed {
		retry, err := retryAfterMillis(nums[2])
		if err != nil {
			return Decision{}, fmt.Errorf("reply element 3: %w", err)
		}
		d.RetryAfter = retry
	}
	return d, nil
}

// ReadUserScript reads a user's Lua limiter from path, with the ARGV
// template args, called name in reports ("script:" and the file's name when
// empty). Errors are *field.Error naming Path, Name or Args.
func ReadUserScript(path, args, name string) (UserScript, error) {
	src, err := os.ReadFile(path)
	if err != nil {
		return UserScript{}, field.Errorf("Path", ": %v", err)
	}
	if name == "" {
		name = "script:" + strings.TrimSuffix(filepath.Base(path), ".lua")
	}
	if _, taken := Lookup(name); taken {
		return UserScript{}, field.Errorf("Name", "%q is a built-in limiter's name", name)
	}
	u := UserScript{Name: name, Source: string(src), Args: args}
	if err := u.Validate(); err != nil {
		return u, field.Errorf("Args", ": %v", err)
	}
	return u, nil
}
