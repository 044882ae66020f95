package bench

import (
	"bufio"
	"errors"
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
