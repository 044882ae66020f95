package bench

import (
	"fmt"
	"strconv"
)

// consumerNames numbers the consumers of several runs by the identity each
// sent, so that a merge keys consumers by identity: the same API key sent
// by two runs is one consumer, whatever its number in each run.
type consumerNames struct {
	// byName numbers the identities, when a run sent identities other than
	// consumer-0 …; nil when none did, and each run's numbers stand.
	byName map[string]int32
	names  []string
}

// newConsumerNames numbers the identities the runs sent.
func newConsumerNames(runs []Result) consumerNames {
	var n consumerNames
	for _, r := range runs {
		if len(r.Config.Identities) > 0 {
			n.byName = map[string]int32{}
			break
		}
	}
	if n.byName == nil {
		return n
	}
	for _, r := range runs {
		for c := range r.Config.Consumers {
			name := r.Config.identity(int32(c))
			if _, ok := n.byName[name]; !ok {
				n.byName[name] = int32(len(n.names))
				n.names = append(n.names, name)
			}
		}
	}
	return n
}

// renumber gives the samples of run r the numbers of their identities.
func (n consumerNames) renumber(r Result, ss []sample) {
	if n.byName == nil {
		return
	}
	for i := range ss {
		ss[i].consumer = n.byName[r.Config.identity(ss[i].consumer)]
	}
}

// name is consumer c's identity.
func (n consumerNames) name(c int32) string {
	if n.byName == nil {
		return consumerName(c)
	}
	return n.names[c]
}

// count is the number of consumers: those named, or else consumers.
func (n consumerNames) count(consumers int) int {
	if n.byName == nil {
		return consumers
	}
	return len(n.names)
}

// checkIdentities checks the identities a result says it sent: one per
// consumer, each once.
func (s Settings) checkIdentities() error {
	if len(s.Identities) == 0 {
		return nil
	}
	if len(s.Identities) != s.Consumers {
		return fmt.Errorf("%d identities for %d consumers", len(s.Identities), s.Consumers)
	}
	seen := make(map[string]bool, len(s.Identities))
	for i, id := range s.Identities {
		if seen[id] {
			return fmt.Errorf("identity %s repeated", strconv.Itoa(i+1))
		}
		seen[id] = true
	}
	return nil
}
