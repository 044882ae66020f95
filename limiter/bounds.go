package limiter

import (
	"fmt"

	"github.com/ratelab/ratelab/internal/field"
)

// Bounds are what one request may carry, checked by a front door before it
// makes a plan. A request over them is refused (gRPC InvalidArgument,
// HTTP 400), counted by reason (ratelab_edge_invalid_requests_total), and
// never reaches Redis or the circuit breaker.
type Bounds struct {
	// Descriptors is the most descriptors in one call of the rate limit
	// service. Default DefaultBounds.Descriptors.
	Descriptors int
	// Entries is the most entries in one descriptor. Default
	// DefaultBounds.Entries: rules nest at most 16 levels, so a longer
	// descriptor could meet no limit.
	Entries int
	// Length is the most bytes of one key or value: a descriptor entry's,
	// or the value of a request attribute a gateway's rules read (a
	// header, a query parameter, the path). Default DefaultBounds.Length.
	Length int
}

// DefaultBounds are the bounds of a front door that sets none: far above
// what Envoy sends for a route's actions, far below what makes one call
// cost Redis more than any other.
var DefaultBounds = Bounds{Descriptors: 64, Entries: 16, Length: 4096}

// MaxBounds cap what Bounds may be set to.
var MaxBounds = Bounds{Descriptors: 1024, Entries: 64, Length: 1 << 20}

// Reasons a request is refused before any decision, as counted by reason.
const (
	InvalidDescriptors = "descriptors" // more descriptors than Bounds.Descriptors, or none
	InvalidEntries     = "entries"     // a descriptor with more entries than Bounds.Entries, or none
	InvalidLength      = "length"      // a key or value longer than Bounds.Length, or an empty key
	InvalidOverride    = "override"    // a descriptor's own limit out of bounds
	InvalidHits        = "hits"        // a hits_addend out of bounds, or negative hits
	InvalidMalformed   = "malformed"   // a request that does not decode, or names no domain
)

var invalidReasons = []string{InvalidDescriptors, InvalidEntries, InvalidLength, InvalidOverride, InvalidHits, InvalidMalformed}

// WithDefaults is b with DefaultBounds for the bounds it leaves at zero.
func (b Bounds) WithDefaults() Bounds {
	if b.Descriptors == 0 {
		b.Descriptors = DefaultBounds.Descriptors
	}
	if b.Entries == 0 {
		b.Entries = DefaultBounds.Entries
	}
	if b.Length == 0 {
		b.Length = DefaultBounds.Length
	}
	return b
}

// Validate checks b: each bound from 1 to its MaxBounds, or 0 for its
// default. Errors are *field.Error naming Descriptors, Entries or Length.
func (b Bounds) Validate() error {
	for _, f := range []struct {
		name          string
		got, def, top int
	}{
		{"Descriptors", b.Descriptors, DefaultBounds.Descriptors, MaxBounds.Descriptors},
		{"Entries", b.Entries, DefaultBounds.Entries, MaxBounds.Entries},
		{"Length", b.Length, DefaultBounds.Length, MaxBounds.Length},
	} {
		if f.got < 0 || f.got > f.top {
			return field.Errorf(f.name, "must be between 1 and %d, or 0 for the default %d (got %d)", f.top, f.def, f.got)
		}
	}
	return nil
}

// Refusal is a request refused before any decision: Reason is one of the
// Invalid constants, the error says what was wrong.
type Refusal struct {
	Reason string
	Err    error
}

func (r *Refusal) Error() string { return r.Err.Error() }

// Refuse returns a Refusal of reason saying format.
func Refuse(reason, format string, a ...any) *Refusal {
	return &Refusal{Reason: reason, Err: fmt.Errorf(format, a...)}
}
