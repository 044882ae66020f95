package bench

import (
	"bytes"
	"errors"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
)

// request is the bytes of one request, rendered once per run. With
// consumers, the values that name one ({consumer} and {jwt}, wherever they
// are, and the Content-Length of a body that holds one) are filled in per
// consumer: every consumer's request is rendered before the run when they
// all fit in maxRendered bytes, and otherwise at each send, into the
// connection's buffer, from pieces (as few appends as a request has values).
type request struct {
	// whole is the request when no consumer changes it.
	whole []byte
	// pieces are the request with values to fill in; ids fills them.
	pieces []piece
	ids    *identities
	// rendered holds consumer c's request at offsets[c]:offsets[c+1],
	// when every consumer's fits.
	rendered []byte
	offsets  []int
	// body is a body too large to copy per request, which names no
	// consumer; it is written after the rest in the same system call.
	body []byte
}

// piece is text and the value that follows it (valueNone for none).
type piece struct {
	text  []byte
	value value
}

// value is what a piece fills in per consumer.
type value uint8

const (
	valueNone value = iota
	// valueConsumer is the identity as it is (a header, a body).
	valueConsumer
	// valueConsumerPath and valueConsumerQuery are the identity escaped for
	// a URL's path and its query.
	valueConsumerPath
	valueConsumerQuery
	// valueJWT is the consumer's token.
	valueJWT
	// valueLength is the length of a body that names the consumer.
	valueLength
)

// bodyInline is the largest body copied into each request's bytes; a larger
// one is written from where it is.
const bodyInline = 4 << 10

// maxRendered bounds the bytes of the requests rendered before the run.
const maxRendered = 64 << 20

// pieceList builds a request's pieces: text joins the text before it, and
// each value ends a piece.
type pieceList []piece

func (l *pieceList) text(s string) {
	if n := len(*l); n > 0 && (*l)[n-1].value == valueNone {
		(*l)[n-1].text = append((*l)[n-1].text, s...)
		return
	}
	*l = append(*l, piece{text: []byte(s)})
}

func (l *pieceList) value(v value) {
	if v == valueNone {
		return
	}
	if n := len(*l); n > 0 && (*l)[n-1].value == valueNone {
		(*l)[n-1].value = v
		return
	}
	*l = append(*l, piece{value: v})
}

// template adds t, its {consumer} written as consumer.
func (l *pieceList) template(t template, consumer value) {
	for _, p := range t.parts {
		switch p.placeholder {
		case consumerPlaceholder:
			l.value(consumer)
		case jwtPlaceholder:
			l.value(valueJWT)
		default:
			l.text(p.text)
		}
	}
}

// newRequest renders cfg's request, from a validated cfg, and returns the
// URL it is sent to. The headers are sent in a fixed order; Content-Length
// is set from the body, and a Host given in Header replaces the URL's.
func newRequest(cfg HTTPConfig) (*request, *url.URL, error) {
	u, target, err := parseTarget(cfg.Target)
	if err != nil {
		return nil, nil, err
	}
	header := cfg.header()
	var l pieceList
	l.text(cfg.Method + " ")
	for _, p := range target {
		l.text(string(p.text))
		l.value(p.value)
	}
	l.text(" HTTP/1.1\r\n")
	if len(header["Host"]) == 0 {
		l.text("Host: " + u.Host + "\r\n")
	}
	if len(header["User-Agent"]) == 0 {
		l.text("User-Agent: ratelab\r\n")
	}
	names := make([]string, 0, len(header))
	for name := range header {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		switch name {
		case "Content-Length", "Transfer-Encoding":
			continue // set from the body
		}
		for _, v := range header[name] {
			t, err := parseTemplate(v)
			if err != nil {
				return nil, nil, err
			}
			l.text(name + ": ")
			l.template(t, valueConsumer)
			l.text("\r\n")
		}
	}
	body, err := parseTemplate(string(cfg.Body))
	if err != nil {
		return nil, nil, err
	}
	named := body.uses(consumerPlaceholder) || body.uses(jwtPlaceholder)
	text := cfg.Body // the body, {{ written as {, when it names no consumer
	if !named && bytes.Contains(text, []byte("{{")) {
		text = []byte(body.render(nil))
	}
	if len(cfg.Body) > 0 || cfg.Method == http.MethodPost || cfg.Method == http.MethodPut || cfg.Method == http.MethodPatch {
		l.text("Content-Length: ")
		if named {
			l.value(valueLength)
		} else {
			l.text(strconv.Itoa(len(text)))
		}
		l.text("\r\n")
	}
	l.text("\r\n")
	r := &request{}
	switch {
	case named:
		l.template(body, valueConsumer)
	case len(text) <= bodyInline:
		l.text(string(text))
	default:
		r.body = text
	}
	if len(l) == 1 && l[0].value == valueNone {
		r.whole = l[0].text
		return r, u, nil
	}
	if r.ids, err = newIdentities(cfg, l, body); err != nil {
		return nil, nil, err
	}
	r.pieces = l
	r.prerender()
	return r, u, nil
}

// header is the headers sent, by canonical name: Header's, and the
// consumer header's {consumer} after them when there are consumers (with
// none, no request names one).
func (c HTTPConfig) header() map[string][]string {
	h := map[string][]string{}
	for name, vs := range c.Header {
		name = http.CanonicalHeaderKey(name)
		h[name] = append(h[name], vs...)
	}
	if c.ConsumerHeader != "" && c.Consumers > 0 {
		name := http.CanonicalHeaderKey(c.ConsumerHeader)
		h[name] = append(h[name], "{consumer}")
	}
	return h
}

// prerender renders every consumer's request, when they fit in maxRendered.
func (r *request) prerender() {
	size := 0
	for c := range r.ids.n {
		size += r.size(c)
		if size > maxRendered {
			return
		}
	}
	r.rendered = make([]byte, 0, size)
	r.offsets = make([]int, 0, r.ids.n+1)
	for c := range r.ids.n {
		r.offsets = append(r.offsets, len(r.rendered))
		r.rendered = r.fill(r.rendered, c)
	}
	r.offsets = append(r.offsets, len(r.rendered))
}

// size is the length of consumer c's request.
func (r *request) size(c int) int {
	n := 0
	for _, p := range r.pieces {
		n += len(p.text) + r.ids.valueLen(p.value, c)
	}
	return n
}

// fill appends consumer c's request to buf.
func (r *request) fill(buf []byte, c int) []byte {
	for _, p := range r.pieces {
		buf = append(buf, p.text...)
		buf = r.ids.appendValue(buf, p.value, c)
	}
	return buf
}

// render returns the request of consumer (-1 for none): rendered before the
// run, or into *buf, which it keeps for the next.
func (r *request) render(buf *[]byte, consumer int) []byte {
	switch {
	case r.whole != nil || consumer < 0:
		return r.whole
	case r.offsets != nil:
		return r.rendered[r.offsets[consumer]:r.offsets[consumer+1]]
	}
	*buf = r.fill((*buf)[:0], consumer)
	return *buf
}

// errTargetPlace says where a URL may name a consumer.
var errTargetPlace = errors.New("{consumer} and {jwt} may stand in the URL's path or query, not in its host or fragment")

// parseTarget reads the target URL, which may hold {consumer} and {jwt} in
// its path and query, and returns it (each placeholder written as a
// marker) and its request target (the path and query as sent), with the
// identity escaped for where it stands.
func parseTarget(target string) (*url.URL, pieceList, error) {
	t, err := parseTemplate(target)
	if err != nil {
		return nil, nil, err
	}
	nonce, ok := markerNonce(target)
	if !ok {
		return nil, nil, errors.New("the URL holds every marker ratelab could put in the place of {consumer}")
	}
	marker := func(i int) string {
		s := nonce
		for _, d := range strconv.Itoa(i) {
			s += string('a' + d - '0')
		}
		return s + reverse(nonce)
	}
	var b strings.Builder
	var holders []placeholder
	for _, p := range t.parts {
		if p.placeholder == noPlaceholder {
			b.WriteString(p.text)
			continue
		}
		b.WriteString(marker(len(holders)))
		holders = append(holders, p.placeholder)
	}
	u, err := url.Parse(b.String())
	if err != nil {
		return nil, nil, err
	}
	rest := u.RequestURI()
	query := strings.IndexByte(rest, '?')
	var l pieceList
	at := 0 // where rest begins in the request target
	for i, ph := range holders {
		m := marker(i)
		j := strings.Index(rest, m)
		if j < 0 {
			return nil, nil, errTargetPlace
		}
		l.text(rest[:j])
		v := valueJWT
		switch {
		case ph == jwtPlaceholder:
		case query >= 0 && at+j > query:
			v = valueConsumerQuery
		default:
			v = valueConsumerPath
		}
		l.value(v)
		rest = rest[j+len(m):]
		at += j + len(m)
	}
	if strings.Contains(u.Host, nonce) || strings.Contains(u.Fragment, nonce) || strings.Contains(u.User.String(), nonce) {
		return nil, nil, errTargetPlace
	}
	l.text(rest)
	return u, l, nil
}

// markerNonce picks the start of the markers that stand for placeholderNames
// in a URL while it is parsed: lower-case letters that s does not hold,
// none of them a to j (the markers' digits) or a hex digit, so that neither
// the URL's escapes nor a marker's neighbours can make one where none is.
func markerNonce(s string) (string, bool) {
	for _, n := range []string{"zqxk", "wvyk", "kyqz", "xwzv", "qkwz"} {
		if !strings.Contains(s, n) {
			return n, true
		}
	}
	return "", false
}

func reverse(s string) string {
	b := []byte(s)
	for i, j := 0, len(b)-1; i < j; i, j = i+1, j-1 {
		b[i], b[j] = b[j], b[i]
	}
	return string(b)
}

// name is consumer c's identity, as the audit names it.
func (r *request) name(c int32) string {
	if r.ids == nil {
		return consumerName(c)
	}
	return r.ids.label(int(c))
}

// labels are the names of the consumers, when they are not consumer-0 …
// (Settings' Identities).
func (r *request) labels() []string {
	if r.ids == nil {
		return nil
	}
	if r.ids.subjects != nil {
		return r.ids.subjects
	}
	return r.ids.names
}
