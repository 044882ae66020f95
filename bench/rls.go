package bench

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/ratelab/ratelab/audit"
	"github.com/ratelab/ratelab/internal/field"
	"github.com/ratelab/ratelab/internal/pemfile"
	"github.com/ratelab/ratelab/rules"
)

// RLSConfig is one load run against a rate limit service: calls of
// envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit over gRPC,
// on the engine bench http uses. Its load fields mean what HTTPConfig's of
// the same names mean.
type RLSConfig struct {
	// Target is the service's gRPC address, HOST:PORT.
	Target string
	// Domain is the domain of every call.
	Domain string
	// Descriptors are the descriptors of every call, in order; {consumer}
	// in a value stands for the consumer's identity (consumer-0 …, or
	// Identities), and {{ for a literal {.
	Descriptors []Descriptor
	// Sets, in place of Descriptors, are a mix of kinds of call: each call
	// sends the descriptors of one set, picked by the sets' weights as
	// bench http picks its routes: the k-th call of consumer c sends the
	// set at (k + c) mod W of a schedule in which each set stands as often
	// as its weight (W the weights' sum), interleaved. Every consumer thus
	// sends each set its share, and a run of whole rounds (W calls per
	// consumer) sends exactly the weights.
	Sets []DescriptorSet
	// HitsAddend is the call's hits_addend: what each descriptor takes of
	// its limit; 0 leaves it unset, which the service reads as 1.
	HitsAddend uint32

	// TLS calls the service over TLS, verifying its certificate against
	// the system's roots, or TLSCAFile's certificates when set, for
	// TLSServerName (default: Target's host); Insecure skips the
	// verification. TLSCertFile and TLSKeyFile are a client certificate
	// and its key (both or neither), for a service that asks for one
	// (mutual TLS). Each of the other fields needs TLS.
	TLS                                bool
	TLSCAFile, TLSCertFile, TLSKeyFile string
	TLSServerName                      string
	Insecure                           bool

	// Rate … Progress are the load, the run id and the probes, as
	// HTTPConfig's fields of the same names: calls per second (0: the
	// closed model), channels, the bounds of the run, consumers, shards.
	Rate            float64
	Connections     int
	Duration        time.Duration
	Requests        int64
	Warmup          time.Duration
	Consumers       int
	Timeout         time.Duration
	Interval        time.Duration
	Shard, Shards   int
	SharedConsumers bool
	StartAt         time.Time
	RunID           string
	KeepResponses   bool
	NoProbes        bool
	Progress        func(Progress)
	// Identities, when set, are the consumers' identities (API keys,
	// tenants …), Consumers of them, each sent where {consumer} stands in
	// place of consumer-0 …; the audit and the result name the consumers
	// by them, or by their pseudonyms (pseudonyms.go) unless
	// ShowIdentities.
	Identities     []string
	ShowIdentities bool

	// ExpectLimit per ExpectWindow, when set, audits the service: each
	// descriptor's counter (its values as sent, {consumer} rendered) is
	// held to that limit, in hits (each call takes HitsAddend), under
	// ExpectAlgorithm's guarantee (algorithms.Algorithms()) or, when empty,
	// the sliding-window rule.
	ExpectLimit     int64
	ExpectWindow    time.Duration
	ExpectAlgorithm string
	// ExpectBurst, when set, is ExpectLimit's burst in hits: the most
	// admitted at one instant, for ExpectAlgorithm token-bucket or gcra.
	ExpectBurst int64
	// ExpectConfig, when set, audits the service by its own configuration
	// of Domain (envoyproxy/ratelimit's file, parsed for the service): each
	// descriptor is held to the limits it meets there, each by its own
	// algorithm. Not with ExpectLimit.
	ExpectConfig *rules.Set
}

// Descriptor is one descriptor of a call: its entries, in order.
type Descriptor []DescriptorEntry

// DescriptorSet is one kind of call of a mix (RLSConfig.Sets): its
// descriptors, in order, sent in Weight of every W calls, W the sum of the
// sets' weights.
type DescriptorSet struct {
	Descriptors []Descriptor
	// Weight is the set's share of the calls: 1 to 1000.
	Weight int
}

// DescriptorEntry is one entry of a descriptor; Value may hold {consumer}.
type DescriptorEntry struct {
	Key, Value string
}

// String is the descriptor as --descriptor takes it: key=value,key=value,
// each comma and backslash of a key or value escaped (\, and \\), so that
// ParseDescriptor reads it back as d.
func (d Descriptor) String() string {
	var b strings.Builder
	for i, e := range d {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(descriptorEscaper.Replace(e.Key))
		b.WriteByte('=')
		b.WriteString(descriptorEscaper.Replace(e.Value))
	}
	return b.String()
}

// namesConsumer says whether a value of d holds {consumer}, as its
// template reads it: {{consumer} is the text {consumer}, no placeholder.
func (d Descriptor) namesConsumer() bool {
	for _, e := range d {
		if t, err := parseTemplate(e.Value); err == nil && t.uses(consumerPlaceholder) {
			return true
		}
	}
	return false
}

// descriptorEscaper escapes a key or value for Descriptor.String.
var descriptorEscaper = strings.NewReplacer(`\`, `\\`, `,`, `\,`)

// descriptorEscapes says what a --descriptor value may escape.
const descriptorEscapes = `\, is a comma and \\ a backslash`

// ParseDescriptor reads a --descriptor value: key=value[,key=value…], one
// descriptor of the call, in which \, is a comma that does not end the
// entry and \\ a backslash; any other backslash is refused. An entry
// without = is a key with an empty value; the spaces around a key are
// dropped, and a value is kept as it is.
func ParseDescriptor(s string) (Descriptor, error) {
	var d Descriptor
	var part strings.Builder
	key, inValue := "", false
	end := func() error {
		k, v := part.String(), ""
		if inValue {
			k, v = key, part.String()
		}
		k = strings.TrimSpace(k)
		if k == "" {
			return field.Errorf("Descriptors", "%q: an entry with no key: want key=value[,key=value…]", s)
		}
		d = append(d, DescriptorEntry{Key: k, Value: v})
		part.Reset()
		key, inValue = "", false
		return nil
	}
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '\\':
			if i+1 == len(s) {
				return nil, field.Errorf("Descriptors", "%s ends in a lone backslash: %s", shown(s), descriptorEscapes)
			}
			i++
			if s[i] != '\\' && s[i] != ',' {
				r, _ := utf8.DecodeRuneInString(s[i:])
				return nil, field.Errorf("Descriptors", "%s: \\%c is not an escape: %s", shown(s), r, descriptorEscapes)
			}
			part.WriteByte(s[i])
		case c == ',':
			if err := end(); err != nil {
				return nil, err
			}
		case c == '=' && !inValue:
			key, inValue = part.String(), true
			part.Reset()
		default:
			part.WriteByte(c)
		}
	}
	if err := end(); err != nil {
		return nil, err
	}
	return d, nil
}

// ParseDescriptorSet reads a --call value: WEIGHT:DESCRIPTOR[;DESCRIPTOR…],
// one kind of call of a mix: its weight, then its descriptors, each as
// ParseDescriptor reads it, between semicolons; \; is a semicolon that
// does not end the descriptor. The weight comes first and is required, so
// that no descriptor's text can be taken for it.
func ParseDescriptorSet(s string) (DescriptorSet, error) {
	w, rest, ok := strings.Cut(s, ":")
	weight, err := strconv.Atoi(w)
	if !ok || err != nil || w == "" || w[0] < '0' || w[0] > '9' {
		return DescriptorSet{}, field.Errorf("Sets", "%q: want WEIGHT:DESCRIPTOR[;DESCRIPTOR…], such as 3:path=/search,user={consumer}", s)
	}
	set := DescriptorSet{Weight: weight}
	var part strings.Builder
	end := func() error {
		d, err := ParseDescriptor(part.String())
		if err != nil {
			if fe, ok := err.(*field.Error); ok { // it names the descriptor
				return field.Errorf("Sets", "%s: %s", shown(s), fe.Reason)
			}
			return err
		}
		set.Descriptors = append(set.Descriptors, d)
		part.Reset()
		return nil
	}
	for i := 0; i < len(rest); i++ {
		switch c := rest[i]; {
		case c == '\\' && i+1 < len(rest) && rest[i+1] == ';':
			part.WriteByte(';')
			i++
		case c == '\\' && i+1 < len(rest):
			part.WriteString(rest[i : i+2]) // ParseDescriptor's escape, kept for it
			i++
		case c == ';':
			if err := end(); err != nil {
				return set, err
			}
		default:
			part.WriteByte(c)
		}
	}
	return set, end()
}

// String is the set as --call takes it: WEIGHT:, then each descriptor as
// Descriptor.String writes it, its semicolons escaped (\;), between
// semicolons, so that ParseDescriptorSet reads it back as set.
func (set DescriptorSet) String() string {
	var b strings.Builder
	b.WriteString(strconv.Itoa(set.Weight))
	b.WriteByte(':')
	for i, d := range set.Descriptors {
		if i > 0 {
			b.WriteByte(';')
		}
		b.WriteString(strings.ReplaceAll(d.String(), ";", `\;`))
	}
	return b.String()
}

// shown is s as a message shows it: as it is, when that prints as
// typed, else quoted.
func shown(s string) string {
	if strconv.CanBackquote(s) {
		return s
	}
	return strconv.Quote(s)
}

// maxDescriptors bounds the descriptors of one call.
const maxDescriptors = 64

// Validate checks cfg before anything is sent. Errors are *field.Error
// naming the fields of RLSConfig.
func (c RLSConfig) Validate() error {
	if host, port, err := net.SplitHostPort(c.Target); err != nil || port == "" || strings.Contains(host, "/") {
		return field.Errorf("Target", "%q: want the service's gRPC address, HOST:PORT", c.Target)
	} else if !validPort(port) {
		return field.Errorf("Target", "%q: the port %q is not between 1 and 65535", c.Target, port)
	}
	if err := c.load().validate(); err != nil {
		return err
	}
	switch {
	case c.Domain == "":
		return field.Errorf("Domain", "must not be empty: the service looks descriptors up in a domain")
	case len(c.Sets) > 0 && len(c.Descriptors) > 0:
		return field.Errorf("Sets", "and {Descriptors} are two ways of giving the calls: give one (a set of --call holds several descriptors)")
	case len(c.Descriptors) == 0 && len(c.Sets) == 0:
		return field.Errorf("Descriptors", "must be given at least once (or {Sets}): a call with no descriptor is malformed")
	case len(c.Sets) > audit.MaxRoutes:
		return field.Errorf("Sets", "at most %d (got %d)", audit.MaxRoutes, len(c.Sets))
	case c.RunID != "" && !runIDPattern.MatchString(c.RunID):
		return field.Errorf("RunID", "%q: want up to 64 letters, digits and . _ : -, beginning with a letter or digit", c.RunID)
	}
	for _, set := range c.Sets {
		switch {
		case set.Weight < 1 || set.Weight > maxWeight:
			return field.Errorf("Sets", "%s: the weight must be between 1 and %d (got %d)", set, maxWeight, set.Weight)
		case len(set.Descriptors) == 0:
			return field.Errorf("Sets", "%s: a call with no descriptor is malformed", set)
		}
	}
	for _, set := range c.sets() {
		if len(set.Descriptors) > maxDescriptors {
			return field.Errorf(c.callsField(), "at most %d descriptors in a call (got %d)", maxDescriptors, len(set.Descriptors))
		}
	}
	ts, err := c.templates()
	if err != nil {
		return err
	}
	if err := c.checkIdentities(ts); err != nil {
		return err
	}
	if _, err := c.tlsConfig(); err != nil {
		return err
	}
	return c.validateExpect()
}

// sets are the kinds of call: Sets, or the one of Descriptors.
func (c RLSConfig) sets() []DescriptorSet {
	if len(c.Sets) > 0 {
		return c.Sets
	}
	return []DescriptorSet{{Descriptors: c.Descriptors, Weight: 1}}
}

// callsField is the field that gives the calls: Sets or Descriptors.
func (c RLSConfig) callsField() string {
	if len(c.Sets) > 0 {
		return "Sets"
	}
	return "Descriptors"
}

// descriptors are the descriptors of every set, each once (the first of
// those of one text), in order: with ExpectLimit, each is a limit of its
// own, on the counter its values name.
func (c RLSConfig) descriptors() []Descriptor {
	var out []Descriptor
	seen := map[string]bool{}
	for _, set := range c.sets() {
		for _, d := range set.Descriptors {
			if t := d.String(); !seen[t] {
				seen[t] = true
				out = append(out, d)
			}
		}
	}
	return out
}

// severalPerCall says some call sends several descriptors.
func (c RLSConfig) severalPerCall() bool {
	for _, set := range c.sets() {
		if len(set.Descriptors) > 1 {
			return true
		}
	}
	return false
}

// severalPerCall says some call of a bench rls result sent several
// descriptors (or that its sets cannot be read, which the audit takes so).
func (s Settings) severalPerCall() bool {
	if len(s.Descriptors) > 1 {
		return true
	}
	for _, t := range s.DescriptorSets {
		if set, err := ParseDescriptorSet(t); err != nil || len(set.Descriptors) > 1 {
			return true
		}
	}
	return false
}

// checkIdentities checks Identities (checkIdentities), each a string a
// descriptor's value can carry (UTF-8), and that some value, of the
// templates ts, sends them.
func (c RLSConfig) checkIdentities(ts [][][]template) error {
	if c.Identities == nil {
		return nil
	}
	if err := checkIdentities(c.Identities, c.Consumers); err != nil {
		return err
	}
	for i, id := range c.Identities {
		if !utf8.ValidString(id) {
			return field.Errorf("Identities", ": identity %d is not UTF-8 text, which a descriptor's value must be", i+1)
		}
	}
	for _, set := range ts {
		for _, d := range set {
			for _, t := range d {
				if t.uses(consumerPlaceholder) {
					return nil
				}
			}
		}
	}
	return field.Errorf("Identities", "names the consumers where {consumer} stands, and no value of {%s} holds it", c.callsField())
}

// tlsConfig is the TLS configuration of the calls, read from its files:
// nil for plaintext. Errors are *field.Error.
func (c RLSConfig) tlsConfig() (*tls.Config, error) {
	if !c.TLS {
		for _, f := range []struct {
			name string
			set  bool
		}{{"TLSCAFile", c.TLSCAFile != ""}, {"TLSCertFile", c.TLSCertFile != ""}, {"TLSKeyFile", c.TLSKeyFile != ""},
			{"TLSServerName", c.TLSServerName != ""}, {"Insecure", c.Insecure}} {
			if f.set {
				return nil, field.Errorf(f.name, "needs {TLS}")
			}
		}
		return nil, nil
	}
	switch {
	case c.TLSCertFile != "" && c.TLSKeyFile == "":
		return nil, field.Errorf("TLSCertFile", "needs {TLSKeyFile}, the certificate's key")
	case c.TLSKeyFile != "" && c.TLSCertFile == "":
		return nil, field.Errorf("TLSKeyFile", "needs {TLSCertFile}, the certificate it is the key of")
	}
	host, _, _ := net.SplitHostPort(c.Target)
	t := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: host, InsecureSkipVerify: c.Insecure} //nolint:gosec // Insecure is the user's choice, for test services
	if c.TLSServerName != "" {
		t.ServerName = c.TLSServerName
	}
	if c.TLSCAFile != "" {
		pool, err := pemfile.CertPool(c.TLSCAFile)
		if err != nil {
			return nil, field.Errorf("TLSCAFile", ": %v", err)
		}
		t.RootCAs = pool
	}
	if c.TLSCertFile != "" {
		cert, err := pemfile.KeyPair(c.TLSCertFile, c.TLSKeyFile)
		if err != nil {
			return nil, field.Errorf("TLSCertFile", ": %v", err)
		}
		t.Certificates = []tls.Certificate{cert}
	}
	return t, nil
}

// templates are each set's descriptors' values as templates, in order:
// [set][descriptor][entry].
func (c RLSConfig) templates() ([][][]template, error) {
	f := c.callsField()
	sets := c.sets()
	out := make([][][]template, len(sets))
	for s, set := range sets {
		out[s] = make([][]template, len(set.Descriptors))
		for i, d := range set.Descriptors {
			if len(d) == 0 {
				return nil, field.Errorf(f, "descriptor %d has no entries", i+1)
			}
			for _, e := range d {
				if e.Key == "" {
					return nil, field.Errorf(f, "%s: an entry with no key", d)
				}
				t, err := parseTemplate(e.Value)
				if err != nil {
					return nil, field.Errorf(f, "%s: %v", d, err)
				}
				if t.uses(jwtPlaceholder) {
					return nil, field.Errorf(f, "%s: {jwt} is for bench http: a descriptor names its consumer with {consumer}", d)
				}
				if t.uses(consumerPlaceholder) && c.Consumers == 0 {
					return nil, field.Errorf(f, "%s: {consumer} needs {Consumers}", d)
				}
				out[s][i] = append(out[s][i], t)
			}
		}
	}
	return out, nil
}

// load is the run's load, as the engine reads it.
func (c RLSConfig) load() load {
	return load{Rate: c.Rate, Connections: c.Connections, Duration: c.Duration, Requests: c.Requests, Warmup: c.Warmup,
		Consumers: c.Consumers, Timeout: c.Timeout, Interval: c.Interval, Shard: c.Shard, Shards: c.Shards,
		SharedConsumers: c.SharedConsumers, StartAt: c.StartAt, KeepResponses: c.KeepResponses, Progress: c.Progress}
}

// RunRLS runs the load against the rate limit service and returns what it
// measured: OK answers count as status 200 and OVER_LIMIT as 429, so that
// results, merges and reports read as bench http's; a gRPC error (the
// service refused the call, or could not be reached) is a transport error.
// Cancelling ctx stops the run early; what was measured so far is returned
// with ctx's error.
func RunRLS(ctx context.Context, cfg RLSConfig) (Result, error) {
	if err := cfg.Validate(); err != nil {
		return Result{}, err
	}
	runID := cfg.runID()
	l := cfg.load().withDefaults()
	t := newTally(l.Interval)
	t.timeline.end = l.Duration
	calls, err := newRLSCalls(cfg)
	if err != nil {
		return Result{}, err
	}
	tc, err := cfg.tlsConfig()
	if err != nil {
		return Result{}, err
	}
	p := newSchedule(l, t, cfg.auditing())
	p.wire = func() wire { return newRLSWire(p, cfg.Target, calls, tc) }
	p.wholeAfter = true // duration_until_reset: when the limits are whole again
	p.identities = cfg.Identities
	if len(cfg.Sets) > 1 {
		weights := make([]int, len(cfg.Sets))
		for i, set := range cfg.Sets {
			weights[i] = set.Weight
		}
		p.sets = spread(weights)
	}
	ps := hidden(cfg.Identities, cfg.ShowIdentities)
	if ps != nil {
		p.pseudonyms = ps.names
	}
	d, stopProgress, err := drive(ctx, p, l)
	if err != nil {
		return Result{}, err
	}
	defer stopProgress()
	res := newResult(l, t, d.elapsed)
	res.Command, res.Target, res.Config.Method = "bench_rls", cfg.Target, "ShouldRateLimit"
	res.Config.Domain, res.Config.Descriptors, res.Config.Identities = cfg.Domain, cfg.descriptorTexts(), cfg.Identities
	if ps != nil {
		res.Config.Identities, res.Config.Pseudonyms = ps.names, ps.scheme()
	}
	for _, set := range cfg.Sets {
		res.Config.DescriptorSets = append(res.Config.DescriptorSets, set.String())
	}
	for _, d := range cfg.descriptors() {
		if d.namesConsumer() {
			res.Config.IdentityIn = append(res.Config.IdentityIn, "descriptor "+d.String())
		}
	}
	res.StartedUnixMillis = p.start.Add(l.Warmup).UnixMilli()
	res.RunID, res.Instance = runID, newInstance()
	d.fill(&res)
	if p.audit {
		a, m := rlsAudit(ctx, cfg, p, calls, &d.rec, d.coverage(ctx, l))
		res.Audit = &a
		res.AuditSamples = audit.Encode(d.rec, m)
		ps.hideKeys(res.AuditSamples)
	}
	return res, ctx.Err()
}

// descriptorTexts are the descriptors as --descriptor takes them.
func (c RLSConfig) descriptorTexts() []string {
	out := make([]string, len(c.Descriptors))
	for i, d := range c.Descriptors {
		out[i] = d.String()
	}
	return out
}

// runID is the id of the run cfg is part of: cfg.RunID when given, else a
// hash of what every shard of one run is given alike (see HTTPConfig's).
func (c RLSConfig) runID() string {
	if c.RunID != "" {
		return c.RunID
	}
	calls := fmt.Sprintf("%q", c.descriptorTexts())
	if len(c.Sets) > 0 {
		calls = fmt.Sprintf("sets %q", c.setTexts())
	}
	h := HTTPConfig{Target: "grpc://" + c.Target, Method: "ShouldRateLimit", Rate: c.Rate, Duration: c.Duration, Warmup: c.Warmup,
		Requests: c.Requests, Connections: c.Connections, Consumers: c.Consumers, Identities: c.Identities, Shards: c.Shards,
		SharedConsumers: c.SharedConsumers, StartAt: c.StartAt, ExpectLimit: c.ExpectLimit, ExpectWindow: c.ExpectWindow, ExpectAlgorithm: c.ExpectAlgorithm,
		Body: []byte(fmt.Sprintf("%q %s %d %v", c.Domain, calls, c.HitsAddend, c.ExpectConfig != nil))}
	if c.ExpectBurst > 0 { // left out when none, so that runs without one keep their id
		h.Body = fmt.Appendf(h.Body, " burst=%d", c.ExpectBurst)
	}
	return h.runID()
}

// setTexts are the sets as --call takes them.
func (c RLSConfig) setTexts() []string {
	out := make([]string, len(c.Sets))
	for i, set := range c.Sets {
		out[i] = set.String()
	}
	return out
}
