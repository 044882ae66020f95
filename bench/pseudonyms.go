package bench

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"slices"

	"github.com/ratelab/ratelab/audit"
)

// Identities read from a file (HTTPConfig's and RLSConfig's Identities:
// API keys, tokens, tenants) may be secrets. Unless the run is told to
// show them (ShowIdentities), a result never holds one: each consumer is
// named by a pseudonym of its identity, in config.identities and in
// every consumer name of the audit, and the audit's counter keys, which
// may hold an identity, are hashed alike.
//
// A pseudonym is "id-" and the first 8 bytes, in hex, of HMAC-SHA256 of
// the identity, keyed by the SHA-256 of every identity of the run, sorted
// bytewise, each followed by a line feed. The same list of identities
// (every shard of one run, a run repeated, another run from the same
// file) gives an identity the same pseudonym, so that report merge lines
// consumers up; one who holds the result but not the whole list cannot
// test a guess of one identity; one who holds the list can compute each
// pseudonym (docs/bench.md shows how).

// pseudonymScheme begins Settings.Pseudonyms.
const pseudonymScheme = "hmac-sha256:"

// pseudonymBytes is how many bytes of the HMAC a pseudonym shows: 8, so
// that a million identities have one chance in about 36 million of two
// sharing one; a list in which two do gets longer ones (keyedNames).
const pseudonymBytes = 8

// pseudonyms stand for a run's identities in its result.
type pseudonyms struct {
	key []byte
	// names are the consumers' pseudonyms, by consumer number.
	names []string
}

// newPseudonyms makes the pseudonyms of ids (a run's Identities, each
// once); nil for no identities.
func newPseudonyms(ids []string) *pseudonyms {
	if len(ids) == 0 {
		return nil
	}
	sorted := slices.Clone(ids)
	slices.Sort(sorted)
	h := sha256.New()
	for _, id := range sorted {
		h.Write([]byte(id))
		h.Write([]byte{'\n'})
	}
	p := &pseudonyms{key: h.Sum(nil)}
	p.names = p.keyedNames(ids)
	return p
}

// keyedNames names each identity by its HMAC: its first pseudonymBytes
// bytes, or all of them should two identities share those.
func (p *pseudonyms) keyedNames(ids []string) []string {
	sums := make([][]byte, len(ids))
	for i, id := range ids {
		sums[i] = p.sum([]byte(id))
	}
	for _, n := range []int{pseudonymBytes, sha256.Size} {
		names := make([]string, len(ids))
		seen := make(map[string]bool, len(ids))
		clash := false
		for i, s := range sums {
			names[i] = "id-" + hex.EncodeToString(s[:n])
			clash = clash || seen[names[i]]
			seen[names[i]] = true
		}
		if !clash || n == sha256.Size {
			return names
		}
	}
	return nil // not reached
}

func (p *pseudonyms) sum(b []byte) []byte {
	m := hmac.New(sha256.New, p.key)
	m.Write(b)
	return m.Sum(nil)
}

// scheme is Settings.Pseudonyms for these pseudonyms: the scheme and a
// fingerprint of the key, equal for runs of one list of identities.
func (p *pseudonyms) scheme() string {
	fp := sha256.Sum256(append([]byte("ratelab pseudonym key\n"), p.key...))
	return pseudonymScheme + hex.EncodeToString(fp[:8])
}

// hideKeys hashes the counter keys of a's audit by rules, which may hold
// an identity (a descriptor's value, a header's): with the same key, so
// that one counter keeps one key across the shards of a run.
func (p *pseudonyms) hideKeys(a *audit.Samples) {
	if p == nil || a == nil {
		return
	}
	for k := range a.Counters {
		keys := make([]string, len(a.Counters[k].Keys))
		for i, key := range a.Counters[k].Keys {
			keys[i] = "key-" + hex.EncodeToString(p.sum([]byte("counter\n" + key))[:16])
		}
		a.Counters[k].Keys = keys
	}
}

// hidden is the pseudonyms that name a run's consumers in its result, nil
// when they are named as sent: ids, unless show.
func hidden(ids []string, show bool) *pseudonyms {
	if show {
		return nil
	}
	return newPseudonyms(ids)
}
