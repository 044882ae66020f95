package bench

// Words name, in a protocol's own terms, what the audit reads of the
// answers: HTTP's Retry-After and rate-limit headers, or a rate limit
// service's duration_until_reset and descriptor statuses.
type Words struct {
	// Wait is what a denial says to wait: Retry-After, or
	// duration_until_reset.
	Wait string
	// Fields are where the limit and what remains of it are advertised,
	// and Checks names their checks in a heading: rate-limit headers and
	// Headers, or current_limit or limit_remaining and Statuses.
	Fields, Checks string
	// Answers are what came back, and Denied a denial: responses and 429,
	// or answers and OVER_LIMIT.
	Answers, Denied string
}

// httpWords and rlsWords are the words of bench http and bench rls.
var (
	httpWords = Words{Wait: "Retry-After", Fields: "rate-limit headers", Checks: "Headers", Answers: "responses", Denied: "429"}
	rlsWords  = Words{Wait: "duration_until_reset", Fields: "current_limit or limit_remaining", Checks: "Statuses", Answers: "answers",
		Denied: "OVER_LIMIT"}
)

// Words are the words of the protocol r was measured on.
func (r Result) Words() Words {
	if r.Command == "bench_rls" {
		return rlsWords
	}
	return httpWords
}

// RLSWords are the words of a rate limit service: bench rls.
func RLSWords() Words { return rlsWords }

// HTTPWords are the words of bench http.
func HTTPWords() Words { return httpWords }
