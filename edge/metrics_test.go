package edge_test

import (
	"fmt"
	"math"
	"net/http"
	"runtime"
	"slices"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/ratelab/ratelab/internal/redisrun/redistest"
	"github.com/ratelab/ratelab/limiter"
)

// scrape reads /metrics from a gateway's admin listener as Prometheus does
// and parses the text exposition format.
func scrape(t *testing.T, adminAddr string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := httpClient.Get("http://" + adminAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); resp.StatusCode != http.StatusOK || !strings.HasPrefix(ct, "text/plain") {
		t.Fatalf("/metrics answered %d with Content-Type %q, want 200 and text/plain", resp.StatusCode, ct)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	families, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("/metrics does not parse: %v", err)
	}
	return families
}

// byLabel maps the value of label to each counter of family.
func byLabel(t *testing.T, family *dto.MetricFamily, label string) map[string]float64 {
	t.Helper()
	values := map[string]float64{}
	for _, m := range family.GetMetric() {
		if len(m.GetLabel()) != 1 || m.GetLabel()[0].GetName() != label {
			t.Fatalf("%s has labels %v, want %s alone", family.GetName(), m.GetLabel(), label)
		}
		values[m.GetLabel()[0].GetValue()] = m.GetCounter().GetValue()
	}
	return values
}

// TestMetricsScrape: two gateways in one process, each on a registry of its
// own; /metrics of the one that decided parses, names the edge metrics with
// their types, every outcome and kind (the unused ones at 0) and the
// histogram's buckets, agrees with the Go API, and carries the Go runtime's
// metrics (and the process's, on Linux). The other gateway counted nothing.
func TestMetricsScrape(t *testing.T) {
	t.Parallel()
	redistest.Client(t, srv)
	g, _ := startGateway(t, srv.Addr, setup{limit: 1, denyCache: true})
	idle, _ := startGateway(t, srv.Addr, setup{limit: 1})
	hdr := map[string]string{"X-Consumer-Id": redistest.Prefix(t)}
	for i, want := range []int{http.StatusOK, http.StatusTooManyRequests, http.StatusTooManyRequests} {
		if resp, _ := get(t, "http://"+g.Addr()+"/", hdr); resp.StatusCode != want {
			t.Fatalf("request %d: %d, want %d", i+1, resp.StatusCode, want)
		}
	}

	families := scrape(t, g.AdminAddr())
	types := map[string]dto.MetricType{
		"ratelab_edge_decisions_total":       dto.MetricType_COUNTER,
		"ratelab_edge_redis_errors_total":    dto.MetricType_COUNTER,
		"ratelab_edge_deny_cache_hits_total": dto.MetricType_COUNTER,
		"ratelab_edge_decision_seconds":      dto.MetricType_HISTOGRAM,
		"go_goroutines":                      dto.MetricType_GAUGE,
	}
	if runtime.GOOS == "linux" { // the process collector reads /proc
		types["process_cpu_seconds_total"] = dto.MetricType_COUNTER
		types["process_resident_memory_bytes"] = dto.MetricType_GAUGE
		types["process_open_fds"] = dto.MetricType_GAUGE
		types["process_start_time_seconds"] = dto.MetricType_GAUGE
	}
	for name, typ := range types {
		f, ok := families[name]
		if !ok {
			t.Fatalf("/metrics lacks %s", name)
		}
		if f.GetType() != typ || len(f.GetMetric()) == 0 {
			t.Fatalf("%s is a %s with %d series, want a %s", name, f.GetType(), len(f.GetMetric()), typ)
		}
	}
	if n := families["go_goroutines"].GetMetric()[0].GetGauge().GetValue(); n < 1 {
		t.Fatalf("go_goroutines %v", n)
	}

	decisions := byLabel(t, families["ratelab_edge_decisions_total"], "outcome")
	want := map[string]float64{
		limiter.OutcomeAllowed: 1, limiter.OutcomeDenied: 1, limiter.OutcomeDenyCache: 1, limiter.OutcomeShadowDenied: 0,
		limiter.OutcomeErrorOpen: 0, limiter.OutcomeErrorClosed: 0, limiter.OutcomeErrorLocalAllowed: 0, limiter.OutcomeErrorLocalDenied: 0,
		limiter.OutcomeInvalid: 0,
	}
	if fmt.Sprint(decisions) != fmt.Sprint(want) {
		t.Fatalf("ratelab_edge_decisions_total %v, want %v", decisions, want)
	}
	for outcome, n := range decisions {
		if api := g.Metrics().Decisions(outcome); float64(api) != n {
			t.Errorf("outcome %s: %v scraped, %d from Metrics.Decisions", outcome, n, api)
		}
	}
	if errs := byLabel(t, families["ratelab_edge_redis_errors_total"], "kind"); fmt.Sprint(errs) != "map[oom:0 other:0 timeout:0 unreachable:0]" {
		t.Fatalf("ratelab_edge_redis_errors_total %v, want every kind at 0", errs)
	}
	for name, want := range map[string]float64{"ratelab_edge_redis_up": 1, "ratelab_edge_circuit_open": 0} {
		if f, ok := families[name]; !ok || f.GetMetric()[0].GetGauge().GetValue() != want {
			t.Fatalf("%s: %v, want a gauge at %v", name, f, want)
		}
	}
	if hits := families["ratelab_edge_deny_cache_hits_total"].GetMetric()[0].GetCounter().GetValue(); hits != 1 || g.Metrics().DenyCacheHits() != 1 {
		t.Fatalf("deny cache hits: %v scraped, %d from the API; want 1", hits, g.Metrics().DenyCacheHits())
	}

	// Two decisions went to Redis; the one from the cache is not timed.
	h := families["ratelab_edge_decision_seconds"].GetMetric()[0].GetHistogram()
	var bounds []float64
	var last uint64
	for _, b := range h.GetBucket() {
		bounds = append(bounds, b.GetUpperBound())
		if b.GetCumulativeCount() < last {
			t.Fatalf("buckets not cumulative: %v", h.GetBucket())
		}
		last = b.GetCumulativeCount()
	}
	wantBounds := []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, math.Inf(1)}
	if !slices.Equal(bounds, wantBounds) {
		t.Fatalf("ratelab_edge_decision_seconds buckets %v, want %v", bounds, wantBounds)
	}
	if h.GetSampleCount() != 2 || last != 2 || h.GetSampleSum() <= 0 {
		t.Fatalf("ratelab_edge_decision_seconds: count %d, sum %v, +Inf bucket %d; want 2 decisions timed",
			h.GetSampleCount(), h.GetSampleSum(), last)
	}

	// The other gateway's registry is its own.
	zero := map[string]float64{}
	for outcome := range want {
		zero[outcome] = 0
	}
	if idled := byLabel(t, scrape(t, idle.AdminAddr())["ratelab_edge_decisions_total"], "outcome"); fmt.Sprint(idled) != fmt.Sprint(zero) {
		t.Fatalf("the idle gateway's ratelab_edge_decisions_total %v, want %v", idled, zero)
	}
}
