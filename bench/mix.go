package bench

import (
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/ratelab/ratelab/audit"
	"github.com/ratelab/ratelab/internal/field"
)

// Route is one path of a mix of routes: requests go to Path (and its
// query) in proportion to Weight.
type Route struct {
	// Path is the path sent, with its query if any: /search?q=redis.
	Path string
	// Weight is the route's share of the requests: 1 to 1000.
	Weight int
}

// ConsumerValues is a header whose value depends on the consumer, so that
// rules keyed by it (a plan tier, say) see a mix: consumer i sends the
// value that i mod the sum of the weights falls in, counting the values'
// weights in order. With gold:1 and free:9, consumer-0 is gold and
// consumer-1 to consumer-9 are free, and so on every ten.
type ConsumerValues struct {
	// Header is the header's name.
	Header string
	// Values are the values, in order, each with its weight (1 to 1000).
	Values []WeightedValue
}

// WeightedValue is one value of a ConsumerValues with its weight.
type WeightedValue struct {
	Value  string
	Weight int
}

// Bounds of a mix: every combination of a route and the consumer values is
// rendered once, before the run.
const (
	maxWeight = 1000
	maxKinds  = 1024
)

// ParseRoute reads a --path value: PATH or PATH:WEIGHT (/search:1). The
// weight is the digits after the last colon; 1 when there are none.
func ParseRoute(s string) Route {
	r := Route{Path: s, Weight: 1}
	if i := strings.LastIndexByte(s, ':'); i > 0 {
		if w, err := strconv.Atoi(s[i+1:]); err == nil {
			r.Path, r.Weight = s[:i], w
		}
	}
	return r
}

// ParseConsumerValues reads a --consumer-values value: "NAME: V1:W1,V2:W2"
// (X-Plan: gold:1,free:9); a value without :WEIGHT weighs 1.
func ParseConsumerValues(s string) (ConsumerValues, error) {
	name, list, ok := strings.Cut(s, ":")
	cv := ConsumerValues{Header: strings.TrimSpace(name)}
	if !ok || cv.Header == "" || strings.TrimSpace(list) == "" {
		return cv, field.Errorf("ConsumerValues", "%q: want NAME: VALUE[:WEIGHT],…, such as X-Plan: gold:1,free:9", s)
	}
	for _, item := range strings.Split(list, ",") {
		item = strings.TrimSpace(item)
		v := WeightedValue{Value: item, Weight: 1}
		if i := strings.LastIndexByte(item, ':'); i >= 0 {
			w, err := strconv.Atoi(item[i+1:])
			if err != nil {
				return cv, field.Errorf("ConsumerValues", "%q: %q: the weight after the colon is not a number", s, item)
			}
			v.Value, v.Weight = item[:i], w
		}
		cv.Values = append(cv.Values, v)
	}
	return cv, nil
}

// validateMix checks the routes and consumer values of c.
func (c HTTPConfig) validateMix() error {
	if len(c.Routes) > audit.MaxRoutes {
		return field.Errorf("Routes", "at most %d (got %d)", audit.MaxRoutes, len(c.Routes))
	}
	for _, r := range c.Routes {
		u, err := url.Parse(r.Path)
		switch {
		case err != nil || !strings.HasPrefix(r.Path, "/") || u.Host != "" || u.Fragment != "" || !isFieldValue(r.Path) || strings.ContainsAny(r.Path, " "):
			return field.Errorf("Routes", "%q is not a path: want one that begins with /, such as /search?q=redis", r.Path)
		case r.Weight < 1 || r.Weight > maxWeight:
			return field.Errorf("Routes", "%s: the weight must be between 1 and %d (got %d)", r.Path, maxWeight, r.Weight)
		}
	}
	if len(c.Routes) > 0 && pathHolds(c.Target) {
		return field.Errorf("Routes", "each replaces the URL's path, which holds a placeholder: put {consumer} in the URL's query "+
			"(http://host/?key={consumer}) or in each path")
	}
	combos := max(len(c.Routes), 1)
	for _, cv := range c.ConsumerValues {
		switch {
		case !isToken(cv.Header):
			return field.Errorf("ConsumerValues", "%q is not a header name", cv.Header)
		case c.Consumers == 0:
			return field.Errorf("ConsumerValues", "need consumers ({Consumers})")
		case len(cv.Values) == 0:
			return field.Errorf("ConsumerValues", "%s: no value", cv.Header)
		case http.CanonicalHeaderKey(cv.Header) == http.CanonicalHeaderKey(c.ConsumerHeader):
			return field.Errorf("ConsumerValues", "%s is the consumer header", cv.Header)
		}
		for _, v := range cv.Values {
			switch {
			case v.Value == "" || !isFieldValue(v.Value):
				return field.Errorf("ConsumerValues", "%s: %q is not a header value", cv.Header, v.Value)
			case v.Weight < 1 || v.Weight > maxWeight:
				return field.Errorf("ConsumerValues", "%s: %s: the weight must be between 1 and %d (got %d)", cv.Header, v.Value, maxWeight, v.Weight)
			}
		}
		combos *= len(cv.Values)
		if combos > maxKinds {
			return field.Errorf("ConsumerValues", "with the routes, make over %d kinds of request: send fewer values", maxKinds)
		}
	}
	return nil
}

// mix is the requests of a run, rendered before it: one per route and
// combination of consumer values. A connection picks one by the request's
// sequence number and consumer, without allocating.
type mix struct {
	// reqs[route*combos + combo] is the request of that route and
	// combination of consumer values.
	reqs   []*request
	combos int
	// schedule spreads the routes by their weights: the k-th request of a
	// consumer goes to schedule[(k + consumer) mod len(schedule)].
	schedule []uint16
	// routes and values, as given, for the audit.
	routes []Route
	values []ConsumerValues
}

// newMix renders cfg's requests (from a validated cfg), and returns the
// URL they are sent to. Every consumer's requests are rendered before the
// run while they all fit in maxRendered bytes; past that, each is filled in
// at its send.
func newMix(cfg HTTPConfig) (*mix, *url.URL, error) {
	m := &mix{routes: cfg.Routes, values: cfg.ConsumerValues, combos: 1}
	for _, cv := range cfg.ConsumerValues {
		m.combos *= len(cv.Values)
	}
	routes := cfg.Routes
	if len(routes) == 0 {
		routes = []Route{{Weight: 1}}
	}
	weights := make([]int, len(routes))
	for i, r := range routes {
		weights[i] = r.Weight
	}
	m.schedule = spread(weights)
	var first *url.URL
	rendered := 0
	for _, r := range routes {
		for combo := range m.combos {
			c := cfg
			if r.Path != "" {
				c.Target = withPath(cfg.Target, r.Path)
			}
			if len(cfg.ConsumerValues) > 0 {
				c.Header = cfg.Header.Clone()
				if c.Header == nil {
					c.Header = http.Header{}
				}
				for h, cv := range cfg.ConsumerValues {
					c.Header.Set(cv.Header, cv.Values[m.valueIndex(combo, h)].Value)
				}
			}
			req, u, err := newRequest(c)
			if err != nil {
				return nil, nil, err
			}
			if rendered += len(req.rendered); rendered > maxRendered {
				req.rendered, req.offsets = nil, nil // filled in at each send
			}
			if first == nil {
				first = u
			}
			m.reqs = append(m.reqs, req)
		}
	}
	return m, first, nil
}

// withPath is target with its path replaced by path, and its query too
// when path has one of its own: a route without a query keeps the URL's,
// where {consumer} may stand (http://host/?key={consumer}).
func withPath(target, path string) string {
	rest := target
	scheme := ""
	if i := strings.Index(target, "://"); i >= 0 {
		scheme, rest = target[:i+3], target[i+3:]
	}
	query := ""
	if i := strings.IndexAny(rest, "/?#"); i >= 0 {
		rest, query = rest[:i], rest[i:]
	}
	if j := strings.IndexByte(query, '?'); j >= 0 && !strings.Contains(path, "?") {
		return scheme + rest + path + query[j:]
	}
	return scheme + rest + path
}

// pathHolds says whether target's path (not its query) holds a
// placeholder, which a route's path would replace.
func pathHolds(target string) bool {
	rest := target
	if i := strings.Index(target, "://"); i >= 0 {
		rest = target[i+3:]
	}
	if i := strings.IndexByte(rest, '?'); i >= 0 {
		rest = rest[:i]
	}
	t, err := parseTemplate(rest)
	return err == nil && (t.uses(consumerPlaceholder) || t.uses(jwtPlaceholder))
}

// name is consumer c's identity, as the audit names it.
func (m *mix) name(c int32) string { return m.reqs[0].name(c) }

// labels are the consumers' names, when they are not consumer-0 ….
func (m *mix) labels() []string { return m.reqs[0].labels() }

// valueIndex is which value of the h-th ConsumerValues combination combo
// sends.
func (m *mix) valueIndex(combo, h int) int {
	for _, cv := range m.values[:h] {
		combo /= len(cv.Values)
	}
	return combo % len(m.values[h].Values)
}

// spread is a schedule of indexes (of routes, or of bench rls's kinds of
// call), each as often as its weight, interleaved (smooth weighted round
// robin) so that a short run still sends each its share.
func spread(weights []int) []uint16 {
	total := 0
	for _, w := range weights {
		total += w
	}
	cur := make([]int, len(weights))
	out := make([]uint16, 0, total)
	for range total {
		best := 0
		for i, w := range weights {
			cur[i] += w
			if cur[i] > cur[best] {
				best = i
			}
		}
		cur[best] -= total
		out = append(out, uint16(best))
	}
	return out
}

// route is the route of this shard's j-th request, of consumer (-1 for
// none) among own consumers.
func (m *mix) route(j int64, consumer, own int) int { return scheduled(m.schedule, j, consumer, own) }

// scheduled is the index that schedule (a spread) gives this shard's j-th
// request, of consumer (-1 for none) among own consumers: the k-th request
// of a consumer takes schedule[(k + consumer) mod len(schedule)], so that
// each consumer's requests, and every consumer's together, follow the
// weights.
func scheduled(schedule []uint16, j int64, consumer, own int) int {
	if len(schedule) <= 1 {
		return 0
	}
	k := j // the consumer's k-th request
	if own > 0 {
		k = j / int64(own)
	}
	return int(schedule[(k+int64(max(consumer, 0)))%int64(len(schedule))])
}

// combo is the combination of consumer values that consumer sends.
func (m *mix) combo(consumer int) int {
	if m.combos == 1 || consumer < 0 {
		return 0
	}
	combo, stride := 0, 1
	for _, cv := range m.values {
		combo += stride * weighted(cv.Values, consumer)
		stride *= len(cv.Values)
	}
	return combo
}

// weighted is the index of the value that consumer falls in.
func weighted(vs []WeightedValue, consumer int) int {
	total := 0
	for _, v := range vs {
		total += v.Weight
	}
	at := consumer % total
	for i, v := range vs {
		if at < v.Weight {
			return i
		}
		at -= v.Weight
	}
	return len(vs) - 1
}

// request is the request of route for consumer.
func (m *mix) request(route, consumer int) *request {
	return m.reqs[route*m.combos+m.combo(consumer)]
}

// header is the value of the consumer values' header h that consumer sends.
func (m *mix) header(h, consumer int) string {
	cv := m.values[h]
	return cv.Values[weighted(cv.Values, consumer)].Value
}
