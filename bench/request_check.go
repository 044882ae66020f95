package bench

import (
	"cmp"
	"errors"
	"maps"
	"net/http"
	"slices"
	"strings"

	"github.com/ratelab/ratelab/internal/field"
)

// validateRequest checks what the request sends: its templates, the
// headers that must be sent once, the identities and the tokens.
func (c HTTPConfig) validateRequest() error {
	target, err := parseTemplate(c.Target)
	if err != nil {
		return field.Errorf("Target", "%q: %v", c.Target, err)
	}
	if _, _, err := parseTarget(c.Target); errors.Is(err, errTargetPlace) {
		return field.Errorf("Target", "%q: %v", c.Target, err)
	}
	// The first field where each placeholder stands.
	var consumerIn, jwtIn string
	note := func(t template, f string) {
		if consumerIn == "" && t.uses(consumerPlaceholder) {
			consumerIn = f
		}
		if jwtIn == "" && t.uses(jwtPlaceholder) {
			jwtIn = f
		}
	}
	note(target, "Target")
	counts := map[string]int{}
	for _, name := range slices.Sorted(maps.Keys(c.Header)) {
		counts[http.CanonicalHeaderKey(name)] += len(c.Header[name])
		for _, v := range c.Header[name] {
			t, err := parseTemplate(v)
			if err != nil {
				return field.Errorf("Header", "%s: %q: %v", name, v, err)
			}
			note(t, "Header")
		}
	}
	if err := c.onceOnly(counts); err != nil {
		return err
	}
	body, err := parseTemplate(string(c.Body))
	if err != nil {
		return field.Errorf("Body", ": %v", err)
	}
	note(body, "Body")
	claimsName, err := c.checkClaims()
	if err != nil {
		return err
	}
	switch {
	case jwtIn != "" && len(c.JWTSecret) == 0:
		return field.Errorf("JWTSecret", "is needed to sign the {jwt} in {%s}", jwtIn)
	case jwtIn == "" && len(c.JWTSecret) > 0:
		return field.Errorf("JWTSecret", "signs the tokens sent where {jwt} stands, and none does: "+
			"put it in {Header}, such as Authorization: Bearer {jwt}")
	case len(c.JWTClaims) > 0 && len(c.JWTSecret) == 0:
		return field.Errorf("JWTClaims", "needs {JWTSecret}")
	case jwtIn != "" && c.Consumers > 1 && !claimsName:
		return field.Errorf("JWTClaims", "must hold {consumer}, such as sub={consumer}: else every consumer is sent the same token")
	case jwtIn != "" && c.Consumers > MaxJWTConsumers:
		return field.Errorf("Consumers", "must be at most %d with {jwt}: each token is minted before the run (got %d)", MaxJWTConsumers, c.Consumers)
	}
	if consumerIn == "" && jwtIn != "" && claimsName {
		consumerIn = jwtIn
	}
	switch {
	case c.Consumers > 0 && consumerIn == "" && c.ConsumerHeader == "" && len(c.SourceIPs) == 0:
		return field.Errorf("Consumers", "needs {consumer} in {Target}, {Header} or {Body}, or a {ConsumerHeader}")
	case c.Consumers == 0 && (consumerIn != "" || jwtIn != ""):
		return field.Errorf("Consumers", "must be at least 1 for the {consumer} or {jwt} in {%s}", cmp.Or(consumerIn, jwtIn))
	case consumerIn != "" && c.Consumers == 1 && c.Identities == nil:
		return field.Errorf("Consumers", "is 1: {consumer} in {%s} would send one identity, consumer-0, to every request: "+
			"give more, or {Identities}", consumerIn)
	}
	return c.checkIdentities()
}

// onceOnly refuses a second Authorization or Host, made by the headers
// given (counted by canonical name) and the consumer header, and a
// Content-Length, which is the body's.
func (c HTTPConfig) onceOnly(counts map[string]int) error {
	if counts["Content-Length"] > 0 {
		return field.Errorf("Header", "Content-Length is set from {Body}: leave it out")
	}
	if c.ConsumerHeader != "" {
		switch name := http.CanonicalHeaderKey(c.ConsumerHeader); name {
		case "Content-Length", "Transfer-Encoding":
			return field.Errorf("ConsumerHeader", "%s frames the body: it cannot carry an identity", name)
		case "Authorization", "Host":
			if counts[name] > 0 {
				return field.Errorf("ConsumerHeader", "%s would send a second %s beside {Header}'s: "+
					"write {consumer} into that one instead, such as %s: Bearer {consumer}", name, name, name)
			}
		}
	}
	for _, name := range []string{"Authorization", "Host"} {
		if counts[name] > 1 {
			return field.Errorf("Header", "%s is given %d times: a request carries one", name, counts[name])
		}
	}
	return nil
}

// checkClaims checks the claims of the tokens, and says whether one names
// the consumer.
func (c HTTPConfig) checkClaims() (bool, error) {
	names := map[string]bool{}
	named := false
	for _, cl := range c.JWTClaims {
		if err := cl.check(); err != nil {
			return false, field.Errorf("JWTClaims", ": %v", err)
		}
		if names[cl.Name] {
			return false, field.Errorf("JWTClaims", ": %s is given twice", cl.Name)
		}
		names[cl.Name] = true
		if !cl.JSON {
			t, _ := parseTemplate(cl.Value) // checked
			named = named || t.uses(consumerPlaceholder)
		}
	}
	return named, nil
}

// checkIdentities checks Identities: Consumers of them, each sendable and
// each once.
func (c HTTPConfig) checkIdentities() error { return checkIdentities(c.Identities, c.Consumers) }

// checkIdentities checks a config's Identities: nil, or consumers of them,
// each sendable and each once. Errors are *field.Error naming Identities.
func checkIdentities(ids []string, consumers int) error {
	if ids == nil {
		return nil
	}
	if len(ids) != consumers {
		return field.Errorf("Identities", "holds %d, and {Consumers} says %d", len(ids), consumers)
	}
	seen := make(map[string]int, len(ids))
	for i, id := range ids {
		if id == "" || !isFieldValue(id) || strings.TrimSpace(id) != id {
			return field.Errorf("Identities", ": identity %d is empty, holds a control character, or has spaces around it", i+1)
		}
		if j, ok := seen[id]; ok {
			return field.Errorf("Identities", ": identity %d repeats identity %d", i+1, j+1)
		}
		seen[id] = i
	}
	return nil
}

// identityIn says where the requests carry the identity (Settings'
// IdentityIn).
func (c HTTPConfig) identityIn() []string {
	var in []string
	add := func(where string, t template, err error) {
		switch {
		case err != nil:
		case t.uses(consumerPlaceholder) && !slices.Contains(in, where):
			in = append(in, where)
		case t.uses(jwtPlaceholder) && !slices.Contains(in, where+" (JWT)"):
			in = append(in, where+" (JWT)")
		}
	}
	t, err := parseTemplate(c.Target)
	add("URL", t, err)
	h := c.header()
	for _, name := range slices.Sorted(maps.Keys(h)) {
		for _, v := range h[name] {
			t, err := parseTemplate(v)
			add(name, t, err)
		}
	}
	t, err = parseTemplate(string(c.Body))
	add("body", t, err)
	return in
}

// NamesConsumer says whether {consumer} or {jwt} stands in Target, a
// Header's value or Body: whether the request names its consumer without
// ConsumerHeader.
func (c HTTPConfig) NamesConsumer() bool {
	d := c
	d.ConsumerHeader = ""
	return len(d.identityIn()) > 0
}
