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

// The engine's side of the audit: after the run, it tells package audit
// what each request or call sent (as the rules read it), hands it the
// samples, and sends the probes it asks for (probes.go).

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

// localAddress is the address, without its port, that conn was opened
// from: the remote_address a gateway sees when no proxy is in between.
func localAddress(nc net.Conn) string {
	if host, _, err := net.SplitHostPort(nc.LocalAddr().String()); err == nil {
		return host
	}
	return ""
}

// runAudit has the audit judge a run's samples by cfg's limits, asking
// the engine for the Retry-After probes. It returns the meeting of samples
// and limits it judged by, and the hints of what the load missed
// (Result.AuditHints).
func runAudit(ctx context.Context, cfg HTTPConfig, p *plan, rec audit.Record, cov audit.Coverage, source string) (audit.Audit, *audit.Meeting, []string) {
	exps := cfg.expectations()
	var m audit.Meeting
	var values *sentValues
	name := p.consumerName
	if cfg.ExpectRules != nil {
		s := &sent{mix: p.req, consumers: cfg.Consumers, sources: p.sources, source: source}
		if cfg.Consumers == 0 {
			name = func(int32) string { return "the client" }
		}
		values = newSentValues(cfg.ExpectRules)
		m = audit.RulesMeeting(rec.Samples, cfg.ExpectRules, values.watch(s.request), name)
		for k, l := range cfg.ExpectRules.Limits() {
			if m.Met(k) == 0 {
				exps[k].Unmet = values.unmetHint(cfg, l)
			}
		}
	} else {
		m = audit.EveryConsumer(rec.Samples, len(exps), cfg.Consumers, p.consumerName)
	}
	a := audit.Judge(rec, exps, m, cov, name)
	audit.Probe(ctx, p, rec.Samples, &a, cov, probesOff(cfg.NoProbes, ""))
	var hints []string
	if values != nil {
		hints = values.oneCounterHints(cfg, cfg.ExpectRules, m)
	}
	if h := cfg.sharedHint(a); h != "" {
		hints = append(hints, h)
	}
	return a, &m, hints
}

// rlsAudit has the audit judge a run's calls against what cfg expects,
// asking the engine for the probes of duration_until_reset. It returns the
// meeting of samples and limits it judged by.
//
// Envoy refuses a request only when the overall code is OVER_LIMIT: it
// lets a call answered with any other code (UNKNOWN) through as it lets
// OK through, so the audit counts those calls as admitted (the results
// still show them as another code).
func rlsAudit(ctx context.Context, cfg RLSConfig, p *plan, calls *rlsCalls, rec *audit.Record, cov audit.Coverage) (audit.Audit, *audit.Meeting) {
	for i := range rec.Samples {
		if rec.Samples[i].Status == rlsUnknown {
			rec.Samples[i].Status = rlsOK
		}
	}
	svc := cfg.service(calls)
	skip := ""
	if cfg.Consumers > 1 {
		for _, d := range cfg.descriptors() {
			if !d.namesConsumer() {
				skip = "descriptor " + d.String() + " is every consumer's: the probes of several consumers at once would spend it"
				break
			}
		}
	}
	a, m := svc.Judge(ctx, rec, cov, p, probesOff(cfg.NoProbes, skip), p.consumerName)
	return a, &m
}

// service is the run of cfg's calls (made by calls) as the audit reads
// them, and what it holds the service to.
func (c RLSConfig) service(calls *rlsCalls) audit.Service {
	svc := audit.Service{Domain: c.Domain, Sent: calls.entries, Label: descriptorLabel, Consumers: c.Consumers, Cost: c.cost(),
		Config: c.ExpectConfig, Limit: audit.ExpectedLimit{Limit: c.ExpectLimit, Window: c.ExpectWindow, Algorithm: c.ExpectAlgorithm, Burst: c.ExpectBurst}}
	for _, set := range c.sets() {
		texts := make([]string, len(set.Descriptors))
		for i, d := range set.Descriptors {
			texts[i] = d.String()
		}
		svc.Sets = append(svc.Sets, texts)
	}
	if c.ExpectConfig != nil {
		svc.Unmet = c.unmetHint()
	}
	return svc
}

// probesOff is why no probe is made: they were turned off, or skip.
func probesOff(noProbes bool, skip string) string {
	if noProbes {
		return "probes turned off (--no-probes)"
	}
	return skip
}

// descriptorLabel is a descriptor's entries as key=value,key=value,
// escaped as Descriptor.String escapes them.
func descriptorLabel(entries []rules.Entry) string {
	d := make(Descriptor, len(entries))
	for i, e := range entries {
		d[i] = DescriptorEntry{Key: e.Key, Value: e.Value}
	}
	return d.String()
}

// coverage is what the samples hold of the run (l, with its defaults),
// for the audit.
func (d drove) coverage(ctx context.Context, l load) audit.Coverage {
	return audit.NewCoverage(d.warmUntil, d.horizon, l.Shards > 1 && l.SharedConsumers, ctx.Err() != nil)
}
