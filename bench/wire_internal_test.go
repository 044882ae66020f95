package bench

import (
	"bufio"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
)

// An HTTP/1.0 response has no transfer codings: one that says it is chunked
// has a faulty framing, which the reader must not take for chunks (net/http
// reads its body up to the close).
func TestHTTP10TransferEncodingIsMalformed(t *testing.T) {
	br := bufio.NewReader(strings.NewReader("HTTP/1.0 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nHTTP/1.0 200 OK\r\n\r\n"))
	var r response
	err := readResponse(br, false, false, &r)
	var pe *protocolError
	if !errors.As(err, &pe) {
		t.Fatalf("got %v (status %d, body %d): want a malformed response", err, r.status, r.body)
	}
}

// A hostile length (a Content-Length or chunk size near 2^63) costs no
// memory: the body is discarded as it comes, and a short one is cut.
func TestHugeLengthsAllocateNothing(t *testing.T) {
	for _, resp := range []string{
		"HTTP/1.1 200 OK\r\nContent-Length: 999999999999999999\r\n\r\nshort",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n7fffffffffffffff\r\nshort",
	} {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		var r response
		err := readResponse(bufio.NewReaderSize(strings.NewReader(resp), 8<<10), false, false, &r)
		runtime.ReadMemStats(&after)
		if err == nil || r.body != int64(len("short")) {
			t.Errorf("%q: body %d, error %v: want 5 bytes and a cut response", resp, r.body, err)
		}
		if grew := after.TotalAlloc - before.TotalAlloc; grew > 1<<20 {
			t.Errorf("%q: allocated %d bytes", resp, grew)
		}
	}
}

// TestReadProblemBody: the body of a 429 whose Content-Type is
// application/problem+json is kept, up to maxProblem bytes, however it is
// framed (a length, chunks, the close), and counted whole; no other body
// is kept, nor any when not auditing. The connection's buffer is reused:
// after the first, a problem costs no allocation.
func TestReadProblemBody(t *testing.T) {
	const problem = `{"type":"https://iana.org/assignments/http-problem-types#quota-exceeded","violated-policies":["per-second"]}`
	long := `{"violated-policies":["a"],"pad":"` + strings.Repeat("x", 2*maxProblem) + `"}`
	for _, tc := range []struct {
		name, resp string
		audit      bool
		kept       string
	}{
		{"by length", "HTTP/1.1 429 Too Many Requests\r\nContent-Type: application/problem+json\r\nContent-Length: " +
			fmt.Sprint(len(problem)) + "\r\n\r\n" + problem, true, problem},
		{"chunked, with parameters", "HTTP/1.1 429 Too Many Requests\r\ncontent-type: Application/Problem+JSON ; charset=utf-8\r\n" +
			"Transfer-Encoding: chunked\r\n\r\n" + fmt.Sprintf("%x\r\n%s\r\n%x\r\n%s\r\n0\r\n\r\n", 10, problem[:10], len(problem)-10, problem[10:]),
			true, problem},
		{"to the close", "HTTP/1.0 429 Too Many Requests\r\nContent-Type: application/problem+json\r\n\r\n" + problem, true, problem},
		{"bounded", "HTTP/1.1 429 Too Many Requests\r\nContent-Type: application/problem+json\r\nContent-Length: " +
			fmt.Sprint(len(long)) + "\r\n\r\n" + long, true, long[:maxProblem]},
		{"not a problem", "HTTP/1.1 429 Too Many Requests\r\nContent-Type: application/json\r\nContent-Length: " +
			fmt.Sprint(len(problem)) + "\r\n\r\n" + problem, true, ""},
		{"not a 429", "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/problem+json\r\nContent-Length: " +
			fmt.Sprint(len(problem)) + "\r\n\r\n" + problem, true, ""},
		{"not auditing", "HTTP/1.1 429 Too Many Requests\r\nContent-Type: application/problem+json\r\nContent-Length: " +
			fmt.Sprint(len(problem)) + "\r\n\r\n" + problem, false, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// The response twice on one connection, then a 200 after it.
			stream := tc.resp
			if !strings.HasPrefix(tc.resp, "HTTP/1.0") {
				stream += tc.resp + "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
			}
			br := bufio.NewReader(strings.NewReader(stream))
			var r response
			for i := range 2 {
				if err := readResponse(br, false, tc.audit, &r); err != nil {
					t.Fatal(err)
				}
				_, body, _ := strings.Cut(tc.resp, "\r\n\r\n")
				if strings.Contains(tc.resp, "chunked") {
					body = problem
				}
				if string(r.kept) != tc.kept || r.body != int64(len(body)) {
					t.Fatalf("response %d: kept %q of a body of %d bytes, want %q of %d", i, r.kept, r.body, tc.kept, len(body))
				}
				if r.close {
					return
				}
			}
			if err := readResponse(br, false, tc.audit, &r); err != nil || r.status != 200 || r.problem || len(r.kept) != 0 || r.body != 2 {
				t.Fatalf("the 200 after: %v, status %d, problem %v, kept %q", err, r.status, r.problem, r.kept)
			}
		})
	}
	resp := "HTTP/1.1 429 Too Many Requests\r\nContent-Type: application/problem+json\r\nContent-Length: " + fmt.Sprint(len(problem)) +
		"\r\n\r\n" + problem
	sr := strings.NewReader(resp)
	br := bufio.NewReader(sr)
	var r response
	if err := readResponse(br, false, true, &r); err != nil {
		t.Fatal(err)
	}
	if n := testing.AllocsPerRun(100, func() {
		sr.Reset(resp)
		br.Reset(sr)
		if err := readResponse(br, false, true, &r); err != nil || len(r.kept) != len(problem) {
			t.Fatalf("%v, kept %d", err, len(r.kept))
		}
	}); n != 0 {
		t.Errorf("%v allocations per problem", n)
	}
}
