package compare

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/ratelab/ratelab/internal/plural"
)

// Recommendations writes one line per result, in order, saying when to use
// the algorithm. Every word of it follows from the figures of this run:
// what it admitted beyond the limit or below it in each workload run, its
// memory per client, its Redis work, its latency and its throughput beside
// the others'. An algorithm its own figures show over the limit is never
// called exact or fit where the limit must hold; a workload that did not
// run is not spoken of.
func (rep Report) Recommendations() []string {
	var fastest float64
	measured := 0
	for _, r := range rep.Results {
		if r.OpsPerSec != nil {
			fastest = max(fastest, *r.OpsPerSec)
			measured++
		}
	}
	lines := make([]string, len(rep.Results))
	for i, r := range rep.Results {
		lines[i] = recommend(r, rep.Config.Limit, fastest, measured)
	}
	return lines
}

// recommend writes r's line: when to use it, then the figures that say so.
func recommend(r Result, limit int64, fastest float64, measured int) string {
	var over, under []string
	accuracy := r.BurstOverAdmitted != nil || r.BoundaryMaxInWindow != nil || r.HammerMaxInWindow != nil || r.FalseAllowRate != nil
	if r.BurstOverAdmitted != nil && *r.BurstOverAdmitted > 0 {
		over = append(over, fmt.Sprintf("%d beyond the limit when requests raced at one key", *r.BurstOverAdmitted))
	}
	worst := limit // the most admitted in one window's span
	if r.BoundaryMaxInWindow != nil && *r.BoundaryMaxInWindow > limit {
		over = append(over, fmt.Sprintf("%d of %d in one window across a window edge", *r.BoundaryMaxInWindow, limit))
		worst = max(worst, *r.BoundaryMaxInWindow)
	}
	if r.HammerMaxInWindow != nil && *r.HammerMaxInWindow > limit {
		over = append(over, fmt.Sprintf("%d of %d in one window while hammered", *r.HammerMaxInWindow, limit))
		worst = max(worst, *r.HammerMaxInWindow)
	}
	if r.FalseAllowRate != nil && *r.FalseAllowRate > 0 {
		over = append(over, Percent(*r.FalseAllowRate)+" of decisions wrongly allowed")
	}
	if r.BurstUnderAdmitted != nil && *r.BurstUnderAdmitted > 0 {
		under = append(under, fmt.Sprintf("%d below the limit in the bursts", *r.BurstUnderAdmitted))
	}
	if r.FalseDenyRate != nil && *r.FalseDenyRate > 0 {
		under = append(under, Percent(*r.FalseDenyRate)+" wrongly limited")
	}
	if r.HammerLockedOut {
		under = append(under, "a client hammered, then retrying, was not let back in within 10 windows")
	}
	grows, memory := memoryText(r)

	low := ""
	if grows {
		low = " and limits are low"
	}
	var use string
	switch {
	case !accuracy && !r.HammerLockedOut:
		use = "accuracy not measured in this run"
	case r.BurstOverAdmitted != nil && *r.BurstOverAdmitted > 0:
		use = "avoid: requests that race at one key get past it"
	case r.HammerLockedOut:
		use = "avoid: it locks out a client that keeps retrying"
	case worst > limit:
		use = "where up to " + times(worst, limit) + " the limit in one window's span is acceptable"
	case len(over) > 0:
		use = "where an estimate of the limit is acceptable"
	case len(under) > 0:
		use = "where the limit must hold" + low + " and some wrongful denials are acceptable"
		over = []string{"held the limit in every workload run"}
	default:
		use = "where the limit must hold" + low
		over = []string{"held the limit in every workload run"}
		if r.FalseAllowRate != nil {
			over[0] += ", and exact: no decision wrongly allowed or limited"
		}
	}

	parts := append(over, under...)
	parts = append(parts, memory)
	if work := workText(r); work != "" {
		parts = append(parts, work)
	}
	if r.OpsPerSec != nil {
		speed := fmt.Sprintf("%.0f decisions/s", *r.OpsPerSec)
		switch below := 1 - *r.OpsPerSec/fastest; {
		case measured > 1 && below == 0:
			speed += ", the fastest here"
		case measured > 1:
			speed += fmt.Sprintf(", %s below the fastest", wholePercent(below))
		}
		if r.LatencyMicros != nil {
			speed += ", p99 " + latency(r.LatencyMicros.P99)
		}
		parts = append(parts, speed)
	}
	return r.Algorithm + ": " + use + ": " + strings.Join(parts, "; ")
}

// memoryText says how many keys a client takes and, when measured, how
// many bytes, and whether they grow with the limit (ten times or more from
// the lowest limit measured to the highest).
func memoryText(r Result) (bool, string) {
	keys := plural.Count(r.KeysPerClient, "key")
	var limits []int64
	for _, l := range MemoryLimits() {
		if _, ok := r.BytesPerClient[strconv.FormatInt(l, 10)]; ok {
			limits = append(limits, l)
		}
	}
	if len(limits) == 0 {
		return false, keys + " a client"
	}
	at := func(l int64) int64 { return r.BytesPerClient[strconv.FormatInt(l, 10)] }
	lo, hi := limits[0], limits[len(limits)-1]
	if len(limits) > 1 && at(hi) >= 10*at(lo) {
		return true, fmt.Sprintf("%s a client, its memory grows with the limit: %s at limit %d, %s at %d",
			keys, Bytes(at(lo)), lo, Bytes(at(hi)), hi)
	}
	least, most := at(lo), at(lo)
	for _, l := range limits {
		least, most = min(least, at(l)), max(most, at(l))
	}
	size := Bytes(most)
	if least != most {
		size = Bytes(least) + " to " + size
	}
	if len(limits) == 1 {
		return false, fmt.Sprintf("%s a client, %s at limit %d", keys, size, lo)
	}
	return false, fmt.Sprintf("%s a client, %s at every limit from %d to %d", keys, size, lo, hi)
}

// workText says what Redis does for one decision, when measured.
func workText(r Result) string {
	var w []string
	if r.RedisCommands != nil {
		w = append(w, strconv.FormatFloat(*r.RedisCommands, 'f', 1, 64)+" Redis commands")
	}
	if r.RoundTrips != nil {
		trips := strconv.FormatFloat(*r.RoundTrips, 'f', -1, 64)
		if *r.RoundTrips != math.Trunc(*r.RoundTrips) {
			trips = strconv.FormatFloat(*r.RoundTrips, 'f', 2, 64)
		}
		noun := " round trips"
		if *r.RoundTrips == 1 {
			noun = " round trip"
		}
		w = append(w, "in "+trips+noun)
	}
	if len(w) == 0 {
		return ""
	}
	return strings.Join(w, " ") + " a decision"
}

// latency writes µs as a duration to two decimals of its unit: "4.17ms".
func latency(us int64) string {
	d := time.Duration(us) * time.Microsecond
	switch {
	case d >= time.Second:
		d = d.Round(10 * time.Millisecond)
	case d >= time.Millisecond:
		d = d.Round(10 * time.Microsecond)
	}
	return d.String()
}

// times writes n / of as a factor: "1.49×", "2×".
func times(n, of int64) string {
	return strconv.FormatFloat(math.Round(float64(n)/float64(of)*100)/100, 'f', -1, 64) + "×"
}

// wholePercent writes a share as a whole percentage, or "under 1%".
func wholePercent(share float64) string {
	if share < 0.01 {
		return "under 1%"
	}
	return strconv.FormatFloat(math.Round(share*100), 'f', 0, 64) + "%"
}

// Bytes writes a byte count in B, KiB, MiB, GiB or TiB, with one decimal
// where the unit is larger than a byte and the value is under 100 of it.
func Bytes(b int64) string {
	units := []string{"B", "KiB", "MiB", "GiB", "TiB"}
	v, u := float64(b), 0
	for math.Abs(v) >= 1024 && u < len(units)-1 {
		v /= 1024
		u++
	}
	if u == 0 {
		return strconv.FormatInt(b, 10) + " B"
	}
	digits := 1
	if math.Abs(v) >= 100 {
		digits = 0
	}
	s := strconv.FormatFloat(v, 'f', digits, 64)
	return strings.TrimSuffix(s, ".0") + " " + units[u]
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
