package bench

import (
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestRLSFailureKinds: a failed handshake is a tls error; a plaintext
// call hung up on before the service's preface says TLS may be wanted.
func TestRLSFailureKinds(t *testing.T) {
	for _, tc := range []struct {
		msg     string
		overTLS bool
		kind    errKind
		hint    bool
	}{
		{"connection error: desc = \"transport: Error while dialing: dial tcp 127.0.0.1:1: connect: connection refused\"", false, kindRefused, false},
		{"connection error: desc = \"transport: authentication handshake failed: tls: failed to verify certificate\"", true, kindTLS, false},
		{"connection error: desc = \"error reading server preface: remote error: tls: certificate required\"", true, kindTLS, false},
		{"connection error: desc = \"error reading server preface: EOF\"", false, kindReset, true},
		{"connection error: desc = \"error reading server preface: EOF\"", true, kindReset, false},
	} {
		err := rlsFailure(status.Error(codes.Unavailable, tc.msg), tc.overTLS)
		kind, _ := kindOf(err)
		if kind != tc.kind || strings.Contains(err.Error(), "--tls") != tc.hint {
			t.Errorf("%q (over TLS %t): %s, %q; want %s, hint %t", tc.msg, tc.overTLS, kindNames[kind], err, kindNames[tc.kind], tc.hint)
		}
	}
}

// TestRLSConfigTLS: a TLS file or name without TLS is refused, naming the
// field; the server name defaults to the target's host.
func TestRLSConfigTLS(t *testing.T) {
	c := RLSConfig{Target: "127.0.0.1:8081", TLSServerName: "rls.example"}
	if _, err := c.tlsConfig(); err == nil || err.Error() != "TLSServerName needs TLS" {
		t.Errorf("server name without TLS: %v", err)
	}
	c.TLS = true
	if tc, err := c.tlsConfig(); err != nil || tc.ServerName != "rls.example" {
		t.Errorf("server name: %v, %v", tc, err)
	}
	c.TLSServerName = ""
	if tc, err := c.tlsConfig(); err != nil || tc.ServerName != "127.0.0.1" || tc.RootCAs != nil || tc.InsecureSkipVerify {
		t.Errorf("default: %+v, %v", tc, err)
	}
}

// TestRLSIdentities: Identities are sent where {consumer} stands, in place
// of consumer-0 …, and name the consumers to the audit; other identities
// make another run id; identities that cannot be sent as asked are
// refused, naming the field.
func TestRLSIdentities(t *testing.T) {
	base := RLSConfig{Target: "127.0.0.1:8081", Domain: "d", Descriptors: []Descriptor{{{Key: "user", Value: "u-{consumer}"}}},
		Rate: 10, Connections: 1, Requests: 1, Consumers: 2}
	c := base
	c.Identities = []string{"key-a", "key-b"}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	calls, err := newRLSCalls(c)
	if err != nil {
		t.Fatal(err)
	}
	for consumer, want := range []string{"u-key-a", "u-key-b"} {
		if got := calls.request(0, consumer).GetDescriptors()[0].GetEntries()[0].GetValue(); got != want {
			t.Errorf("consumer %d sends %q, want %q", consumer, got, want)
		}
	}
	p := &plan{identities: c.Identities}
	if got := p.consumerName(1); got != "key-b" {
		t.Errorf("the audit names consumer 1 %q, want key-b", got)
	}
	other := c
	other.Identities = []string{"key-a", "key-c"}
	if id := c.runID(); id == base.runID() || id == other.runID() {
		t.Errorf("run id %q: the same for other identities (%q, %q)", id, base.runID(), other.runID())
	}
	for _, tc := range []struct {
		name string
		ids  []string
		desc string
		want string
	}{
		{"fewer than the consumers", []string{"key-a"}, "u-{consumer}", "Identities holds 1, and Consumers says 2"},
		{"repeated", []string{"key-a", "key-a"}, "u-{consumer}", "Identities: identity 2 repeats identity 1"},
		{"not UTF-8", []string{"key-a", "key-\xff"}, "u-{consumer}", "Identities: identity 2 is not UTF-8 text"},
		{"sent nowhere", []string{"key-a", "key-b"}, "everyone", "Identities names the consumers where {consumer} stands, and no value of Descriptors holds it"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := base
			c.Identities, c.Descriptors = tc.ids, []Descriptor{{{Key: "user", Value: tc.desc}}}
			if err := c.Validate(); err == nil || !strings.HasPrefix(err.Error(), tc.want) {
				t.Errorf("%v, want %q", err, tc.want)
			}
		})
	}
}
