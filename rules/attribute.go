package rules

import (
	"fmt"
	"net/textproto"
	"net/url"
	"strings"
)

// Kind is an attribute of an HTTP request that a descriptor key names.
type Kind string

// The attributes the gateway reads.
const (
	KindNone          Kind = ""               // a key the gateway cannot read
	KindRemoteAddress Kind = "remote_address" // the client's address, after trusted proxies
	KindMethod        Kind = "method"
	KindPath          Kind = "path" // without the query
	KindHost          Kind = "host" // without a port, in lower case
	KindHeader        Kind = "header"
	KindQuery         Kind = "query"
	KindGeneric       Kind = "generic_key" // always present: its value is the node's
)

// Attribute is where the gateway reads a key's value.
type Attribute struct {
	Kind Kind
	// Name is the header's name in canonical form (X-Consumer-Id), or the
	// query parameter's name; empty for the other kinds.
	Name string
}

// String is the attribute as a key: header:X-Consumer-Id, path.
func (a Attribute) String() string {
	if a.Kind == KindHeader || a.Kind == KindQuery {
		return string(a.Kind) + ":" + a.Name
	}
	return string(a.Kind)
}

// words names the attribute in a sentence.
func (a Attribute) words() string {
	switch a.Kind {
	case KindRemoteAddress:
		return "client address"
	case KindHeader:
		return "header " + a.Name
	case KindQuery:
		return "query parameter " + a.Name
	}
	return string(a.Kind)
}

// normalize is a value of the attribute as the gateway compares it.
func (a Attribute) normalize(v string) string {
	if a.Kind == KindHost {
		return strings.ToLower(v)
	}
	return v
}

// parseAttribute reads a descriptor key as the gateway does.
func parseAttribute(key string) (Attribute, error) {
	switch k := Kind(key); k {
	case KindRemoteAddress, KindMethod, KindPath, KindHost, KindGeneric:
		return Attribute{Kind: k}, nil
	}
	if name, ok := strings.CutPrefix(key, "header:"); ok {
		if !token(name) {
			return Attribute{}, fmt.Errorf("%q: %q is not a header name", key, name)
		}
		return Attribute{Kind: KindHeader, Name: textproto.CanonicalMIMEHeaderKey(name)}, nil
	}
	if name, ok := strings.CutPrefix(key, "query:"); ok {
		if name == "" {
			return Attribute{}, fmt.Errorf("%q: no parameter named after query:", key)
		}
		return Attribute{Kind: KindQuery, Name: name}, nil
	}
	return Attribute{}, fmt.Errorf("%q is not a key the gateway reads (want remote_address, method, path, host, "+
		"header:NAME, query:NAME or generic_key)", key)
}

// token reports whether s is an HTTP token (RFC 9110), as header names are.
func token(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0 {
			continue
		}
		return false
	}
	return true
}

// Request is what the gateway knows of an HTTP request, for Match. The
// caller fills it from its request without copying headers: net/http's
// Header is a map[string][]string.
type Request struct {
	// Method is the request's method, as sent (GET).
	Method string
	// Path is the URL's path, decoded, without the query (/search).
	Path string
	// Query is the URL's raw query, without the ? (q=redis&page=2).
	Query string
	// Host is the host the request was sent to (the Host header, or the
	// URL's authority); a port and capitals are ignored.
	Host string
	// RemoteAddress is the client's address, after trusted proxies, with
	// no port (203.0.113.7).
	RemoteAddress string
	// Header holds the request's headers by canonical name, as net/http's
	// Header does; the first value of a header is its value.
	Header map[string][]string
}

// value is the request's value for a, and whether it has one: an empty
// value is none.
func (r *Request) value(a Attribute) (string, bool) {
	var v string
	switch a.Kind {
	case KindRemoteAddress:
		v = r.RemoteAddress
	case KindMethod:
		v = r.Method
	case KindPath:
		v = r.Path
	case KindHost:
		v = hostOnly(r.Host)
	case KindHeader:
		if vs := r.Header[a.Name]; len(vs) > 0 {
			v = vs[0]
		}
	case KindQuery:
		v = queryValue(r.Query, a.Name)
	}
	return v, v != ""
}

// Value is the request's value for a, as the gateway reads it, and
// whether it has one: an empty value is none.
func (r *Request) Value(a Attribute) (string, bool) { return r.value(a) }

// hostOnly is a host without its port, in lower case (allocating only when
// there are capitals).
func hostOnly(h string) string {
	if strings.HasPrefix(h, "[") {
		if i := strings.IndexByte(h, ']'); i > 0 {
			h = h[:i+1]
		}
	} else if i := strings.IndexByte(h, ':'); i >= 0 && strings.Count(h, ":") == 1 {
		h = h[:i]
	}
	for i := 0; i < len(h); i++ {
		if c := h[i]; c >= 'A' && c <= 'Z' {
			return strings.ToLower(h)
		}
	}
	return h
}

// queryValue is the first value of the parameter name in a raw query,
// decoded; empty when there is none. It allocates only to decode.
func queryValue(raw, name string) string {
	for raw != "" {
		var kv string
		kv, raw, _ = strings.Cut(raw, "&")
		k, v, _ := strings.Cut(kv, "=")
		if k != name {
			if !strings.ContainsAny(k, "%+") {
				continue
			}
			if u, err := url.QueryUnescape(k); err != nil || u != name {
				continue
			}
		}
		if strings.ContainsAny(v, "%+") {
			u, err := url.QueryUnescape(v)
			if err != nil {
				return ""
			}
			v = u
		}
		return v
	}
	return ""
}

// Oversized reports the first attribute the set reads whose value in r is
// longer than n bytes: a request the gateway refuses before it matches it,
// so that no value of any length is hashed into a counter key.
func (s *Set) Oversized(r Request, n int) (Attribute, bool) {
	for _, a := range s.attrs {
		if v, ok := r.value(a); ok && len(v) > n {
			return a, true
		}
	}
	return Attribute{}, false
}

// Words names a in a sentence: header X-Api-Key, query parameter q, path.
func (a Attribute) Words() string { return a.words() }
