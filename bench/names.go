package bench

import (
	"fmt"
	"strconv"
)

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
