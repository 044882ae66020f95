package bench

import (
	"bufio"
	"bytes"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
)

// FuzzRequest renders the request of any configuration that Validate
// accepts (a URL, a method, a --header, a consumer header and a body, as
// bench http's flags give them, each of which may hold {consumer}) and
// reads it back with net/http, as the server will: it must be one
// well-formed request, with the method, the URL's path and query, the
// header and the body it was given, {consumer} written as the consumer's
// identity and {{ as {, and nothing after it that a server would take for
// a second request.
func FuzzRequest(f *testing.F) {
	f.Add("http://127.0.0.1:8080/v1/ping?x=1", "GET", "Authorization", "Bearer abc", "X-Consumer-Id", []byte(nil))
	f.Add("https://example.com", "POST", "Content-Type", "application/json", "", []byte(`{"a":1}`))
	f.Add("http://[::1]:80/a%20b#frag", "PUT", "Host", "other.example", "X-Api-Key", []byte("x"))
	f.Add("http://h/", "GET", "X-Evil", "a\r\nX-Injected: 1", "X-Consumer-Id", []byte(nil))
	f.Add("http://h/", "GET / HTTP/1.1\r\n", "X", "y", "", []byte(nil))
	f.Add("http://h/", "GET", "Bad Name", "v", "X-Consumer-Id\r\nX-Other", []byte(nil))
	f.Add("http://h/", "HEAD", "Transfer-Encoding", "chunked", "X-Consumer-Id", bytes.Repeat([]byte("b"), 5000))
	f.Add("http://h/k/{consumer}?apikey={consumer}&x={{y}", "GET", "Authorization", "Bearer {consumer}", "", []byte(nil))
	f.Add("http://h/", "POST", "X-A", "{{consumer}", "", []byte(`{"id":"{consumer}"}`))
	f.Add("http://h/", "POST", "X-A", "1", "", append(bytes.Repeat([]byte("b"), 5000), "{consumer}"...))
	f.Fuzz(func(t *testing.T, target, method, name, value, consumerHeader string, body []byte) {
		cfg := HTTPConfig{Target: target, Method: method, Header: http.Header{name: {value}}, Body: body,
			Requests: 1, ConsumerHeader: consumerHeader}
		if consumerHeader != "" || strings.Contains(target+value+string(body), "{consumer}") {
			cfg.Consumers = 10
		}
		if cfg.Validate() != nil {
			return
		}
		cfg.defaults()
		r, _, err := newRequest(cfg)
		if err != nil {
			t.Fatalf("Validate took %+v, which does not render: %v", cfg, err)
		}
		consumer := -1
		if cfg.Consumers > 0 {
			consumer = 7
		}
		fill := strings.NewReplacer("{{", "{", "{consumer}", "consumer-7")
		u, err := url.Parse(fill.Replace(cfg.Target))
		if err != nil {
			t.Fatalf("Validate took %q, which does not parse: %v", cfg.Target, err)
		}
		var buf []byte
		raw := append(slices.Clone(r.render(&buf, consumer)), r.body...)
		br := bufio.NewReader(bytes.NewReader(raw))
		req, err := http.ReadRequest(br)
		if err != nil {
			t.Fatalf("%+v rendered %q, which net/http cannot read: %v", cfg, raw, err)
		}
		got, err := io.ReadAll(req.Body)
		if err != nil {
			t.Fatalf("%q: body: %v", raw, err)
		}
		if rest, _ := io.ReadAll(br); len(rest) > 0 {
			t.Fatalf("%q: %q follows the request", raw, rest)
		}
		wantBody := []byte(fill.Replace(string(cfg.Body)))
		if req.Method != cfg.Method || req.RequestURI != u.RequestURI() || !bytes.Equal(got, wantBody) {
			t.Fatalf("%q read as %s %s with a body of %d bytes: want %s %s and %d", raw, req.Method, req.RequestURI, len(got),
				cfg.Method, u.RequestURI(), len(wantBody))
		}
		value = strings.Trim(fill.Replace(value), " \t") // as every server reads it
		switch http.CanonicalHeaderKey(name) {
		case http.CanonicalHeaderKey(consumerHeader): // sent twice: the consumer's last
		case "Host":
			if req.Host != value {
				t.Fatalf("%q: Host %q, want %q", raw, req.Host, value)
			}
		case "Content-Length", "Transfer-Encoding":
		default:
			if vs := req.Header.Values(name); len(vs) == 0 || vs[len(vs)-1] != value {
				t.Fatalf("%q: %s is %q, want %q", raw, name, vs, value)
			}
		}
		if vs := req.Header.Values(consumerHeader); consumerHeader != "" && (len(vs) == 0 || vs[len(vs)-1] != "consumer-7") {
			t.Fatalf("%q: %s is %q, want consumer-7 last", raw, consumerHeader, vs)
		}
	})
}
