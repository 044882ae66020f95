package bench_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ratelab/ratelab/audit"
	"github.com/ratelab/ratelab/bench"
	"github.com/ratelab/ratelab/internal/field"
)

func TestParseSourceIPs(t *testing.T) {
	for _, tc := range []struct {
		in    string
		first string
		n     int
		err   string
	}{
		{in: "127.0.0.2-127.0.0.60", first: "127.0.0.2", n: 59},
		{in: "127.0.0.2,127.0.0.9, 127.0.1.1-127.0.1.2", first: "127.0.0.2", n: 4},
		{in: "127.0.0.255-127.0.1.1", first: "127.0.0.255", n: 3},
		{in: "::1", first: "::1", n: 1},
		{in: "127.0.0.0-127.1.0.0", err: "more than 65536 addresses"},
		{in: "127.0.0.9-127.0.0.2", err: "must ascend"},
		{in: "127.0.0.1-::2", err: "must ascend, in one address family"},
		{in: "127.0.0.x", err: `"127.0.0.x" is not an IP address`},
		{in: "127.0.0.2-", err: `"" is not an IP address`},
		{in: "", err: "is not an IP address"},
	} {
		t.Run(tc.in, func(t *testing.T) {
			addrs, err := bench.ParseSourceIPs(tc.in)
			var fe *field.Error
			switch {
			case tc.err != "" && (!errors.As(err, &fe) || fe.Field != "SourceIPs" || !strings.Contains(err.Error(), tc.err)):
				t.Fatalf("error %v, want one of SourceIPs with %q", err, tc.err)
			case tc.err == "" && err != nil:
				t.Fatal(err)
			case tc.err == "" && (len(addrs) != tc.n || addrs[0].String() != tc.first):
				t.Fatalf("%d addresses from %v, want %d from %s", len(addrs), addrs[0], tc.n, tc.first)
			}
		})
	}
}

// Each consumer's requests come from its own address, whichever
// connection sends them: with 2 connections for 3 consumers, a connection
// reopens from the next consumer's address. The audit names each consumer
// by its address, and no consumer header is sent without one.
func TestSourceIPsBindEachConsumer(t *testing.T) {
	t.Parallel()
	addrs, err := bench.ParseSourceIPs("127.0.0.2-127.0.0.4")
	if err != nil {
		t.Fatal(err)
	}
	for _, header := range []string{"X-Consumer-Id", ""} {
		t.Run("header "+header, func(t *testing.T) {
			t.Parallel()
			var mu sync.Mutex
			from := map[string]map[string]int{} // consumer header → peer address → requests
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				host, _, _ := net.SplitHostPort(r.RemoteAddr)
				mu.Lock()
				defer mu.Unlock()
				c := r.Header.Get("X-Consumer-Id")
				if from[c] == nil {
					from[c] = map[string]int{}
				}
				from[c][host]++
				if from[c][host] > 3 { // each address's fourth on is denied
					w.WriteHeader(http.StatusTooManyRequests)
				}
			}))
			defer srv.Close()
			res, err := bench.RunHTTP(context.Background(), bench.HTTPConfig{Target: srv.URL, Rate: 200, Requests: 30, Connections: 2,
				Consumers: 3, ConsumerHeader: header, SourceIPs: addrs, ExpectLimit: 3, ExpectWindow: time.Minute, NoProbes: true})
			if err != nil {
				t.Fatal(err)
			}
			if res.Requests != 30 || res.Errors != 0 {
				t.Fatalf("%d requests, %d errors (%v)", res.Requests, res.Errors, res.ErrorKinds)
			}
			mu.Lock()
			defer mu.Unlock()
			for c, peers := range from {
				if header == "" && c != "" {
					t.Fatalf("a consumer header was sent: %q", c)
				}
				if header != "" && (len(peers) != 1 || peers[addrs[int(c[len(c)-1]-'0')].String()] != 10) {
					t.Fatalf("%s came from %v, want 10 from its own address", c, peers)
				}
			}
			if header == "" && len(from[""]) != 3 {
				t.Fatalf("requests came from %v, want three addresses", from[""])
			}
			a := res.Audit
			if a == nil || a.Verdict != audit.Held || a.Limits[0].Consumers != 3 || !strings.HasPrefix(a.Limits[0].WorstConsumer, "127.0.0.") {
				t.Fatalf("audit %+v: want three held consumers named by address", a)
			}
			if res.Config.SourceIPs != "127.0.0.2-127.0.0.4" || len(res.Config.Identities) != 3 || res.Config.Identities[1] != "127.0.0.3" {
				t.Fatalf("source_ips %q, names %q", res.Config.SourceIPs, res.Config.Identities)
			}
			// The HTML page's chart names them alike.
			if cw, err := res.RollingAdmissions(3); err != nil || len(cw) != 3 || !strings.HasPrefix(cw[0].Consumer, "127.0.0.") {
				t.Fatalf("rolling admissions %+v, %v", cw, err)
			}
		})
	}
}

// A run whose source addresses are not one per consumer, or repeat one,
// is refused before anything is sent.
func TestSourceIPsRefused(t *testing.T) {
	a, b := netip.MustParseAddr("127.0.0.2"), netip.MustParseAddr("127.0.0.3")
	for _, tc := range []struct {
		addrs []netip.Addr
		want  string
	}{
		{[]netip.Addr{a, b, a}, "gives 127.0.0.2 twice"},
		{[]netip.Addr{a, b}, "gives 2 addresses for 3 consumers"},
		{[]netip.Addr{a, b, netip.IPv4Unspecified()}, "0.0.0.0 is not an address"},
	} {
		cfg := bench.HTTPConfig{Target: "http://127.0.0.1:1/", Rate: 10, Duration: time.Second, Consumers: 3, SourceIPs: tc.addrs}
		var fe *field.Error
		if err := cfg.Validate(); !errors.As(err, &fe) || fe.Field != "SourceIPs" || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v; want SourceIPs and %q", tc.addrs, err, tc.want)
		}
	}
}

// Two shards of one run, each sending its own consumers from their own
// addresses, merge into one audit of every consumer, named by address.
func TestSourceIPsShardsMerge(t *testing.T) {
	t.Parallel()
	addrs, err := bench.ParseSourceIPs("127.0.0.2,127.0.0.3,127.0.0.4")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	count := map[string]int{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host, _, _ := net.SplitHostPort(r.RemoteAddr)
		mu.Lock()
		defer mu.Unlock()
		count[host]++
		if count[host] > 3 {
			w.WriteHeader(http.StatusTooManyRequests)
		}
	}))
	defer srv.Close()
	start := time.Now().Add(200 * time.Millisecond)
	runs := make([]bench.Result, 2)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for i := range runs {
		wg.Go(func() {
			runs[i], errs[i] = bench.RunHTTP(context.Background(), bench.HTTPConfig{Target: srv.URL, Rate: 200, Requests: 30, Connections: 2,
				Consumers: 3, ConsumerHeader: "X-Consumer-Id", SourceIPs: addrs, ExpectLimit: 3, ExpectWindow: time.Minute, NoProbes: true,
				Shard: i, Shards: 2, StartAt: start})
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	if runs[0].RunID != runs[1].RunID {
		t.Fatalf("shards of one run with run ids %q and %q", runs[0].RunID, runs[1].RunID)
	}
	m, err := bench.Merge(runs, 5*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	a := m.Audit
	if a == nil || a.Verdict != audit.Held || a.Limits[0].Consumers != 3 || m.RunID != runs[0].RunID || len(m.Config.Identities) != 3 ||
		m.Config.SourceIPs != "127.0.0.2-127.0.0.4" {
		t.Fatalf("merged: run id %q, names %q, audit %+v", m.RunID, m.Config.Identities, a)
	}
	for _, c := range a.Limits[0].WorstConsumers {
		if !strings.HasPrefix(c.Consumer, "127.0.0.") || c.Admitted != 3 {
			t.Fatalf("merged consumer %+v: want one named by its address, admitted 3", c)
		}
	}
}
