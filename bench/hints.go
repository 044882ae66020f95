package bench

import (
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/ratelab/ratelab/audit"
	"github.com/ratelab/ratelab/internal/plural"
	"github.com/ratelab/ratelab/rules"
)

// The audit's hints say what the load missed, and where the identity
// could go for it to test what was meant: a header or query parameter
// that the rules key on and no request sent, one that every request sent
// alike (every consumer then met a limit kept per value on one counter),
// or, for a gateway that seems to share one limit across the identities
// sent, the query parameters of a URL that carries none. Each is said only
// when what was sent shows it.

// sentValues notes what the requests sent of the headers and query
// parameters a rules file keys on.
type sentValues struct {
	attrs []rules.Attribute
	// first is the first value sent of each; varied says another came.
	first  map[rules.Attribute]string
	varied map[rules.Attribute]bool
}

// newSentValues notes the headers and query parameters set keys on.
func newSentValues(set *rules.Set) *sentValues {
	v := &sentValues{first: map[rules.Attribute]string{}, varied: map[rules.Attribute]bool{}}
	for _, l := range set.Limits() {
		for _, d := range descriptorPath(l) {
			if a := d.Attribute(); sentByName(a) && !slices.Contains(v.attrs, a) {
				v.attrs = append(v.attrs, a)
			}
		}
	}
	return v
}

// sentByName says whether a is read from something a request may leave
// out: a header or a query parameter.
func sentByName(a rules.Attribute) bool {
	return a.Kind == rules.KindHeader || a.Kind == rules.KindQuery
}

// watch is req, noting what each request it makes sends.
func (v *sentValues) watch(req func(route, consumer int) rules.Request) func(route, consumer int) rules.Request {
	return func(route, consumer int) rules.Request {
		r := req(route, consumer)
		for _, a := range v.attrs {
			val, ok := r.Value(a)
			if !ok {
				continue
			}
			if first, seen := v.first[a]; !seen {
				v.first[a] = val
			} else if val != first {
				v.varied[a] = true
			}
		}
		return r
	}
}

// descriptorPath is the descriptors from the top of the tree down to l's.
func descriptorPath(l *rules.Limit) []*rules.Descriptor {
	var path []*rules.Descriptor
	for d := l.Descriptor; d != nil; d = d.Parent {
		path = append(path, d)
	}
	slices.Reverse(path)
	return path
}

// unmetHint says why no request met l, when what was sent shows it: a
// header or query parameter on its path (with no fallback_key) that no
// request sent. "" when it does not.
func (v *sentValues) unmetHint(cfg HTTPConfig, l *rules.Limit) string {
	for _, d := range descriptorPath(l) {
		a := d.Attribute()
		if _, sent := v.first[a]; !sentByName(a) || d.FallbackKey != "" || sent {
			continue
		}
		hint := "the rules key on " + a.Words() + ", which no request sent"
		switch {
		case !d.PerValue(): // a value it must have
			return hint + ": " + sendValue(d)
		case cfg.Consumers == 0:
			return hint
		}
		if went := cfg.identitiesWent(); went != "" {
			hint += "; the identities went in " + went
		}
		return hint + ": " + cfg.consumerThere(a)
	}
	return ""
}

// oneCounterHints say, of the limits that the rules keep per value of a
// header or query parameter, those that every request met on one counter
// because every one sent that header or parameter alike, while several
// consumers were sent: where their identities could go.
func (v *sentValues) oneCounterHints(cfg HTTPConfig, set *rules.Set, m audit.Meeting) []string {
	sent := cfg.consumersSent()
	if sent < 2 {
		return nil
	}
	var attrs []rules.Attribute
	ids := map[rules.Attribute][]string{}
	for k, l := range set.Limits() {
		if m.Met(k) == 0 || m.Counters(k) != 1 {
			continue
		}
		for _, d := range descriptorPath(l) {
			a := d.Attribute()
			if _, sent := v.first[a]; !sentByName(a) || !d.PerValue() || !sent || v.varied[a] {
				continue
			}
			if !slices.Contains(attrs, a) {
				attrs = append(attrs, a)
			}
			ids[a] = append(ids[a], l.ID)
			break
		}
	}
	var hints []string
	for _, a := range attrs {
		hint := fmt.Sprintf("every request sent %s as %s, so the %d consumers met %s on one counter", a.Words(),
			shown(cut(v.first[a], 60)), sent, plural.List(ids[a], "and"))
		if went := cfg.identitiesWent(); went != "" {
			hint += "; the identities went in " + went
		}
		hints = append(hints, hint+": "+cfg.consumerThere(a))
	}
	return hints
}

// consumersSent is how many consumers this shard sent (cfg with its
// defaults): its share of Consumers, or all of them with SharedConsumers.
// A shard that sent one consumer sent one identity alike in every request.
func (c HTTPConfig) consumersSent() int {
	if c.SharedConsumers || c.Shards <= 1 {
		return c.Consumers
	}
	return share(c.Consumers, c.Shard, c.Shards)
}

// sharedHint says, when the gateway seems to share a limit across the
// identities sent, and several were sent apart from the URL, whose query
// has parameters it may key on instead, where {consumer} could go. ""
// otherwise.
func (c HTTPConfig) sharedHint(a audit.Audit) string {
	var shared []string
	for _, l := range a.Limits {
		if l.SharedLimit {
			shared = append(shared, l.Label())
		}
	}
	if len(shared) == 0 || c.Consumers < 2 || slices.ContainsFunc(c.identityIn(), func(in string) bool { return strings.HasPrefix(in, "URL") }) {
		return ""
	}
	params := c.queryParams()
	if len(params) == 0 {
		return ""
	}
	hint := plural.List(shared, "and") + " seemed shared across the identities"
	if went := c.identitiesWent(); went != "" {
		hint += ", which went in " + went
	}
	there := c.consumerThere(rules.Attribute{Kind: rules.KindQuery, Name: params[0]})
	if len(params) == 1 {
		return hint + ": if the gateway keys on the URL's query parameter " + params[0] + ", " + there
	}
	return hint + ": if the gateway keys on one of the URL's query parameters (" + strings.Join(params, ", ") + "), put {consumer} in " +
		"that one's value; for " + params[0] + ", " + there
}

// identitiesWent says where the requests carried the consumers'
// identities, and what put them there: header X-Consumer-Id
// (--consumer-header). "" when nothing did.
func (c HTTPConfig) identitiesWent() string {
	var places []string
	for _, in := range c.identityIn() {
		where, jwt := strings.CutSuffix(in, " (JWT)")
		switch {
		case where == "URL":
			where = "the URL"
		case where == "body":
			where = "the body"
		case c.ConsumerHeader != "" && where == http.CanonicalHeaderKey(c.ConsumerHeader):
			where = "header " + where + " (--consumer-header)"
		default:
			where = "header " + where
		}
		if jwt {
			where = "a token in " + where
		}
		places = append(places, where)
	}
	if len(c.SourceIPs) > 0 {
		places = append(places, "the source address (--source-ips)")
	}
	return plural.List(places, "and")
}

// consumerThere says how to send the identities in a: the consumer header
// named after it, a header of {consumer}, or {consumer} in the URL's
// query (in each --path's, with routes).
func (c HTTPConfig) consumerThere(a rules.Attribute) string {
	switch {
	case a.Kind == rules.KindHeader && c.ConsumerHeader != "" && slices.Contains(c.identityIn(), http.CanonicalHeaderKey(c.ConsumerHeader)):
		return "--consumer-header " + a.Name + " sends them there"
	case a.Kind == rules.KindHeader:
		return "send them there with -H '" + a.Name + ": {consumer}'"
	case len(c.Routes) > 0:
		return "put {consumer} in the query of each --path, such as " + withQueryConsumer(c.Routes[0].Path, a.Name)
	}
	return "put {consumer} in the URL: " + withQueryConsumer(c.Target, a.Name)
}

// sendValue says how to send the value d matches.
func sendValue(d *rules.Descriptor) string {
	a := d.Attribute()
	value, prefix := d.Prefix()
	switch {
	case prefix:
		return "send it with a value that begins with " + shown(value)
	case a.Kind == rules.KindHeader:
		return "send it, such as -H '" + a.Name + ": " + value + "'"
	}
	return "send it in the URL's query, such as " + url.QueryEscape(a.Name) + "=" + url.QueryEscape(value)
}

// queryParams are the names of the query parameters of the URLs sent (the
// URL's, or each --path's), in order, each once.
func (c HTTPConfig) queryParams() []string {
	targets := []string{c.Target}
	if len(c.Routes) > 0 {
		targets = targets[:0]
		for _, r := range c.Routes {
			targets = append(targets, r.Path)
		}
	}
	var names []string
	for _, t := range targets {
		t, _, _ = strings.Cut(t, "#")
		_, query, _ := strings.Cut(t, "?")
		for _, pair := range strings.Split(query, "&") {
			k, _, _ := strings.Cut(pair, "=")
			if name, err := url.QueryUnescape(k); err == nil && name != "" && !slices.Contains(names, name) {
				names = append(names, name)
			}
		}
	}
	return names
}

// withQueryConsumer is target (a URL, or a --path) with {consumer} as the
// value of its query parameter name: the first such, else one added.
func withQueryConsumer(target, name string) string {
	rest, fragment, hasFragment := strings.Cut(target, "#")
	base, query, _ := strings.Cut(rest, "?")
	var pairs []string
	if query != "" {
		pairs = strings.Split(query, "&")
	}
	i := slices.IndexFunc(pairs, func(pair string) bool {
		k, _, _ := strings.Cut(pair, "=")
		u, err := url.QueryUnescape(k)
		return err == nil && u == name
	})
	if i >= 0 {
		k, _, _ := strings.Cut(pairs[i], "=")
		pairs[i] = k + "={consumer}"
	} else {
		pairs = append(pairs, url.QueryEscape(name)+"={consumer}")
	}
	out := base + "?" + strings.Join(pairs, "&")
	if hasFragment {
		out += "#" + fragment
	}
	return out
}

// unmetHint says why no descriptor sent met a limit of the configuration,
// when their keys show it: none begins with a key that the
// configuration's descriptors begin with. "" otherwise.
func (c RLSConfig) unmetHint() string {
	var top []string
	for _, d := range c.ExpectConfig.Descriptors {
		if !slices.Contains(top, d.Key) {
			top = append(top, d.Key)
		}
	}
	var sent []string
	for _, d := range c.descriptors() {
		if slices.Contains(top, d[0].Key) {
			return ""
		}
		if !slices.Contains(sent, d[0].Key) {
			sent = append(sent, d[0].Key)
		}
	}
	if len(top) == 0 || len(sent) == 0 {
		return ""
	}
	first := c.ExpectConfig.Descriptors[0]
	value, _ := first.Prefix()
	if first.Value == "" {
		value = "VALUE"
		if c.Consumers > 0 {
			value = "{consumer}"
		}
	}
	example := Descriptor{{Key: first.Key, Value: value}}
	return fmt.Sprintf("its descriptors begin with key %s, and those sent with %s: send one that begins with it, such as --descriptor %s",
		plural.List(top, "or"), plural.List(sent, "or"), example)
}

// cut is s cut to at most n bytes of valid UTF-8, … marking a cut.
func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n-len("…")], "") + "…"
}
