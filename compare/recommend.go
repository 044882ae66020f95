package compare

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/ratelab/ratelab/algorithms"
)

// roles say what each algorithm is for; the figures behind them are measured.
func role(name string) string {
	switch name {
	case "fixed-window":
		return "cheapest, but bursts at window edges"
	case "sliding-log":
		return "for low limits: memory grows with the limit"
	case "sliding-counter":
		return "the right default"
	case "token-bucket":
		return "for a smooth rate that allows bursts"
	case "gcra":
		return "a token bucket's rate in one arrival time, no refill arithmetic"
	}
	return ""
}

// recommend writes the one-line recommendation from the measured figures.
func recommend(r Result, p algorithms.Policy) string {
	var parts []string
	if ro := role(r.Algorithm); ro != "" {
		parts = append(parts, ro)
	}
	switch {
	case r.FalseAllowRate == nil:
	case *r.FalseAllowRate == 0 && *r.FalseDenyRate == 0:
		parts = append(parts, "exact")
	default:
		parts = append(parts, fmt.Sprintf("estimate (%s wrongly allowed, %s wrongly limited)",
			Percent(*r.FalseAllowRate), Percent(*r.FalseDenyRate)))
	}
	if r.BoundaryMaxInWindow != nil && *r.BoundaryMaxInWindow > p.Limit {
		parts = append(parts, fmt.Sprintf("%d of %d in one window across an edge", *r.BoundaryMaxInWindow, p.Limit))
	}
	if r.HammerLockedOut {
		parts = append(parts, "locks out a client that keeps retrying")
	}
	keys := "1 key"
	if r.KeysPerClient != 1 {
		keys = strconv.Itoa(r.KeysPerClient) + " keys"
	}
	mem := keys
	if limit, b, ok := bytesNear(r.BytesPerClient, p.Limit); ok {
		mem += fmt.Sprintf(", ~%d bytes per client at limit %s", b, limit)
	}
	parts = append(parts, mem)
	if r.OpsPerSec != nil {
		parts = append(parts, fmt.Sprintf("%.0f decisions/s", *r.OpsPerSec))
	}
	return r.Algorithm + ": " + strings.Join(parts, "; ")
}

// bytesNear picks the measured memory figure at the limit nearest to limit.
func bytesNear(m map[string]int64, limit int64) (string, int64, bool) {
	best, bestDist := "", int64(-1)
	for _, l := range MemoryLimits() {
		k := strconv.FormatInt(l, 10)
		if _, ok := m[k]; !ok {
			continue
		}
		d := l - limit
		if d < 0 {
			d = -d
		}
		if bestDist < 0 || d < bestDist {
			best, bestDist = k, d
		}
	}
	if best == "" {
		return "", 0, false
	}
	return best, m[best], true
}

// Percent renders a rate as a percentage with enough digits to show small ones.
func Percent(rate float64) string {
	pct := rate * 100
	switch {
	case pct == 0:
		return "0%"
	case pct < 0.01:
		return strconv.FormatFloat(pct, 'f', 4, 64) + "%"
	case pct < 1:
		return strconv.FormatFloat(pct, 'f', 3, 64) + "%"
	}
	return strconv.FormatFloat(pct, 'f', 2, 64) + "%"
}
