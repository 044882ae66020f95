package algorithms

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/ratelab/ratelab/internal/field"
)

// Limit is a limit as the command line gives it: a policy and, when it
// names one, an algorithm.
type Limit struct {
	// Policy is the limit, its Burst zero when none is given.
	Policy Policy
	// Algorithm is the algorithm named; empty when none is.
	Algorithm string
}

// String renders l as ParseLimit reads it: 10/1s, 10/1s:gcra:burst=6.
func (l Limit) String() string {
	s := fmt.Sprintf("%d/%s", l.Policy.Limit, l.Policy.Window)
	if l.Algorithm != "" {
		s += ":" + l.Algorithm
	}
	if l.Policy.Burst > 0 {
		s += ":burst=" + strconv.FormatInt(l.Policy.Burst, 10)
	}
	return s
}

// ParseLimit parses LIMIT/WINDOW, then optionally :ALGORITHM (one of
// Algorithms()) and :burst=N: 100/1m, 100/1m:gcra, 10/1s:gcra:burst=6,
// 10/1s:burst=6. A burst is the most admitted at one instant, for the
// algorithms that have one (HasBurst): one named with another is refused;
// one given without an algorithm is the caller's to check, once it knows
// the algorithm (CheckBurst). LIMIT/WINDOW is read as ParsePolicy reads it.
// Its errors name no flag: the caller knows which one it parsed.
func ParseLimit(s string) (Limit, error) {
	parts := strings.Split(s, ":")
	var l Limit
	burst := ""
	for _, part := range parts[1:] {
		part = strings.TrimSpace(part)
		switch b, isBurst := strings.CutPrefix(part, "burst="); {
		case isBurst && burst != "":
			return Limit{}, fmt.Errorf("%q: two bursts: give one", s)
		case isBurst:
			burst = b
			if burst == "" {
				return Limit{}, fmt.Errorf("%q: burst= needs a whole number, such as burst=6", s)
			}
		case burst != "":
			return Limit{}, fmt.Errorf("%q: %q after the burst: want LIMIT/WINDOW:ALGORITHM:burst=N", s, part)
		case l.Algorithm != "":
			return Limit{}, fmt.Errorf("%q: %q: want LIMIT/WINDOW, then :ALGORITHM and :burst=N", s, part)
		case !isAlgorithm(part):
			return Limit{}, fmt.Errorf("%q: %q is not an algorithm (want %s)", s, part, strings.Join(Algorithms(), ", "))
		default:
			l.Algorithm = part
		}
	}
	p, err := parsePolicy(s, parts[0])
	if err != nil {
		return Limit{}, err
	}
	if burst != "" {
		n, err := strconv.ParseInt(burst, 10, 64)
		if err != nil {
			return Limit{}, fmt.Errorf("%q: burst %q is not a whole number", s, burst)
		}
		if n < 1 {
			return Limit{}, fmt.Errorf("%q: burst must be at least 1 (got %d)", s, n)
		}
		p.Burst = n
	}
	if err := validate(s, p); err != nil {
		return Limit{}, err
	}
	if l.Algorithm != "" {
		if err := CheckBurst(l.Algorithm, p); err != nil {
			return Limit{}, fmt.Errorf("%q: %s", s, renderField(err))
		}
	}
	l.Policy = p
	return l, nil
}

// ParsePolicy parses "100/1m" (requests/window), or with a burst
// "10/1s:burst=6", into a policy and checks it; the algorithm, which
// decides whether a burst is taken, is the caller's to check
// (CheckBurst). nginx's spelling of a rate, "10r/s" or "10r/m", reads as
// 10/1s or 10/1m. Its errors name no flag: the caller knows which one it
// parsed.
func ParsePolicy(s string) (Policy, error) {
	l, err := ParseLimit(s)
	if err != nil {
		return Policy{}, err
	}
	if l.Algorithm != "" {
		return Policy{}, fmt.Errorf("%q: %q: want LIMIT/WINDOW or LIMIT/WINDOW:burst=N, such as 100/1m", s, l.Algorithm)
	}
	return l.Policy, nil
}

// parsePolicy reads LIMIT/WINDOW, the first part of s.
func parsePolicy(s, part string) (Policy, error) {
	n, w, ok := strings.Cut(part, "/")
	if !ok {
		return Policy{}, fmt.Errorf("%q: want requests/window, such as 100/1m", s)
	}
	n, w = strings.TrimSpace(n), strings.TrimSpace(w)
	if r, ok := strings.CutSuffix(n, "r"); ok && (w == "s" || w == "m") {
		// nginx's rate: 10r/s is ten a second.
		n, w = r, "1"+w
	}
	limit, err := strconv.ParseInt(n, 10, 64)
	if err != nil {
		return Policy{}, fmt.Errorf("%q: %q is not a whole number", s, n)
	}
	window, err := time.ParseDuration(w)
	if err != nil {
		if _, err := time.ParseDuration("1" + w); err == nil {
			return Policy{}, fmt.Errorf("%q: the window %q needs a number: a window such as 1%s", s, w, w)
		}
		return Policy{}, fmt.Errorf("%q: the window %q is not a duration: a window such as 1s, 10s, 1m or 1h", s, w)
	}
	return Policy{Limit: limit, Window: window}, nil
}

// validate checks p, read from s.
func validate(s string, p Policy) error {
	if err := p.Validate(); err != nil {
		return fmt.Errorf("%q: %s", s, renderField(err))
	}
	return nil
}

// renderField words a *field.Error with its field in lower case ("limit
// must be at least 1"), and any other error as it is.
func renderField(err error) string {
	var fe *field.Error
	if errors.As(err, &fe) {
		return fe.Render(strings.ToLower)
	}
	return err.Error()
}

// HasBurst reports whether the algorithm called name takes a Policy's
// Burst: the token bucket and GCRA, whose guarantee is BurstRefill
// (TestHasBurstIsBurstRefill holds the two equal).
func HasBurst(name string) bool {
	switch name {
	case "token-bucket", "gcra":
		return true
	}
	return false
}

// CheckBurst reports whether the algorithm called name can enforce p: a
// *field.Error naming Burst when p has one and the algorithm has none
// ("" is the sliding-window rule of an audit, which has none).
func CheckBurst(name string, p Policy) error {
	if p.Burst == 0 || HasBurst(name) {
		return nil
	}
	if name == "" {
		name = "the sliding-window rule"
	}
	return field.Errorf("Burst", "is for token-bucket and gcra: %s has none (got burst=%d)", name, p.Burst)
}
