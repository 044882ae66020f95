package bench

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/ratelab/ratelab/internal/plural"
)

// maxNameBytes bounds a consumer's name in a result file.
const maxNameBytes = 256

// consumerNamer is how the result names its consumers: by their
// identities, or consumer-N.
func (r Result) consumerNamer() func(int32) string { return r.Config.identity }

// checkNames checks the identities a result file gives its consumers:
// one per consumer, each printable text of at most maxNameBytes bytes,
// since reports print them.
func (r Result) checkNames() error {
	if len(r.Config.Identities) == 0 {
		return nil
	}
	if len(r.Config.Identities) != r.Config.Consumers {
		return fmt.Errorf("%d identities for %s", len(r.Config.Identities), plural.Count(r.Config.Consumers, "consumer"))
	}
	for i, n := range r.Config.Identities {
		if n == "" || len(n) > maxNameBytes || !utf8.ValidString(n) || !isFieldValue(n) {
			return fmt.Errorf("consumer %d: %q is not a name: want printable text of 1 to %d bytes", i, n, maxNameBytes)
		}
	}
	return nil
}

// maxOneRunConsumers bounds the consumers a merge of several runs as one
// names, in all.
const maxOneRunConsumers = 1_000_000

// layout is where each run's consumers are in a merge, and their names.
type layout struct {
	// of[i][c] is the merged number of run i's consumer c; with of[i]
	// nil, c itself.
	of [][]int32
	// total is the number of merged consumers.
	total int
	// names are the merged consumers' names; nil for consumer-N.
	names []string
	// apart is set when the runs are not shards of one (apartLayout).
	apart bool
	// pseudonyms is Settings.Pseudonyms of the runs whose identities are
	// pseudonyms; empty when none's are.
	pseudonyms string
}

// oneRunLayout lays the runs' consumers over each other, as shards of one
// run send them: consumer i of every run is consumer i of the merge.
func oneRunLayout(runs []Result) (layout, error) {
	l := layout{of: make([][]int32, len(runs)), names: runs[0].Config.Identities, pseudonyms: runs[0].Config.Pseudonyms}
	for i, r := range runs {
		l.total = max(l.total, r.Config.Consumers)
		switch {
		case (r.Config.Pseudonyms == "") != (l.pseudonyms == ""):
			return l, fmt.Errorf("run %d names its consumers otherwise than run 1: one by the identities sent (--show-identities, or "+
				"a result written before pseudonyms), the other by pseudonyms; give every shard the same flags", i+1)
		case !slices.Equal(r.Config.Identities, runs[0].Config.Identities):
			return l, fmt.Errorf("run %d names its consumers otherwise than run 1 (config.identities)", i+1)
		}
	}
	if len(l.names) != 0 && len(l.names) != l.total {
		return l, errors.New("the runs name fewer consumers than they send")
	}
	return l, nil
}

// apartLayout lays out the consumers of runs that are not shards of one.
// A consumer with an identity of its own (config.identities: an API key
// of --consumers-from, a source address) is one consumer whichever runs
// sent it, as the gateway saw it. The consumers named consumer-N, which
// a gateway may never have seen (it read the identity elsewhere), are
// each run's own, and when two runs' names clash, each such name is
// followed by its run's label: "consumer-0 (a.json)".
func apartLayout(runs []Result, labels []string) (layout, error) {
	l := layout{of: make([][]int32, len(runs)), apart: true}
	if err := onePseudonymKey(runs, labels, &l); err != nil {
		return l, err
	}
	sum := 0
	for _, r := range runs {
		sum += r.Config.Consumers
		if sum > maxOneRunConsumers {
			return l, fmt.Errorf("more than %d consumers in all: too many to merge as one run", maxOneRunConsumers)
		}
	}
	add := func(name string) int32 {
		l.names = append(l.names, name)
		return int32(len(l.names) - 1)
	}
	byName := map[string]int32{}
	for i, r := range runs {
		if len(r.Config.Identities) == 0 {
			continue
		}
		l.of[i] = make([]int32, r.Config.Consumers)
		for c, id := range r.Config.Identities {
			n, ok := byName[id]
			if !ok {
				n = add(id)
				byName[id] = n
			}
			l.of[i][c] = n
		}
	}
	seen := map[string]bool{}
	clash := false
	for _, r := range runs {
		if len(r.Config.Identities) == 0 {
			for c := range r.Config.Consumers {
				n := consumerName(int32(c))
				_, taken := byName[n]
				clash = clash || seen[n] || taken
				seen[n] = true
			}
		}
	}
	for i, r := range runs {
		if len(r.Config.Identities) > 0 {
			continue
		}
		l.of[i] = make([]int32, r.Config.Consumers)
		for c := range r.Config.Consumers {
			n := consumerName(int32(c))
			if clash {
				n = labelled(n, runLabel(labels, i, maxNameBytes-len(n)-3))
			}
			l.of[i][c] = add(n)
		}
	}
	l.total = len(l.names)
	if l.total == 0 {
		l.names = nil
	}
	return l, nil
}

// onePseudonymKey sets l.pseudonyms to the runs' Settings.Pseudonyms,
// and refuses runs whose identities are pseudonyms of different lists: an
// identity two of them sent has a pseudonym in each, and would be two
// consumers.
func onePseudonymKey(runs []Result, labels []string, l *layout) error {
	var keys []string
	byKey := map[string][]string{}
	for i, r := range runs {
		k := r.Config.Pseudonyms
		if k == "" || len(r.Config.Identities) == 0 {
			continue
		}
		if _, ok := byKey[k]; !ok {
			keys = append(keys, k)
		}
		byKey[k] = append(byKey[k], runLabel(labels, i, maxNameBytes))
	}
	if len(keys) > 1 {
		parts := make([]string, len(keys))
		for j, k := range keys {
			parts[j] = strings.Join(byKey[k], ", ")
		}
		return fmt.Errorf("%s name their consumers by pseudonyms of different lists of identities (--consumers-from): "+
			"an identity that more than one sent would be several consumers; run them with --show-identities to merge them as one run",
			strings.Join(parts, " and "))
	}
	if len(keys) == 1 {
		l.pseudonyms = keys[0]
	}
	return nil
}

// namer names the merged consumers.
func (l layout) namer() func(int32) string {
	return Result{Config: Settings{Identities: l.names}}.consumerNamer()
}

// runLabel names run i by its label (its file) when it has one that is
// printable and at most room bytes long, else as "run N" (from 1).
func runLabel(labels []string, i, room int) string {
	if i < len(labels) {
		if l := labels[i]; l != "" && len(l) <= room && utf8.ValidString(l) && isFieldValue(l) {
			return l
		}
	}
	return fmt.Sprintf("run %d", i+1)
}

// labelled is name followed by its run's label, "consumer-0 (a.json)",
// the name cut short (at a character's end) so that it fits in
// maxNameBytes.
func labelled(name, label string) string {
	suffix := " (" + label + ")"
	for len(name)+len(suffix) > maxNameBytes && name != "" {
		_, size := utf8.DecodeLastRuneInString(name)
		name = name[:len(name)-size]
	}
	return name + suffix
}
