package bench

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/ratelab/ratelab/audit"
)

// isToken reports whether s is an HTTP token (RFC 9110 5.6.2), as a method
// and a field name must be.
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c <= ' ' || c >= 0x7f || strings.IndexByte(`"(),/:;<=>?@[\]{}`, c) >= 0 {
			return false
		}
	}
	return true
}

// isFieldValue reports whether s can be sent as a field's value: no control
// character but a tab (RFC 9110 5.5), so that no value can end its line and
// begin another field or request.
func isFieldValue(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < ' ' && c != '\t') || c == 0x7f {
			return false
		}
	}
	return true
}

// protocolError is a response that does not parse as HTTP/1.x.
type protocolError struct{ msg string }

func (e *protocolError) Error() string { return "malformed response: " + e.msg }

func protocolf(format string, a ...any) error { return &protocolError{fmt.Sprintf(format, a...)} }

// response is what the engine keeps of one response.
type response struct {
	status int
	// body counts the body's bytes.
	body int64
	// close is set when the server will close the connection after it.
	close bool
	// limits holds the rate-limit fields, read only when auditing.
	limits audit.Fields
	// problem says the response is a 429 whose body is a problem
	// (Content-Type application/problem+json, RFC 9457), read only when
	// auditing; kept holds the first maxProblem bytes of its body. kept's
	// array is the connection's, reused from response to response.
	problem bool
	kept    []byte
}

// maxProblem bounds what is kept of a problem's body.
const maxProblem = 4 << 10

// readResponse reads one response from br: the status line, the fields it
// needs (Content-Length, Transfer-Encoding, Connection, and the rate-limit
// fields when audit is set), and the body, which it discards. head says the
// request was HEAD (no body). Interim 1xx responses are skipped.
func readResponse(br *bufio.Reader, head, audit bool, r *response) error {
	kept := r.kept[:0]
	for {
		*r = response{kept: kept}
		if err := readHead(br, head, audit, r); err != nil {
			return err
		}
		if r.status >= 200 || r.status == http.StatusSwitchingProtocols {
			break
		}
	}
	return nil
}

// readHead reads the status line and the fields, and then the body.
func readHead(br *bufio.Reader, head, audit bool, r *response) error {
	line, err := readLine(br)
	if err != nil {
		return err
	}
	if len(line) < 12 || !bytes.HasPrefix(line, []byte("HTTP/1.")) || line[8] != ' ' {
		return protocolf("status line %q", clip(line))
	}
	s := line[9:12]
	if s[0] < '1' || s[0] > '5' || s[1] < '0' || s[1] > '9' || s[2] < '0' || s[2] > '9' || (len(line) > 12 && line[12] != ' ') {
		return protocolf("status line %q", clip(line))
	}
	r.status = int(s[0]-'0')*100 + int(s[1]-'0')*10 + int(s[2]-'0')
	http10 := line[7] == '0'
	keepAlive := false
	length := int64(-1)
	chunked, coded := false, false
	for {
		line, err := readLine(br)
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return err
		}
		if len(line) == 0 {
			break
		}
		colon := bytes.IndexByte(line, ':')
		if colon <= 0 {
			return protocolf("header line %q", clip(line))
		}
		name, value := line[:colon], bytes.TrimSpace(line[colon+1:])
		switch len(name) {
		case len("Content-Length"):
			if bytes.EqualFold(name, []byte("Content-Length")) {
				n, ok := parseLength(value)
				if !ok || (length >= 0 && length != n) {
					return protocolf("Content-Length %q", clip(value))
				}
				length = n
				continue
			}
		case len("Transfer-Encoding"):
			if bytes.EqualFold(name, []byte("Transfer-Encoding")) {
				chunked = lastToken(value, "chunked")
				coded = true
				continue
			}
		case len("Content-Type"):
			if audit && r.status == http.StatusTooManyRequests && bytes.EqualFold(name, []byte("Content-Type")) {
				r.problem = isProblemJSON(value)
				continue
			}
		case len("Connection"):
			if bytes.EqualFold(name, []byte("Connection")) {
				if hasToken(value, "close") {
					r.close = true
				}
				if hasToken(value, "keep-alive") {
					keepAlive = true
				}
				continue
			}
		}
		if audit {
			r.limits.Set(name, value)
		}
	}
	if http10 && !keepAlive {
		r.close = true
	}
	if http10 && coded {
		// HTTP/1.0 has no transfer codings: its framing is faulty
		// (RFC 9112, 6.1), and chunks read as such would misframe it.
		return protocolf("Transfer-Encoding in an HTTP/1.0 response")
	}
	if r.status < 200 || r.status == http.StatusNoContent || r.status == http.StatusNotModified || head {
		return nil
	}
	switch {
	case chunked:
		return readChunked(br, r)
	case length >= 0:
		n, err := r.discard(br, length)
		r.body = int64(n)
		if err != nil {
			return unexpected(err)
		}
		return nil
	default:
		// No length: the body runs until the server closes.
		r.close = true
		k, err := r.keep(br, maxProblem)
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			r.body = int64(k)
			return nil
		}
		n, err := io.Copy(io.Discard, br)
		r.body = int64(k) + n
		return err
	}
}

// discard reads n bytes of the body, keeping the first of a problem's
// (keep), and counts what it read.
func (r *response) discard(br *bufio.Reader, n int64) (int, error) {
	if !r.problem {
		return br.Discard(int(n))
	}
	k, err := r.keep(br, n)
	if err != nil {
		return k, err
	}
	d, err := br.Discard(int(n - int64(k)))
	return k + d, err
}

// keep reads up to n bytes of a problem's body into kept, while kept
// holds fewer than maxProblem, and counts what it read; nothing for a
// body that is no problem.
func (r *response) keep(br *bufio.Reader, n int64) (int, error) {
	room := int64(maxProblem - len(r.kept))
	if !r.problem || room <= 0 || n <= 0 {
		return 0, nil
	}
	at := len(r.kept)
	r.kept = slices.Grow(r.kept, int(min(n, room)))[:at+int(min(n, room))]
	k, err := io.ReadFull(br, r.kept[at:])
	r.kept = r.kept[:at+k]
	return k, err
}

// isProblemJSON says a Content-Type is application/problem+json, with or
// without parameters.
func isProblemJSON(v []byte) bool {
	if i := bytes.IndexByte(v, ';'); i >= 0 {
		v = v[:i]
	}
	return bytes.EqualFold(bytes.TrimSpace(v), []byte("application/problem+json"))
}

func readChunked(br *bufio.Reader, r *response) error {
	for {
		line, err := readLine(br)
		if err != nil {
			return unexpected(err)
		}
		if i := bytes.IndexByte(line, ';'); i >= 0 {
			line = line[:i]
		}
		size, err := strconv.ParseInt(string(bytes.TrimSpace(line)), 16, 64)
		if err != nil || size < 0 {
			return protocolf("chunk size %q", clip(line))
		}
		if size == 0 {
			// Trailer fields, up to the blank line.
			for {
				line, err := readLine(br)
				if err != nil {
					return unexpected(err)
				}
				if len(line) == 0 {
					return nil
				}
			}
		}
		n, err := r.discard(br, size)
		r.body += int64(n)
		if err != nil {
			return unexpected(err)
		}
		crlf, err := readLine(br)
		if err != nil {
			return unexpected(err)
		}
		if len(crlf) != 0 {
			return protocolf("no CRLF after a chunk")
		}
	}
}

// readLine returns the next line without its CRLF. A line longer than the
// buffer is skipped to its end and returned cut, which is enough for fields
// the engine does not read.
func readLine(br *bufio.Reader) ([]byte, error) {
	line, err := br.ReadSlice('\n')
	if errors.Is(err, bufio.ErrBufferFull) {
		for errors.Is(err, bufio.ErrBufferFull) {
			_, err = br.ReadSlice('\n')
		}
		if err != nil {
			return nil, err
		}
		return []byte("x-ratelab-long-line: cut"), nil
	}
	if err != nil {
		return nil, err
	}
	line = line[:len(line)-1]
	if n := len(line); n > 0 && line[n-1] == '\r' {
		line = line[:n-1]
	}
	return line, nil
}

func unexpected(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}

func parseLength(v []byte) (int64, bool) {
	if len(v) == 0 || len(v) > 18 {
		return 0, false
	}
	var n int64
	for _, c := range v {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	return n, true
}

// hasToken reports whether the comma-separated list v holds tok.
func hasToken(v []byte, tok string) bool {
	for len(v) > 0 {
		var item []byte
		item, v, _ = bytes.Cut(v, []byte(","))
		if bytes.EqualFold(bytes.TrimSpace(item), []byte(tok)) {
			return true
		}
	}
	return false
}

// lastToken reports whether the comma-separated list v ends with tok.
func lastToken(v []byte, tok string) bool {
	if i := bytes.LastIndexByte(v, ','); i >= 0 {
		v = v[i+1:]
	}
	return bytes.EqualFold(bytes.TrimSpace(v), []byte(tok))
}

func clip(b []byte) string {
	if len(b) > 64 {
		return string(b[:64]) + "…"
	}
	return string(b)
}
