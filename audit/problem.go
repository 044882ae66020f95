package audit

import (
	"encoding/json"
	"fmt"
	"strconv"
)

// A 429 may say which policies refused it: the body of the problem type
// quota-exceeded (draft-ietf-httpapi-ratelimit-headers, RFC 9457) names
// them in its violated-policies member, as RateLimit-Policy names them.
// The audit holds each name to what the request met and to what the same
// response advertised of it:
//
//   - a name that is one of the audit's limits (a rules limit's ID or
//     name) must be a limit the request met;
//   - a policy named, placed among the audit's limits (by name, else by
//     the quota and window RateLimit-Policy gave it, else, when RateLimit
//     gave its remaining, the one limit the request met) must have had
//     nothing remaining for the request:
//     where RateLimit gave its r, below the request's cost (0 for one of
//     cost 1).
//
// A name the audit cannot place (a policy it was not told of) is not a
// wrong one. Each fault counts as a header violation of the limit named.

// maxViolated bounds the names kept of one response.
const maxViolated = 8

// violatedPolicies reads the violated-policies member of a problem's body
// (its first maxProblem bytes) and appends each name, up to maxViolated,
// as an advert: named by names (a limit's ID or name to its index) when it
// names one of the audit's limits, with the quota and window that
// RateLimit-Policy, and the remaining and reset that RateLimit, gave the
// policy of that name in the same response. A body that does not parse, or
// has no such member, adds nothing.
func violatedPolicies(dst []advert, body []byte, f *Fields, names map[string]int16) []advert {
	var p struct {
		Violated []string `json:"violated-policies"`
	}
	if json.Unmarshal(body, &p) != nil {
		return dst
	}
	for i, name := range p.Violated {
		if i == maxViolated {
			break
		}
		k, ok := names[name]
		a := advert{name: k, named: ok}
		if m, ok := sfNamed(f.policy, name); ok {
			a.q, a.w = m.q, m.w
		}
		if m, ok := sfNamed(f.rateLimit, name); ok {
			a.r, a.t = m.r, m.t
		}
		dst = append(dst, a)
	}
	return dst
}

// sfNamed is the member of a structured field list of that name.
func sfNamed(field, name string) (sfMember, bool) {
	if field == "" {
		return sfMember{}, false
	}
	for _, item := range sfItems(field) {
		if m := sfItem(item); m.name == name {
			return m, true
		}
	}
	return sfMember{}, false
}

// checkViolated holds the violated-policies each sample's 429 named (see
// above) to the limits its request met (m) and to what its response
// advertised, and counts them, and the faults, in a's limits' headers.
// exps are a's limits, in order; name names the consumers.
func checkViolated(a *Audit, samples []Sample, advs []advert, exps []Expectation, m Meeting, name func(int32) string) {
	if len(a.Limits) != len(exps) {
		return
	}
	for i, s := range samples {
		if s.violated == 0 || i >= len(m.met) {
			continue
		}
		at := s.advAt + uint32(s.advN)
		if int(at)+int(s.violated) > len(advs) {
			continue
		}
		met := m.met[i]
		for _, v := range advs[at : at+uint32(s.violated)] {
			switch {
			case v.named && (int(v.name) >= len(exps) || v.name < 0):
				continue
			case !v.named && !v.q.ok && !v.r.ok:
				continue // a name the response says nothing else of: not placed
			}
			k := resolve(v, met, exps)
			if v.named && k < 0 { // one of the audit's limits, not met
				k = int(v.name)
				h := &a.Limits[k].Headers
				h.Named++
				violation(h, fmt.Sprintf("%s was refused with violated-policies naming %s, a limit its request did not meet",
					name(s.Consumer), strconv.Quote(exps[k].ID)))
				continue
			}
			if k < 0 { // a policy the audit cannot place
				continue
			}
			h := &a.Limits[k].Headers
			h.Named++
			if cost := max(exps[k].cost, 1); v.r.ok && int64(v.r.n) >= cost {
				named := strconv.Quote(exps[k].ID)
				if !v.named {
					named = "the policy of limit " + exps[k].ID
				}
				violation(h, fmt.Sprintf("%s was refused with violated-policies naming %s, of which the same response said %d remained",
					name(s.Consumer), named, v.r.n))
			}
		}
	}
}

// violation counts a header violation, keeping the first as h's example.
func violation(h *HeadersAudit, what string) {
	h.Violations++
	if h.Example == "" {
		h.Example = what
	}
}
