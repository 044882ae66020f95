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
