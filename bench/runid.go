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
		ExpectLimits                                                        []ExpectedLimit
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

// oneRun is nil when runs are shards of one run, all with the same run
// id; a *RunsError otherwise. One result alone is always one run.
func oneRun(runs []Result) error {
	if len(runs) < 2 {
		return nil
	}
	ids := make([]string, len(runs))
	for i, r := range runs {
		ids[i] = r.RunID
	}
	if ids[0] != "" && !slices.ContainsFunc(ids, func(id string) bool { return id != ids[0] }) {
		return nil
	}
	return &RunsError{IDs: ids}
}
