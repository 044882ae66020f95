package bench

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/ratelab/ratelab/audit"
	"github.com/ratelab/ratelab/internal/randid"
)

// runIDPattern is what a run id given by hand (HTTPConfig.RunID) may be:
// a word of letters, digits and . _ : -, up to 64 of them.
var runIDPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:-]{0,63}$`)

// runID is the id of the run cfg (a validated HTTPConfig, before its
// defaults make it this shard's share) is part of: cfg.RunID when given,
// else a hash of what every shard of one run is given alike and what
// decides the identities sent: the target, the request, --start-at, the
// load, the identities and the claims of their tokens (not the secret
// that signs them) and the audit, but not the shard's index nor what
// only shapes the report. Two runs with the same id sent the same identities to the same
// target, so their requests can be judged as one run's.
func (c HTTPConfig) runID() string {
	if c.RunID != "" {
		return c.RunID
	}
	startAt := ""
	if !c.StartAt.IsZero() {
		startAt = c.StartAt.UTC().Format(time.RFC3339Nano)
	}
	body := sha256.Sum256(c.Body)
	// Fields in a fixed order, maps with sorted keys: the same settings make
	// the same bytes on every machine and in every version that keeps them.
	key, _ := json.Marshal(struct {
		Target, Method, ConsumerHeader, StartAt, ExpectAlgorithm, SourceIPs string
		Header                                                              map[string][]string
		Body                                                                string
		Rate                                                                float64
		Duration, Warmup, ExpectWindow                                      time.Duration
		Requests, ExpectLimit                                               int64
		Connections, Consumers, Shards                                      int
		SharedConsumers                                                     bool
		Identities                                                          []string
		JWTClaims                                                           []JWTClaim
		ExpectLimits                                                        []audit.ExpectedLimit
		Routes                                                              []Route
		ConsumerValues                                                      []ConsumerValues
		Rules                                                               bool
	}{c.Target, c.Method, c.ConsumerHeader, startAt, c.ExpectAlgorithm, addrsText(c.SourceIPs),
		c.Header, hex.EncodeToString(body[:]), c.Rate, c.Duration, c.Warmup, c.ExpectWindow,
		c.Requests, c.ExpectLimit, c.Connections, c.Consumers, max(c.Shards, 1), c.SharedConsumers,
		c.Identities, c.JWTClaims, c.ExpectLimits, c.Routes, c.ConsumerValues, c.ExpectRules != nil})
	sum := sha256.Sum256(key)
	return hex.EncodeToString(sum[:8])
}

// mergedRunID is the id of a merge of runs of several ids: a hash of
// them, in order, so that merging the same files again gives it again.
func mergedRunID(runs []Result) string {
	h := sha256.New()
	for _, r := range runs {
		h.Write([]byte(r.RunID + "\n"))
	}
	return "merged-" + hex.EncodeToString(h.Sum(nil)[:8])
}

// RunsError refuses a merge of results that are not shards of one run:
// their run ids differ, or some have none.
type RunsError struct {
	// IDs holds each result's run id, in the order given; empty for a
	// result written before results carried one.
	IDs []string
}

func (e *RunsError) Error() string { return e.Text(nil) }

// Text says which results belong to which run, naming each by its label
// (its file), or "run N" (from 1) when labels are missing: "a.json and
// b.json are run 3f2a…; c.json has no run id".
func (e *RunsError) Text(labels []string) string {
	name := func(i int) string {
		if i < len(labels) && labels[i] != "" {
			return labels[i]
		}
		return fmt.Sprintf("run %d", i+1)
	}
	var order []string
	groups := map[string][]string{}
	for i, id := range e.IDs {
		if _, ok := groups[id]; !ok {
			order = append(order, id)
		}
		groups[id] = append(groups[id], name(i))
	}
	parts := make([]string, 0, len(order))
	for _, id := range order {
		names := groups[id]
		list := names[0]
		if len(names) > 1 {
			list = strings.Join(names[:len(names)-1], ", ") + " and " + names[len(names)-1]
		}
		switch {
		case id == "":
			parts = append(parts, list+" "+verb(len(names), "has", "have")+" no run id (written before results carried one)")
		default:
			parts = append(parts, list+" "+verb(len(names), "is", "are")+" run "+id)
		}
	}
	return "not shards of one run: " + strings.Join(parts, "; ")
}

func verb(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// oneRun is nil when runs are shards of one run: all with the same run
// id, each claiming shards of its own. It is a *RunsError when their ids
// differ, a *ShardsError when two claim one shard. One result alone is
// always one run.
func oneRun(runs []Result) error {
	if len(runs) < 2 {
		return nil
	}
	ids := make([]string, len(runs))
	for i, r := range runs {
		ids[i] = r.RunID
	}
	if ids[0] == "" || slices.ContainsFunc(ids, func(id string) bool { return id != ids[0] }) {
		return &RunsError{IDs: ids}
	}
	return claims(runs, false)
}

// Part is one load machine's run, as a merge keeps it (Result.Parts).
type Part struct {
	RunID string `json:"run_id"`
	// Instance is the run's Result.Instance; empty for one written before
	// results carried one.
	Instance string `json:"instance"`
	// Shard of Shards is the part of its run it claimed to be (0 of 1: the
	// whole).
	Shard  int `json:"shard"`
	Shards int `json:"shards"`
	// StartedUnixMillis is when it began.
	StartedUnixMillis int64 `json:"started_unix_ms"`
}

// parts are the runs r holds: its Parts when it is a merge, else itself.
func (r Result) parts() []Part {
	if len(r.Parts) > 0 {
		return r.Parts
	}
	return []Part{{RunID: r.RunID, Instance: r.Instance, Shard: r.Config.Shard, Shards: max(r.Config.Shards, 1),
		StartedUnixMillis: r.StartedUnixMillis}}
}

// newInstance is a new run's Result.Instance: 8 random bytes in hex.
func newInstance() string { return randid.Hex(8) }

// Clash is a shard of one run that several results claim (ShardsError).
type Clash struct {
	// Runs are the results that claim it, from 0 in the order given.
	Runs  []int
	RunID string
	// Shard of Shards is the shard they claim.
	Shard, Shards int
	// Twice says they hold the very same run (one Instance): a file given
	// twice, or a merge and a run it holds.
	Twice bool
}

// ShardsError refuses a merge of results that claim the same shard of
// one run. Two runs of one command one after the other, not sharded,
// have one run id and each claims the whole run, shard 0 of 1: merged as
// shards, their requests would read as sent at once, and a limit held
// twice would read as leaked.
type ShardsError struct {
	Clashes []Clash
	// Twice says the clashes are each one run given twice, which
	// --as-one-run does not merge either (they are said first, alone).
	Twice bool
}

// maxClashesSaid bounds the clashes a ShardsError's text names.
const maxClashesSaid = 10

func (e *ShardsError) Error() string {
	return "results claim the same shard of one run: " + e.Text(nil)
}

// Text names the results of each clash by their labels (their files), or
// "run N" (from 1) when labels are missing: "a.json and b.json each
// claim the whole of run 3f2a… (shard 0 of 1): runs of one command one
// after the other, not shards of one".
func (e *ShardsError) Text(labels []string) string {
	parts := make([]string, 0, min(len(e.Clashes), maxClashesSaid)+1)
	for _, c := range e.Clashes[:min(len(e.Clashes), maxClashesSaid)] {
		names := make([]string, len(c.Runs))
		for j, i := range c.Runs {
			names[j] = fmt.Sprintf("run %d", i+1)
			if i < len(labels) && labels[i] != "" {
				names[j] = labels[i]
			}
		}
		list := strings.Join(names[:len(names)-1], ", ") + " and " + names[len(names)-1]
		shard := fmt.Sprintf("shard %d of %d of run %s", c.Shard, c.Shards, c.RunID)
		switch {
		case c.Twice:
			parts = append(parts, list+" hold the same run ("+shard+"): its requests would count twice")
		case c.Shards == 1:
			parts = append(parts, list+" each claim the whole of run "+c.RunID+" (shard 0 of 1): "+
				"runs of one command one after the other, not shards of one")
		default:
			parts = append(parts, list+" each claim "+shard)
		}
	}
	if n := len(e.Clashes) - maxClashesSaid; n > 0 {
		parts = append(parts, fmt.Sprintf("and %d more", n))
	}
	return strings.Join(parts, "; ")
}

// claims is a *ShardsError when results claim the same shard of one run:
// any two that hold the same run (one Instance), and, unless onlyTwice,
// any two that claim one shard of one run id. nil otherwise.
func claims(runs []Result, onlyTwice bool) error {
	type shard struct {
		runID         string
		shard, shards int
	}
	var clashes []Clash
	group := map[any]int{} // an instance, or a shard, to its clash
	note := func(key any, c Clash) {
		j, ok := group[key]
		switch {
		case !ok:
			group[key] = len(clashes)
			clashes = append(clashes, c)
		case !slices.Contains(clashes[j].Runs, c.Runs[0]):
			clashes[j].Runs = append(clashes[j].Runs, c.Runs[0])
		}
	}
	for i, r := range runs {
		for _, p := range r.parts() {
			c := Clash{Runs: []int{i}, RunID: p.RunID, Shard: p.Shard, Shards: max(p.Shards, 1)}
			if p.Instance != "" {
				t := c
				t.Twice = true
				note("instance "+p.Instance, t)
			}
			if !onlyTwice {
				note(shard{c.RunID, c.Shard, c.Shards}, c)
			}
		}
	}
	// A run given twice claims its shard twice too: that is said alone.
	var twice, same []Clash
	for _, c := range clashes {
		switch {
		case len(c.Runs) < 2:
		case c.Twice:
			twice = append(twice, c)
		default:
			same = append(same, c)
		}
	}
	switch {
	case len(twice) > 0:
		return &ShardsError{Clashes: twice, Twice: true}
	case len(same) > 0:
		return &ShardsError{Clashes: same}
	}
	return nil
}
