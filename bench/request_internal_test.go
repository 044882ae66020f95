package bench

import (
	"bytes"
	"net/http"
	"testing"
)

// TestRenderFromPieces: a request filled in at each send, as when the
// consumers' requests do not fit in maxRendered, is byte for byte the one
// rendered before the run, and filling it in allocates nothing once the
// connection's buffer has grown.
func TestRenderFromPieces(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  HTTPConfig
	}{
		{"numbered, in a header", HTTPConfig{Target: "http://h/", ConsumerHeader: "X-Id", Consumers: 120}},
		{"keys everywhere", HTTPConfig{Target: "http://h/k/{consumer}?apikey={consumer}", Method: http.MethodPost,
			Header: http.Header{"X-Key": {"{consumer}"}}, Body: []byte(`{"key":"{consumer}"}`), Consumers: 3,
			Identities: []string{"a b", "c/d", "é=f"}}},
		{"tokens", HTTPConfig{Target: "http://h/", Header: http.Header{"Authorization": {"Bearer {jwt}"}}, Consumers: 2,
			JWTSecret: []byte("s"), JWTClaims: []JWTClaim{{Name: "sub", Value: "{consumer}"}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.cfg.Requests = 1
			if err := tc.cfg.Validate(); err != nil {
				t.Fatal(err)
			}
			tc.cfg.defaults()
			r, _, err := newRequest(tc.cfg)
			if err != nil {
				t.Fatal(err)
			}
			if r.offsets == nil {
				t.Fatal("not rendered before the run")
			}
			var buf []byte
			before := make([][]byte, tc.cfg.Consumers)
			for c := range before {
				before[c] = r.render(&buf, c)
			}
			r.rendered, r.offsets = nil, nil
			for c, want := range before {
				if got := r.render(&buf, c); !bytes.Equal(got, want) {
					t.Fatalf("consumer %d: filled in %q, rendered before %q", c, got, want)
				}
			}
			c := 0
			if n := testing.AllocsPerRun(100, func() { r.render(&buf, c%tc.cfg.Consumers); c++ }); n != 0 {
				t.Fatalf("%v allocations per request", n)
			}
		})
	}
}

// BenchmarkRender is the cost of a request's bytes at each send: rendered
// before the run, and filled in from pieces.
func BenchmarkRender(b *testing.B) {
	cfg := HTTPConfig{Target: "http://127.0.0.1:8080/v1/ping", ConsumerHeader: "X-Consumer-Id", Consumers: 50, Requests: 1}
	cfg.defaults()
	r, _, err := newRequest(cfg)
	if err != nil {
		b.Fatal(err)
	}
	var buf []byte
	b.Run("rendered before", func(b *testing.B) {
		for i := range b.N {
			r.render(&buf, i%50)
		}
	})
	r.rendered, r.offsets = nil, nil
	b.Run("filled in", func(b *testing.B) {
		for i := range b.N {
			r.render(&buf, i%50)
		}
	})
}

// TestNoConsumersNoConsumerHeader: with no consumers, a ConsumerHeader
// names nobody: the request is sent whole, without that header.
func TestNoConsumersNoConsumerHeader(t *testing.T) {
	cfg := HTTPConfig{Target: "http://h/", ConsumerHeader: "X-Id", Requests: 1}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	cfg.defaults()
	r, _, err := newRequest(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var buf []byte
	got := r.render(&buf, -1)
	want := "GET / HTTP/1.1\r\nHost: h\r\nUser-Agent: ratelab\r\n\r\n"
	if string(got) != want {
		t.Fatalf("sent %q, want %q", got, want)
	}
}
