package bench

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/ratelab/ratelab/audit"
)

// countingReader counts the bytes read through it.
type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// FuzzReadResponse feeds readResponse a hostile server's byte stream, read
// response after response as a kept-alive connection reads them, through
// the engine's buffer and through the smallest one bufio allows (so that
// long lines are cut). It must never panic, end in a few steps per byte,
// count no body byte it did not read, report only a malformed response, a
// clean close or a cut one, and hand the audit rate-limit fields that read
// as absent or in range. Where net/http reads the first response whole
// too, both must agree on its status and body length: a framing they
// disagree on would misread every response after it.
func FuzzReadResponse(f *testing.F) {
	for _, s := range []string{
		"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello",
		"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nhiHTTP/1.1 429 Too Many Requests\r\nRetry-After: 3\r\nContent-Length: 0\r\n\r\n",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5;ext=1\r\nhello\r\n0\r\nTrailer: x\r\n\r\n",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
		"HTTP/1.0 200 OK\r\n\r\nuntil the server closes",
		"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 1\r\n\r\nx",
		"HTTP/1.0 200 OK\r\nConnection: Keep-Alive\r\nContent-Length: 0\r\n\r\n",
		"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 204 No Content\r\nContent-Length: 9\r\n\r\n",
		"HTTP/1.1 304 Not Modified\r\n\r\n",
		"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\r\n",
		"HTTP/1.1 200 OK\r\nRateLimit-Policy: \"default\";q=100;w=60\r\nRateLimit: \"default\";r=42;t=30\r\nContent-Length: 0\r\n\r\n",
		"HTTP/1.1 429 Too Many Requests\r\nX-RateLimit-Limit: 10\r\nX-RateLimit-Remaining: 0\r\nX-RateLimit-Reset: 1767225600\r\nRetry-After: Wed, 21 Oct 2015 07:28:00 GMT\r\n\r\n",
		"HTTP/1.1 200 OK\r\nRateLimit-Limit: 10\r\nRateLimit-Remaining: 9\r\nRateLimit-Reset: 1\r\nContent-Length: 0\r\n\r\n",
		"HTTP/1.1 200 OK\r\nContent-Length: 999999999999999999\r\n\r\nshort",
		"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nxy",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n7fffffffffffffff\r\nshort",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n-1\r\n",
		"HTTP/1.1 200 OK\nContent-Length: 3\n\nabc",
		"HTTP/1.1 2000 OK\r\n\r\n",
		"HTTP/1.1 200 OK\r\nX-Long: " + string(bytes.Repeat([]byte("a"), 100)) + "\r\nContent-Length: 0\r\n\r\n",
		"HTTP/1.1 200 OK\r\n: no name\r\n\r\n",
		"HTTP/1.1 429 Too Many Requests\r\nContent-Type: application/problem+json\r\nContent-Length: 33\r\n\r\n{\"violated-policies\":[\"a\",\"b\"]}",
		"HTTP/1.1 429 Too Many Requests\r\nContent-Type: Application/Problem+JSON; charset=utf-8\r\nTransfer-Encoding: chunked\r\n\r\n" +
			"10\r\n{\"violated-polic\r\n11\r\nies\":[\"per-hour\"]}\r\n0\r\n\r\n",
		"HTTP/1.0 429 Too Many Requests\r\nContent-Type: application/problem+json\r\n\r\n{\"violated-policies\":[]}",
		"HTTP/1.1 429 Too Many Requests\r\nContent-Type: application/problem+json\r\nContent-Length: 99999\r\n\r\n{\"violated",
		"",
	} {
		f.Add([]byte(s), false)
	}
	f.Add([]byte("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n"), true)
	f.Fuzz(func(t *testing.T, data []byte, head bool) {
		for _, size := range []int{16, 8 << 10} {
			cr := &countingReader{r: bytes.NewReader(data)}
			br := bufio.NewReaderSize(cr, size)
			var bodies int64
			for n := 0; ; n++ {
				// Every response is a status line of 12 bytes and a line end
				// at least: more responses than that would be a loop.
				if n > len(data)/13 {
					t.Fatalf("buffer %d: %d responses read from %d bytes", size, n, len(data))
				}
				var r response
				err := readResponse(br, head, true, &r)
				if err != nil {
					var pe *protocolError
					if !errors.As(err, &pe) && !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
						t.Fatalf("buffer %d: error %T %v: want a malformed response, EOF or unexpected EOF", size, err, err)
					}
					break
				}
				if r.status < 200 && r.status != http.StatusSwitchingProtocols || r.status > 599 {
					t.Fatalf("buffer %d: status %d", size, r.status)
				}
				if r.body < 0 {
					t.Fatalf("buffer %d: body of %d bytes", size, r.body)
				}
				bodies += r.body
				if len(r.kept) > maxProblem || int64(len(r.kept)) > r.body || (len(r.kept) > 0 && (!r.problem || r.status != http.StatusTooManyRequests)) {
					t.Fatalf("buffer %d: kept %d bytes of a body of %d (status %d, problem %v)", size, len(r.kept), r.body, r.status, r.problem)
				}
				// The audit reads the rate-limit fields as it finds them.
				var rec audit.Record
				rec.AddResponse(audit.NewSample(0, 0, 1, r.status), &r.limits, nil, nil)
				s := rec.Samples[0]
				if s.Reset < -1 || s.Reset > 1e9*time.Second || s.RetryAfter < -1 {
					t.Fatalf("buffer %d: reset %s, Retry-After %s from %+v", size, s.Reset, s.RetryAfter, r.limits)
				}
				if read := cr.n - int64(br.Buffered()); bodies > read {
					t.Fatalf("buffer %d: bodies of %d bytes counted from %d bytes read", size, bodies, read)
				}
				if n == 0 && size > 16 {
					agree(t, data, head, r)
				}
				if r.close {
					break
				}
			}
		}
	})
}

// agree compares the first response as readResponse read it with what
// net/http reads, when net/http reads it whole.
func agree(t *testing.T, data []byte, head bool, r response) {
	t.Helper()
	method := http.MethodGet
	if head {
		method = http.MethodHead
	}
	req, _ := http.NewRequest(method, "http://example.com/", nil)
	resp, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(data)), req)
	if err != nil || resp.StatusCode < 200 {
		return
	}
	n, err := io.Copy(io.Discard, resp.Body)
	if err != nil {
		return
	}
	if resp.StatusCode != r.status || n != r.body {
		t.Fatalf("net/http read status %d and a body of %d bytes, readResponse %d and %d", resp.StatusCode, n, r.status, r.body)
	}
}
