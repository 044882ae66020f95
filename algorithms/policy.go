package algorithms

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/ratelab/ratelab/internal/field"
)

// ParsePolicy parses "100/1m" (requests/window) into a policy and checks
// it. Its errors name no flag: the caller knows which one it parsed.
func ParsePolicy(s string) (Policy, error) {
	n, w, ok := strings.Cut(s, "/")
	if !ok {
		return Policy{}, fmt.Errorf("%q: want requests/window, such as 100/1m", s)
	}
	limit, err := strconv.ParseInt(strings.TrimSpace(n), 10, 64)
	if err != nil {
		return Policy{}, fmt.Errorf("%q: %q is not a whole number", s, n)
	}
	window, err := time.ParseDuration(strings.TrimSpace(w))
	if err != nil {
		return Policy{}, fmt.Errorf("%q: window: %w", s, err)
	}
	p := Policy{Limit: limit, Window: window}
	if err := p.Validate(); err != nil {
		var fe *field.Error
		if errors.As(err, &fe) {
			return p, fmt.Errorf("%q: %s", s, fe.Render(strings.ToLower))
		}
		return p, fmt.Errorf("%q: %w", s, err)
	}
	return p, nil
}
