package bench

import (
	"bufio"
	"bytes"
	"context"
	"net"
	"net/http"
	"net/netip"

	"github.com/ratelab/ratelab/audit"
	"github.com/ratelab/ratelab/rules"
)

// sent describes the requests of a run as a gateway reads them, for the
// rules they meet: each is read back from the bytes the engine sends, so
// that every identity, route and header is the one sent.
type sent struct {
	mix       *mix
	consumers int
	// sources are the consumers' own addresses (--source-ips), one each;
	// without them, every request is sent from source (no port).
	sources []netip.Addr
	source  string
	buf     []byte
}

// request is the request of consumer to route, as the rules read it, sent
// from the consumer's address; with no consumer, that of the one client.
func (s *sent) request(route, consumer int) rules.Request {
	if s.consumers == 0 {
		consumer = -1 // the one client, as the engine sends it
	}
	from := s.source
	if consumer >= 0 && consumer < len(s.sources) {
		from = s.sources[consumer].Unmap().String()
	}
	raw := s.mix.request(route, consumer).render(&s.buf, consumer)
	req, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(raw)))
	if err != nil { // the engine's own request: never
		return rules.Request{RemoteAddress: from}
	}
	return rules.Request{Method: req.Method, Path: req.URL.Path, Query: req.URL.RawQuery, Host: req.Host,
		RemoteAddress: from, Header: req.Header}
}

// rulesMeeting finds the limits of set that each sample's request met, and
// its counter of each (Hit.Key): requests of one counter are judged
// together. A counter is named after its consumer while it has one, and
// by the hit's label (domain, entries, limit) when several share it.
func rulesMeeting(samples []sample, set *rules.Set, req func(route, consumer int) rules.Request, name func(int32) string) meeting {
	limits := set.Limits()
	index := make(map[*rules.Limit]int, len(limits))
	for k, l := range limits {
		index[l] = k
	}
	// Each kind of request (a route and a consumer) meets the same limits
	// on the same counters: found once, on its first sample.
	type hit struct{ k, c int32 }
	cache := map[[2]int32][]hit{}
	b := newCounterBook(len(samples), len(limits), name)
	for i, s := range samples {
		at := [2]int32{int32(s.route), s.consumer}
		hs, ok := cache[at]
		if !ok {
			hs = []hit{}
			for _, h := range set.Match(req(int(s.route), int(s.consumer))) {
				k := int32(index[h.Limit])
				key := h.Key
				if key == "" { // unlimited: no counter; one per entries
					key = h.Label()
				}
				hs = append(hs, hit{k: k, c: b.counter(k, key, h.Label(), s.consumer)})
			}
			cache[at] = hs
		}
		for _, h := range hs {
			b.add(i, h.k, h.c)
		}
	}
	return b.m
}

// localAddress is the address, without its port, that conn was opened
// from: the remote_address a gateway sees when no proxy is in between.
func localAddress(nc net.Conn) string {
	if host, _, err := net.SplitHostPort(nc.LocalAddr().String()); err == nil {
		return host
	}
	return ""
}

// runAudit judges a run's samples (with their adverts) by cfg's limits,
// and asks the engine for the Retry-After probes. It returns the meeting
// of samples and limits it judged by, and the hints of what the load
// missed (Result.AuditHints).
func runAudit(ctx context.Context, cfg HTTPConfig, p *plan, samples []sample, advs []advert, cov coverage, source string) (audit.Audit, *meeting, []string) {
	exps := cfg.expectations()
	var m meeting
	var values *sentValues
	name := p.consumerName
	if cfg.ExpectRules != nil {
		s := &sent{mix: p.req, consumers: cfg.Consumers, sources: p.sources, source: source}
		if cfg.Consumers == 0 {
			name = func(int32) string { return "the client" }
		}
		values = newSentValues(cfg.ExpectRules)
		m = rulesMeeting(samples, cfg.ExpectRules, values.watch(s.request), name)
		for k, l := range cfg.ExpectRules.Limits() {
			if len(m.of[k].idx) == 0 {
				exps[k].unmet = values.unmetHint(cfg, l)
			}
		}
	} else {
		m = everyConsumer(samples, len(exps), cfg.Consumers, p.consumerName)
	}
	a := auditLimits(samples, advs, exps, m, cov)
	checkViolated(&a, samples, advs, exps, m, name)
	probeLimits(ctx, p, samples, &a, cov, cfg.NoProbes, "")
	var hints []string
	if values != nil {
		hints = values.oneCounterHints(cfg, cfg.ExpectRules, m)
	}
	if h := cfg.sharedHint(a); h != "" {
		hints = append(hints, h)
	}
	return a, &m, hints
}

// probeLimits asks the engine for one set of Retry-After probes for every
// limit judged: a consumer denied must be admitted again once its
// Retry-After has passed, by every limit that could have denied it. skip,
// when set, says why no probe can be made.
func probeLimits(ctx context.Context, p *plan, samples []sample, a *audit.Audit, cov coverage, noProbes bool, skip string) {
	var probed *audit.RetryAfterAudit
	for i := range a.Limits {
		l := &a.Limits[i]
		switch {
		case l.Verdict == audit.NotJudged:
			l.RetryAfter.Skipped = "not judged"
		case cov.partial:
			// Another machine may be asking the same consumer meanwhile.
			l.RetryAfter.Skipped = sharedNote
		case noProbes:
			l.RetryAfter.Skipped = "probes turned off (--no-probes)"
		case skip != "":
			l.RetryAfter.Skipped = skip
		case ctx.Err() != nil:
			l.RetryAfter.Skipped = "the run was interrupted"
		case probed != nil:
			l.RetryAfter = *probed
		default:
			largest := *l
			for _, o := range a.Limits {
				if o.Verdict != audit.NotJudged && o.Limit > largest.Limit {
					largest.Limit = o.Limit
				}
			}
			probeRetryAfter(ctx, p, samples, &largest)
			l.RetryAfter = largest.RetryAfter
			probed = &l.RetryAfter
		}
	}
}
