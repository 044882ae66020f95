package bench_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratelab/ratelab/bench"
)

// rawServer accepts on a loopback port and hands each connection to serve,
// until the test ends. It counts the connections it accepted.
func rawServer(t *testing.T, serve func(net.Conn)) (url string, accepted *atomic.Int64) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	accepted = &atomic.Int64{}
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				_ = c.SetDeadline(time.Now().Add(10 * time.Second))
				serve(c)
			}()
		}
	}()
	return "http://" + ln.Addr().String() + "/", accepted
}

// readRequest reads one request's head (no body) from br.
func readRequest(br *bufio.Reader) error {
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			return err
		}
		if line == "\r\n" {
			return nil
		}
	}
}

// TestServerClosesAfterEachResponse: a server that answers one request per
// connection and says so (Connection: close) costs a reconnection per
// request, never an error.
func TestServerClosesAfterEachResponse(t *testing.T) {
	t.Parallel()
	url, accepted := rawServer(t, func(c net.Conn) {
		if readRequest(bufio.NewReader(c)) == nil {
			_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 3\r\nConnection: close\r\n\r\nok\n")
		}
	})
	res, err := bench.RunHTTP(context.Background(), bench.HTTPConfig{Target: url, Connections: 3, Requests: 60})
	if err != nil {
		t.Fatal(err)
	}
	if res.Requests != 60 || res.Errors != 0 || res.StatusCounts["200"] != 60 || res.Bytes != 180 {
		t.Fatalf("%d requests, %d errors %v, statuses %v, %d bytes", res.Requests, res.Errors, res.ErrorKinds, res.StatusCounts, res.Bytes)
	}
	if accepted.Load() != 60 {
		t.Fatalf("%d connections for 60 requests, want one each", accepted.Load())
	}
}

// TestHTTP10: an HTTP/1.0 response without keep-alive ends its connection,
// and a body without a length runs to the close.
func TestHTTP10(t *testing.T) {
	t.Parallel()
	url, accepted := rawServer(t, func(c net.Conn) {
		if readRequest(bufio.NewReader(c)) == nil {
			_, _ = io.WriteString(c, "HTTP/1.0 200 OK\r\n\r\nhello")
		}
	})
	res, err := bench.RunHTTP(context.Background(), bench.HTTPConfig{Target: url, Connections: 2, Requests: 20})
	if err != nil {
		t.Fatal(err)
	}
	if res.Requests != 20 || res.Errors != 0 || res.Bytes != 100 || accepted.Load() != 20 {
		t.Fatalf("%d requests, %d errors %v, %d bytes, %d connections", res.Requests, res.Errors, res.ErrorKinds, res.Bytes, accepted.Load())
	}
}

// TestChunkedAndLargeBodies: chunked bodies (with a trailer) and a 1 MB
// body are read whole, on connections that stay open.
func TestChunkedAndLargeBodies(t *testing.T) {
	t.Parallel()
	big := strings.Repeat("x", 1<<20)
	var conns atomic.Int64
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/big" {
			_, _ = io.WriteString(w, big)
			return
		}
		w.Header().Set("Trailer", "X-Done")
		f := w.(http.Flusher)
		for i := range 5 {
			fmt.Fprintf(w, "chunk %d;", i) // 8 bytes each
			f.Flush()
		}
		w.Header().Set("X-Done", "yes")
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	defer srv.Close()
	for _, tc := range []struct {
		path string
		size int64
	}{{"/chunked", 40}, {"/big", 1 << 20}} {
		res, err := bench.RunHTTP(context.Background(), bench.HTTPConfig{Target: srv.URL + tc.path, Connections: 2, Requests: 10})
		if err != nil {
			t.Fatal(err)
		}
		if res.Requests != 10 || res.Errors != 0 || res.Bytes != 10*tc.size {
			t.Fatalf("%s: %d requests, %d errors %v, %d bytes, want %d", tc.path, res.Requests, res.Errors, res.ErrorKinds, res.Bytes, 10*tc.size)
		}
	}
	if conns.Load() != 4 {
		t.Fatalf("%d connections for two runs on 2 connections each: a connection was not reused", conns.Load())
	}
}

// TestRequestBody: a 1 MB body is sent whole with every request, with its
// Content-Length, and the headers as given.
func TestRequestBody(t *testing.T) {
	t.Parallel()
	body := []byte(strings.Repeat("y", 1<<20))
	var mu sync.Mutex
	var bad []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		mu.Lock()
		defer mu.Unlock()
		if err != nil || len(b) != len(body) || r.ContentLength != int64(len(body)) || r.Method != http.MethodPut ||
			r.Header.Get("X-Test") != "1" {
			bad = append(bad, fmt.Sprintf("%s %d bytes (%v), X-Test %q", r.Method, len(b), err, r.Header.Get("X-Test")))
		}
	}))
	defer srv.Close()
	res, err := bench.RunHTTP(context.Background(), bench.HTTPConfig{Target: srv.URL, Method: http.MethodPut, Body: body,
		Header: http.Header{"X-Test": {"1"}}, Connections: 2, Requests: 8})
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if res.StatusCounts["200"] != 8 || len(bad) > 0 {
		t.Fatalf("statuses %v, errors %v; server saw %v", res.StatusCounts, res.ErrorKinds, bad)
	}
}

// TestTLS: an https target works with --insecure against a self-signed
// certificate, and without it every request fails as a TLS error.
func TestTLS(t *testing.T) {
	t.Parallel()
	srv := httptest.NewTLSServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	defer srv.Close()
	res, err := bench.RunHTTP(context.Background(), bench.HTTPConfig{Target: srv.URL, Insecure: true, Connections: 2, Requests: 20})
	if err != nil {
		t.Fatal(err)
	}
	if res.StatusCounts["200"] != 20 || res.Errors != 0 {
		t.Fatalf("insecure: statuses %v, errors %v", res.StatusCounts, res.ErrorKinds)
	}
	res, err = bench.RunHTTP(context.Background(), bench.HTTPConfig{Target: srv.URL, Connections: 1, Requests: 3})
	if err != nil {
		t.Fatal(err)
	}
	if res.ErrorKinds["tls"].Count != 3 || res.Errors != 3 || !strings.Contains(res.ErrorKinds["tls"].First, "certificate") {
		t.Fatalf("verified: errors %v, want 3 TLS errors about the certificate", res.ErrorKinds)
	}
}

// TestErrorKinds: refused, timed out and malformed responses are counted
// by kind, each with its first message.
func TestErrorKinds(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "http://" + ln.Addr().String() + "/"
	ln.Close()
	hang := make(chan struct{})
	defer close(hang)
	slow, _ := rawServer(t, func(c net.Conn) {
		_ = readRequest(bufio.NewReader(c))
		select {
		case <-hang:
		case <-time.After(5 * time.Second):
		}
	})
	garbage, _ := rawServer(t, func(c net.Conn) {
		if readRequest(bufio.NewReader(c)) == nil {
			_, _ = io.WriteString(c, "SSH-2.0-OpenSSH\r\n\r\n")
		}
	})
	reset, _ := rawServer(t, func(c net.Conn) {
		if readRequest(bufio.NewReader(c)) == nil {
			_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\ncut")
		}
	})
	for _, tc := range []struct {
		url, kind, first string
		timeout          time.Duration
	}{
		{closed, "refused", "connection refused", 0},
		{slow, "timeout", "timeout", 100 * time.Millisecond},
		{garbage, "protocol", "malformed response", 0},
		{reset, "reset", "unexpected EOF", 0},
	} {
		res, err := bench.RunHTTP(context.Background(), bench.HTTPConfig{Target: tc.url, Connections: 1, Requests: 2, Timeout: tc.timeout})
		if err != nil {
			t.Fatal(err)
		}
		if res.Errors != 2 || res.ErrorKinds[tc.kind].Count != 2 || !strings.Contains(res.ErrorKinds[tc.kind].First, tc.first) ||
			res.LatencyErrorMicros.Count != 2 {
			t.Errorf("%s: %d errors %+v, want 2 of kind %s mentioning %q", tc.kind, res.Errors, res.ErrorKinds, tc.kind, tc.first)
		}
	}
}

// TestUnsent: the open model counts what was due and never sent. Bounded
// by --requests, every request is sent; on a server that holds one
// connection's only request until after the run's end, every request of
// that connection due after it is unsent, and each of the others' was sent:
// sent plus unsent is every request due in the run.
func TestUnsent(t *testing.T) {
	t.Parallel()
	fast := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	defer fast.Close()
	res, err := bench.RunHTTP(context.Background(), bench.HTTPConfig{Target: fast.URL, Rate: 50, Requests: 60, Connections: 3})
	if err != nil {
		t.Fatal(err)
	}
	if res.Requests != 60 || res.Unsent != 0 {
		t.Fatalf("--rate 50 --requests 60: %d requests, %d unsent", res.Requests, res.Unsent)
	}

	var n atomic.Int64
	release := make(chan struct{})
	stall := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
		if n.Add(1) == 1 {
			<-release
		}
	}))
	defer stall.Close()
	defer close(release)
	// 200/s over 2 connections for 1 s: 200 due. The first request holds
	// its connection past the end (--timeout 1.5 s), so that connection's
	// other 99 are unsent.
	res, err = bench.RunHTTP(context.Background(), bench.HTTPConfig{Target: stall.URL, Rate: 200, Duration: time.Second,
		Connections: 2, Timeout: 1500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	// The other connection sends all of its 100 unless the machine stalls
	// it past the end: then some of its own are unsent too.
	if res.Requests+res.Unsent != 200 || res.Unsent < 99 || res.ErrorKinds["timeout"].Count != 1 {
		t.Fatalf("%d sent, %d unsent, errors %v: want 200 due, 99 of them unsent at least, one timing out", res.Requests, res.Unsent, res.ErrorKinds)
	}
}

// TestShardsShareOneSchedule: three shards of one run, started at the same
// instant, send between them what one machine would: the rate in total,
// each its own consumers, or every consumer when they share them.
func TestShardsShareOneSchedule(t *testing.T) {
	t.Parallel()
	for _, shared := range []bool{false, true} {
		var mu sync.Mutex
		seen := map[string]map[string]int{} // shard -> consumer -> requests
		srv := httptest.NewServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
			mu.Lock()
			defer mu.Unlock()
			s := r.Header.Get("X-Shard")
			if seen[s] == nil {
				seen[s] = map[string]int{}
			}
			seen[s][r.Header.Get("X-Consumer-Id")]++
		}))
		start := time.Now().Add(200 * time.Millisecond)
		var wg sync.WaitGroup
		results := make([]bench.Result, 3)
		for i := range results {
			wg.Add(1)
			go func() {
				defer wg.Done()
				res, err := bench.RunHTTP(context.Background(), bench.HTTPConfig{Target: srv.URL, Rate: 300, Requests: 300,
					Connections: 6, Consumers: 6, ConsumerHeader: "X-Consumer-Id", Header: http.Header{"X-Shard": {fmt.Sprint(i)}},
					Shard: i, Shards: 3, SharedConsumers: shared, StartAt: start})
				if err != nil {
					t.Error(err)
				}
				results[i] = res
			}()
		}
		wg.Wait()
		srv.Close()
		var total int64
		for i, r := range results {
			total += r.Requests
			if r.Requests != 100 || r.Config.Connections != 2 || r.Config.RatePerSec != 100 || r.Config.Shards != 3 {
				t.Errorf("shard %d: %d requests on %d connections at %g/s", i, r.Requests, r.Config.Connections, r.Config.RatePerSec)
			}
			consumers := seen[fmt.Sprint(i)]
			for c := range 6 {
				n := consumers[fmt.Sprintf("consumer-%d", c)]
				mine := c%3 == i
				if (shared || mine) != (n > 0) {
					t.Errorf("shared %v: shard %d sent consumer-%d %d requests", shared, i, c, n)
				}
			}
		}
		if total != 300 {
			t.Errorf("shared %v: the shards sent %d, want the 300 of the run", shared, total)
		}
	}
}

// TestKeepResponses: every measured request is kept, answered or failed,
// with its consumer, times in order, and whether it carried rate-limit
// fields.
func TestKeepResponses(t *testing.T) {
	t.Parallel()
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch n.Add(1) % 3 {
		case 0:
			w.Header().Set("RateLimit", `"default";r=1;t=1`)
		case 1:
			w.WriteHeader(http.StatusServiceUnavailable)
		case 2:
			hj, _ := w.(http.Hijacker)
			c, _, _ := hj.Hijack()
			c.Close() // a transport error
		}
	}))
	defer srv.Close()
	res, err := bench.RunHTTP(context.Background(), bench.HTTPConfig{Target: srv.URL, Rate: 300, Requests: 45, Duration: 30 * time.Second,
		Connections: 2, Consumers: 3, ConsumerHeader: "X-Consumer-Id", KeepResponses: true})
	if err != nil {
		t.Fatal(err)
	}
	rs := res.Responses()
	if int64(len(rs)) != res.Requests || len(rs) != 45 {
		t.Fatalf("%d responses kept of %d requests", len(rs), res.Requests)
	}
	kinds := map[string]int{}
	for _, r := range rs {
		switch {
		case r.Consumer < 0 || r.Consumer > 2 || r.Sent.Before(r.Due.Add(-time.Millisecond)) || r.Done.Before(r.Sent):
			t.Fatalf("response %+v", r)
		case r.Error != "":
			kinds["error"]++
		case r.Limited:
			kinds[fmt.Sprint(r.Status, " limited")]++
		default:
			kinds[fmt.Sprint(r.Status)]++
		}
	}
	if kinds["error"] == 0 || kinds["200 limited"] == 0 || kinds["503"] == 0 || len(kinds) != 3 {
		t.Fatalf("kept %v, want errors, 200s with rate-limit fields and 503s without", kinds)
	}
	if res, _ := bench.RunHTTP(context.Background(), bench.HTTPConfig{Target: srv.URL, Requests: 5, Connections: 1}); res.Responses() != nil {
		t.Fatalf("responses kept without KeepResponses")
	}
}
