package bench

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/golang-jwt/jwt/v5"
)

// JWTClaim is one claim of the tokens minted per consumer (HTTPConfig's
// JWTClaims).
type JWTClaim struct {
	Name string
	// Value is the claim's value: a template, sent as a JSON string, in
	// which {consumer} is the consumer's identity; or, with JSON set, a
	// JSON value sent as it is (a number, true, an object).
	Value string
	JSON  bool
}

// MaxJWTConsumers bounds the consumers of a run that mints tokens: each
// token is minted before the run.
const MaxJWTConsumers = 1_000_000

// ParseJWTClaim reads a claim as NAME=VALUE (VALUE a template sent as a
// JSON string: sub={consumer}) or NAME:=JSON (a JSON value as it is:
// exp:=4102444800).
func ParseJWTClaim(s string) (JWTClaim, error) {
	name, value, ok := strings.Cut(s, "=")
	if !ok {
		return JWTClaim{}, fmt.Errorf("%q: want NAME=VALUE (a string, {consumer} in it), or NAME:=JSON", s)
	}
	c := JWTClaim{Name: name, Value: value}
	if n, isJSON := strings.CutSuffix(name, ":"); isJSON {
		c.Name, c.JSON = n, true
	}
	return c, c.check()
}

// check says what is wrong with the claim, if anything.
func (c JWTClaim) check() error {
	if c.Name == "" {
		return errors.New("a claim needs a name")
	}
	if c.JSON {
		if !json.Valid([]byte(c.Value)) {
			return fmt.Errorf("%s:=%s: not a JSON value", c.Name, c.Value)
		}
		return nil
	}
	t, err := parseTemplate(c.Value)
	switch {
	case err != nil:
		return fmt.Errorf("%s=%s: %w", c.Name, c.Value, err)
	case t.uses(jwtPlaceholder):
		return fmt.Errorf("%s=%s: a token cannot hold itself", c.Name, c.Value)
	}
	return nil
}

// maxIdentityLine bounds a line of an identities file.
const maxIdentityLine = 64 << 10

// ParseIdentities reads consumers' identities (API keys, tokens), one per
// line; blank lines and lines that begin with # are skipped, and the
// spaces around an identity too. An identity sent twice, one that holds a
// control character, and more than MaxConsumers are refused, naming the
// line (never the identity, which may be a secret).
func ParseIdentities(r io.Reader) ([]string, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), maxIdentityLine)
	seen := map[string]int{}
	var ids []string
	line := 0
	for sc.Scan() {
		line++
		id := strings.TrimSpace(sc.Text())
		if id == "" || strings.HasPrefix(id, "#") {
			continue
		}
		if !isFieldValue(id) {
			return nil, fmt.Errorf("line %d holds a control character", line)
		}
		if first, ok := seen[id]; ok {
			return nil, fmt.Errorf("line %d repeats the identity of line %d", line, first)
		}
		if len(ids) == MaxConsumers {
			return nil, fmt.Errorf("line %d: more than %d identities", line, MaxConsumers)
		}
		seen[id] = line
		ids = append(ids, id)
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return nil, fmt.Errorf("line %d is longer than %d KiB", line+1, maxIdentityLine>>10)
		}
		return nil, err
	}
	if len(ids) == 0 {
		return nil, errors.New("no identity in it (blank lines and # comments are skipped)")
	}
	return ids, nil
}

// identities are the values a run's requests name its consumers by.
type identities struct {
	n int
	// names are the identities sent; nil for consumer-0 …
	names []string
	// subjects name the consumers when only a token names them, by its
	// claim that holds {consumer} (sub first) when that is more than
	// {consumer}: what the gateway reads; nil otherwise.
	subjects []string
	// path and query are names escaped for a URL's path and query, when a
	// request needs them.
	path, query []string
	// jwts are the tokens, when a request sends them.
	jwts []string
	// bodyText is the length of the body's text, and body the values it
	// holds, when it names the consumer.
	bodyText int
	body     []value
}

// newIdentities makes the values that the pieces fill in, for a validated
// cfg whose body is body.
func newIdentities(cfg HTTPConfig, pieces pieceList, body template) (*identities, error) {
	ids := &identities{n: cfg.Consumers, names: cfg.Identities}
	uses := map[value]bool{}
	for _, p := range pieces {
		uses[p.value] = true
	}
	for _, p := range body.parts {
		switch p.placeholder {
		case consumerPlaceholder:
			ids.body = append(ids.body, valueConsumer)
		case jwtPlaceholder:
			ids.body = append(ids.body, valueJWT)
		default:
			ids.bodyText += len(p.text)
		}
	}
	if ids.names != nil && uses[valueConsumerPath] {
		ids.path = make([]string, ids.n)
		for c, name := range ids.names {
			ids.path[c] = url.PathEscape(name)
		}
	}
	if ids.names != nil && uses[valueConsumerQuery] {
		ids.query = make([]string, ids.n)
		for c, name := range ids.names {
			ids.query[c] = url.QueryEscape(name)
		}
	}
	if uses[valueJWT] {
		var err error
		if ids.jwts, err = ids.mint(cfg.JWTSecret, cfg.JWTClaims); err != nil {
			return nil, err
		}
		d := cfg
		d.JWTClaims = nil
		if in := d.identityIn(); !slices.ContainsFunc(in, func(s string) bool { return !strings.HasSuffix(s, " (JWT)") }) {
			ids.subjects = ids.subjectsOf(cfg.JWTClaims)
		}
	}
	return ids, nil
}

// subjectsOf renders, for each consumer, the claim that names it (sub
// first), unless that is {consumer} alone.
func (ids *identities) subjectsOf(claims []JWTClaim) []string {
	var claim *template
	for _, c := range claims {
		if c.JSON {
			continue
		}
		t, err := parseTemplate(c.Value)
		if err != nil || !t.uses(consumerPlaceholder) || (claim != nil && c.Name != "sub") {
			continue
		}
		claim = &t
	}
	if claim == nil || (len(claim.parts) == 1 && claim.parts[0].placeholder == consumerPlaceholder) {
		return nil
	}
	subjects := make([]string, ids.n)
	for c := range subjects {
		subjects[c] = claim.render(func(placeholder) string { return ids.name(c) })
	}
	return subjects
}

// label is how the audit names consumer c: the identity sent, or the
// subject of its token when only a token names it.
func (ids *identities) label(c int) string {
	if ids.subjects != nil {
		return ids.subjects[c]
	}
	return ids.name(c)
}

// mint signs each consumer's token with HS256.
func (ids *identities) mint(secret []byte, claims []JWTClaim) ([]string, error) {
	tmpls := make([]template, len(claims))
	for i, c := range claims {
		if !c.JSON {
			t, err := parseTemplate(c.Value)
			if err != nil {
				return nil, err
			}
			tmpls[i] = t
		}
	}
	jwts := make([]string, max(ids.n, 1))
	for k := range jwts {
		mc := jwt.MapClaims{}
		for i, c := range claims {
			if c.JSON {
				mc[c.Name] = json.RawMessage(c.Value)
				continue
			}
			mc[c.Name] = tmpls[i].render(func(placeholder) string { return ids.name(k) })
		}
		s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, mc).SignedString(secret)
		if err != nil {
			return nil, fmt.Errorf("minting a token: %w", err)
		}
		jwts[k] = s
	}
	return jwts, nil
}

// consumerName names consumer c when no identity does: consumer-N.
func consumerName(c int32) string { return "consumer-" + strconv.Itoa(int(c)) }

// name is consumer c's identity.
func (ids *identities) name(c int) string {
	if ids.names != nil {
		return ids.names[c]
	}
	return consumerName(int32(c))
}

// appendValue appends consumer c's v to buf.
func (ids *identities) appendValue(buf []byte, v value, c int) []byte {
	switch {
	case v == valueNone:
		return buf
	case v == valueJWT:
		return append(buf, ids.jwts[c]...)
	case v == valueLength:
		return strconv.AppendInt(buf, int64(ids.bodyLen(c)), 10)
	case ids.names == nil: // consumer-N needs no escape
		return strconv.AppendInt(append(buf, "consumer-"...), int64(c), 10)
	case v == valueConsumerPath:
		return append(buf, ids.path[c]...)
	case v == valueConsumerQuery:
		return append(buf, ids.query[c]...)
	}
	return append(buf, ids.names[c]...)
}

// valueLen is the length of consumer c's v.
func (ids *identities) valueLen(v value, c int) int {
	switch {
	case v == valueNone:
		return 0
	case v == valueJWT:
		return len(ids.jwts[c])
	case v == valueLength:
		return digits(ids.bodyLen(c))
	case ids.names == nil:
		return len("consumer-") + digits(c)
	case v == valueConsumerPath:
		return len(ids.path[c])
	case v == valueConsumerQuery:
		return len(ids.query[c])
	}
	return len(ids.names[c])
}

// bodyLen is the length of consumer c's body.
func (ids *identities) bodyLen(c int) int {
	n := ids.bodyText
	for _, v := range ids.body {
		n += ids.valueLen(v, c)
	}
	return n
}

// digits is the number of decimal digits of n ≥ 0.
func digits(n int) int {
	d := 1
	for ; n >= 10; n /= 10 {
		d++
	}
	return d
}
