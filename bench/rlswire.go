package bench

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"strings"
	"time"

	rlpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/ratelab/ratelab/audit"
	"github.com/ratelab/ratelab/rules"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// The statuses a call's overall code counts as, in samples, the tally and
// results: an OK is a 2xx, an OVER_LIMIT a 429, and any other code (UNKNOWN)
// a response that says nothing of the limit.
const (
	rlsOK      = 200
	rlsOver    = 429
	rlsUnknown = 500
)

// rlsCalls are the calls a run sends: for each of its sets (one, unless
// the run mixes them), one per consumer, made once when there are few,
// else rendered per call.
type rlsCalls struct {
	domain string
	addend uint32
	// names are the consumers' identities; nil for consumer-N.
	names []string
	sets  []rlsSet
}

// rlsSet is the calls of one set of descriptors.
type rlsSet struct {
	// keys and values are each descriptor's entries; shared is the one
	// call when no value names its consumer.
	keys   [][]string
	values [][]template
	shared *pb.RateLimitRequest
	// made holds each consumer's call, when the run's sets hold at most
	// maxMade descriptors over all consumers.
	made []*pb.RateLimitRequest
}

// maxMade bounds the descriptors of the calls made before the run.
const maxMade = 100_000

func newRLSCalls(cfg RLSConfig) (*rlsCalls, error) {
	ts, err := cfg.templates()
	if err != nil {
		return nil, err
	}
	c := &rlsCalls{domain: cfg.Domain, addend: cfg.HitsAddend, names: cfg.Identities, sets: make([]rlsSet, len(ts))}
	descriptors := 0
	for _, set := range cfg.sets() {
		descriptors += len(set.Descriptors)
	}
	for s, set := range cfg.sets() {
		cs := &c.sets[s]
		cs.values = ts[s]
		perConsumer := false
		for i, d := range set.Descriptors {
			keys := make([]string, len(d))
			for j, e := range d {
				keys[j] = e.Key
				perConsumer = perConsumer || ts[s][i][j].uses(consumerPlaceholder)
			}
			cs.keys = append(cs.keys, keys)
		}
		switch {
		case !perConsumer:
			cs.shared = c.render(s, -1)
		case cfg.Consumers*descriptors <= maxMade:
			cs.made = make([]*pb.RateLimitRequest, cfg.Consumers)
			for i := range cs.made {
				cs.made[i] = c.render(s, i)
			}
		}
	}
	return c, nil
}

// request is consumer's call (-1: no consumer) of set. It is only read:
// every connection may send it at once.
func (c *rlsCalls) request(set, consumer int) *pb.RateLimitRequest {
	cs := &c.sets[set]
	switch {
	case cs.shared != nil:
		return cs.shared
	case consumer >= 0 && consumer < len(cs.made):
		return cs.made[consumer]
	}
	return c.render(set, consumer)
}

// entries are the entries of each descriptor of consumer's call (-1: no
// consumer) of set, as the rules read them.
func (c *rlsCalls) entries(set, consumer int) [][]rules.Entry {
	req := c.request(set, consumer)
	descs := make([][]rules.Entry, len(req.GetDescriptors()))
	for d, desc := range req.GetDescriptors() {
		entries := make([]rules.Entry, len(desc.GetEntries()))
		for j, e := range desc.GetEntries() {
			entries[j] = rules.Entry{Key: e.GetKey(), Value: e.GetValue()}
		}
		descs[d] = entries
	}
	return descs
}

// render makes consumer's call of set.
func (c *rlsCalls) render(set, consumer int) *pb.RateLimitRequest {
	cs := &c.sets[set]
	req := &pb.RateLimitRequest{Domain: c.domain, HitsAddend: c.addend, Descriptors: make([]*rlpb.RateLimitDescriptor, len(cs.keys))}
	for i, keys := range cs.keys {
		d := &rlpb.RateLimitDescriptor{Entries: make([]*rlpb.RateLimitDescriptor_Entry, len(keys))}
		for j, k := range keys {
			d.Entries[j] = &rlpb.RateLimitDescriptor_Entry{Key: k, Value: c.value(cs.values[i][j], consumer)}
		}
		req.Descriptors[i] = d
	}
	return req
}

// value is an entry's value t as consumer sends it.
func (c *rlsCalls) value(t template, consumer int) string {
	return t.render(func(placeholder) string {
		switch {
		case consumer < 0:
			return ""
		case consumer < len(c.names):
			return c.names[consumer]
		}
		return consumerName(int32(consumer))
	})
}

// rlsWire is a connection's gRPC channel to the rate limit service: a
// grpc.ClientConn of its own, opened at its first call, over TLS when tls
// is set.
type rlsWire struct {
	p      *plan
	target string
	calls  *rlsCalls
	tls    *tls.Config
	cc     *grpc.ClientConn
	client pb.RateLimitServiceClient
	resp   *pb.RateLimitResponse
}

var _ wire = (*rlsWire)(nil)

func newRLSWire(p *plan, target string, calls *rlsCalls, tc *tls.Config) *rlsWire {
	return &rlsWire{p: p, target: target, calls: calls, tls: tc}
}

// exchange makes consumer's call of set (the route the engine picked),
// bounded by the run's timeout.
func (w *rlsWire) exchange(ctx context.Context, sentAt time.Time, consumer, set int) (int, int64, error) {
	w.resp = nil
	if w.cc == nil {
		creds := insecure.NewCredentials()
		if w.tls != nil {
			creds = credentials.NewTLS(w.tls)
		}
		cc, err := grpc.NewClient(w.target, grpc.WithTransportCredentials(creds))
		if err != nil {
			return 0, 0, &rlsError{err: err, kind: kindOther}
		}
		w.cc, w.client = cc, pb.NewRateLimitServiceClient(cc)
	}
	cctx, cancel := context.WithDeadline(ctx, sentAt.Add(w.p.timeout))
	resp, err := w.client.ShouldRateLimit(cctx, w.calls.request(set, consumer))
	cancel()
	if err != nil {
		return 0, 0, rlsFailure(err, w.tls != nil)
	}
	w.resp = resp
	return rlsStatus(resp.GetOverallCode()), int64(proto.Size(resp)), nil
}

// rlsStatus is the status an overall code counts as.
func rlsStatus(code pb.RateLimitResponse_Code) int {
	switch code {
	case pb.RateLimitResponse_OK:
		return rlsOK
	case pb.RateLimitResponse_OVER_LIMIT:
		return rlsOver
	}
	return rlsUnknown
}

// record keeps s with the last answer: its overall code, and each
// descriptor's status as a policy named by the descriptor's index (the
// audit names them by limit): current_limit as quota and window (s),
// limit_remaining as remaining, duration_until_reset as the time to reset
// (s, rounded up). A call OVER_LIMIT waits, as its Retry-After, the
// longest duration_until_reset of the descriptors over their limit or
// with nothing remaining (the next call would be refused by them too);
// its reset is the longest of every descriptor with a limit, when all of
// them are whole again.
func (w *rlsWire) record(rec *audit.Record, s audit.Sample) {
	if w.resp == nil {
		rec.Add(s)
		return
	}
	s.Status = int16(rlsStatus(w.resp.GetOverallCode()))
	statuses := w.resp.GetStatuses()
	for _, st := range statuses {
		reset := until(st)
		cl := st.GetCurrentLimit()
		exhausted := st.GetCode() == pb.RateLimitResponse_OVER_LIMIT || (cl != nil && st.GetLimitRemaining() == 0)
		if s.Status == rlsOver && exhausted && reset >= 0 {
			s.RetryAfter = max(s.RetryAfter, reset)
		}
		if cl != nil && reset >= 0 {
			s.Reset = max(s.Reset, reset)
		}
	}
	rec.Add(s)
	for i, st := range statuses {
		cl := st.GetCurrentLimit()
		if cl == nil {
			continue
		}
		resetSecs := int64(-1)
		if reset := until(st); reset >= 0 {
			resetSecs = int64((reset + time.Second - 1) / time.Second)
		}
		rec.AddStatus(i, int64(cl.GetRequestsPerUnit()), int64(limitWindow(cl)/time.Second), int64(st.GetLimitRemaining()), resetSecs)
	}
}

// until is a status' duration_until_reset; -1 when it gives none.
func until(st *pb.RateLimitResponse_DescriptorStatus) time.Duration {
	if d := st.GetDurationUntilReset(); d != nil && d.IsValid() {
		return max(d.AsDuration(), 0)
	}
	return -1
}

// unitSeconds are the units of a status' current_limit.
var unitSeconds = map[pb.RateLimitResponse_RateLimit_Unit]time.Duration{
	pb.RateLimitResponse_RateLimit_SECOND: time.Second, pb.RateLimitResponse_RateLimit_MINUTE: time.Minute,
	pb.RateLimitResponse_RateLimit_HOUR: time.Hour, pb.RateLimitResponse_RateLimit_DAY: 24 * time.Hour,
	pb.RateLimitResponse_RateLimit_WEEK: 7 * 24 * time.Hour, pb.RateLimitResponse_RateLimit_MONTH: 30 * 24 * time.Hour,
	pb.RateLimitResponse_RateLimit_YEAR: 365 * 24 * time.Hour,
}

// limitWindow is a current_limit's window: its unit times its
// unit_multiplier (when above 1); 0 for an unknown unit.
func limitWindow(cl *pb.RateLimitResponse_RateLimit) time.Duration {
	w := unitSeconds[cl.GetUnit()]
	if m := cl.GetUnitMultiplier(); m != nil && m.GetValue() > 1 {
		w *= time.Duration(m.GetValue())
	}
	return w
}

// limited says the last answer gave a descriptor's limit.
func (w *rlsWire) limited() bool {
	for _, st := range w.resp.GetStatuses() {
		if st.GetCurrentLimit() != nil {
			return true
		}
	}
	return false
}

// cancel does nothing: a call is cut by the run's context itself.
func (w *rlsWire) cancel() {}

// hangUp closes the channel; the next call opens a new one.
func (w *rlsWire) hangUp() {
	if w.cc != nil {
		w.cc.Close()
		w.cc, w.client = nil, nil
	}
}

func (w *rlsWire) source() string { return "" }

// rlsError is a call that failed, of the kind its gRPC status says.
type rlsError struct {
	err  error
	kind errKind
}

func (e *rlsError) Error() string { return e.err.Error() }
func (e *rlsError) Unwrap() error { return e.err }

// rlsFailure names the kind of a failed call: the deadline passed
// (timeout); the service could not be reached (refused), the channel
// broke (reset) or TLS failed (tls); the service answered with an error
// status, such as InvalidArgument or Unimplemented (protocol). overTLS says
// whether the call was made over TLS.
func rlsFailure(err error, overTLS bool) error {
	st, ok := status.FromError(err)
	if !ok {
		return &rlsError{err: err, kind: classify(err)}
	}
	kind := kindProtocol
	switch st.Code() {
	case codes.DeadlineExceeded:
		kind = kindTimeout
	case codes.Canceled:
		kind = kindOther
	case codes.Unavailable:
		kind = kindReset
		switch msg := st.Message(); {
		case strings.Contains(msg, "connection refused"):
			kind = kindRefused
		case strings.Contains(msg, "tls: ") || strings.Contains(msg, "authentication handshake failed"):
			kind = kindTLS
		case !overTLS && strings.Contains(msg, "error reading server preface"):
			// A service served over TLS hangs up so on a plaintext call.
			err = fmt.Errorf("%w (if the service is served over TLS, call it with --tls)", err)
		}
	}
	return &rlsError{err: err, kind: kind}
}

// kindOf is the kind of an rlsError in err's chain.
func kindOf(err error) (errKind, bool) {
	var re *rlsError
	if errors.As(err, &re) {
		return re.kind, true
	}
	return 0, false
}
