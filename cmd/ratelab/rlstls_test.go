package main

import (
	"strings"
	"testing"

	"github.com/ratelab/ratelab/internal/redisrun/redistest"
)

// rlsTLSConfig is a limit of 5 a minute per consumer, by sliding log.
const rlsTLSConfig = "domain: DOMAIN\ndescriptors:\n  - key: user\n    rate_limit: {unit: minute, requests_per_unit: 5, algorithm: sliding-log}\n"

// benchRLSOver runs a small audited bench rls at addr, its consumers
// named user=NAME{consumer}, with the flags extra, and returns its exit
// code, stderr and the audit's verdict.
func benchRLSOver(t *testing.T, addr, domain, name string, extra ...string) (int, string, string) {
	t.Helper()
	args := append([]string{"bench", "rls", addr, "--domain", domain, "--descriptor", "user=" + name + "{consumer}", "--consumers", "2",
		"--rate", "0", "--connections", "2", "--requests", "30", "--timeout", "5s", "--no-probes",
		"--expect-limit", "5/1m:sliding-log", "--fail-on-leak", "-o", "json"}, extra...)
	code, stdout, stderr := ratelab(t, args...)
	var res rlsAudit
	if stdout != "" {
		decodeJSON(t, stdout, &res)
	}
	return code, stderr, res.Audit.Verdict
}

// TestBenchRLSOverTLS: ratelab rls serves gRPC over TLS; bench rls calls
// it with --tls-ca, or --insecure, and the audit holds; without TLS, or
// with TLS but not trusting the service's certificate, no call is
// answered: exit 1, naming what failed, and no verdict of the limit held.
func TestBenchRLSOverTLS(t *testing.T) {
	t.Parallel()
	files := redistest.TLSFiles(t)
	addr, domain := startRLS(t, rlsTLSConfig, "--grpc-tls-cert", files.CertFile, "--grpc-tls-key", files.KeyFile)
	for _, args := range [][]string{{"--tls-ca", files.CAFile}, {"--insecure"}} {
		code, stderr, verdict := benchRLSOver(t, addr, domain, args[0], args...)
		if code != exitOK || verdict != "held" {
			t.Fatalf("%s: exit %d, verdict %q: %s", args, code, verdict, stderr)
		}
	}
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"plaintext", nil, "(if the service is served over TLS, call it with --tls))"},
		{"system roots", []string{"--tls"}, "tls 30 (first: rpc error: code = Unavailable desc = connection error: " +
			`desc = "transport: authentication handshake failed: tls: failed to verify certificate: x509: certificate signed by unknown authority")`},
		{"another name", []string{"--tls-ca", files.CAFile, "--tls-server-name", "rls.example"}, "tls 30 (first:"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, stderr, verdict := benchRLSOver(t, addr, domain, tc.name, tc.args...)
			if code != exitError || !strings.Contains(stderr, "no request got a response: 30 of 30 failed: ") ||
				!strings.Contains(stderr, tc.want) || verdict == "held" {
				t.Fatalf("exit %d, verdict %q, stderr %q; want exit 1 and %q", code, verdict, stderr, tc.want)
			}
		})
	}
}

// TestBenchRLSTLSToPlaintext: bench rls over TLS to a service served in
// plaintext fails each call's handshake: exit 1, errors of kind tls.
func TestBenchRLSTLSToPlaintext(t *testing.T) {
	t.Parallel()
	files := redistest.TLSFiles(t)
	addr, domain := startRLS(t, rlsTLSConfig)
	code, stderr, verdict := benchRLSOver(t, addr, domain, "a", "--tls-ca", files.CAFile)
	if code != exitError || !strings.Contains(stderr, "no request got a response: 30 of 30 failed: tls 30 (first: ") ||
		!strings.Contains(stderr, "authentication handshake failed") || verdict == "held" {
		t.Fatalf("exit %d, verdict %q, stderr %q; want exit 1 and tls errors", code, verdict, stderr)
	}
}

// TestBenchRLSMutualTLS: ratelab rls with --grpc-tls-client-ca answers
// only a client whose certificate that CA signs.
func TestBenchRLSMutualTLS(t *testing.T) {
	t.Parallel()
	server, client := redistest.TLSFiles(t), redistest.TLSFiles(t)
	addr, domain := startRLS(t, rlsTLSConfig, "--grpc-tls-cert", server.CertFile, "--grpc-tls-key", server.KeyFile,
		"--grpc-tls-client-ca", client.CAFile)
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no client certificate", nil, "tls: certificate required"},
		{"a certificate the CA did not sign", []string{"--tls-cert", server.CertFile, "--tls-key", server.KeyFile},
			"tls: unknown certificate authority"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// The handshake fails at the client's first read (TLS 1.3),
			// or at its first write (a broken pipe, a reset) when the
			// service has hung up already.
			code, stderr, verdict := benchRLSOver(t, addr, domain, "a", append([]string{"--tls-ca", server.CAFile}, tc.args...)...)
			if code != exitError || !strings.Contains(stderr, "no request got a response: 30 of 30 failed:") ||
				!strings.Contains(stderr, tc.want) || verdict == "held" {
				t.Fatalf("exit %d, verdict %q, stderr %q; want exit 1 and %q", code, verdict, stderr, tc.want)
			}
		})
	}
	code, stderr, verdict := benchRLSOver(t, addr, domain, "a", "--tls-ca", server.CAFile, "--tls-cert", client.CertFile, "--tls-key", client.KeyFile)
	if code != exitOK || verdict != "held" {
		t.Fatalf("client certificate: exit %d, verdict %q: %s", code, verdict, stderr)
	}
}

// TestBenchRLSTLSRefused: bad TLS flags of bench rls exit 2 naming the
// flag and the file, before any call (the address accepts nothing).
func TestBenchRLSTLSRefused(t *testing.T) {
	t.Parallel()
	files, other := redistest.TLSFiles(t), redistest.TLSFiles(t)
	junk, missing := tlsJunk(t)
	base := []string{"bench", "rls", freeAddr(t), "--domain", "d", "--descriptor", "user=a", "--requests", "5", "--rate", "0"}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--tls-cert", files.CertFile}, "--tls-cert needs --tls-key"},
		{[]string{"--tls-key", files.KeyFile}, "--tls-key needs --tls-cert"},
		{[]string{"--tls-ca", missing}, "--tls-ca: open " + missing},
		{[]string{"--tls-ca", junk}, "--tls-ca: " + junk + " holds no PEM certificate"},
		{[]string{"--tls-cert", junk, "--tls-key", files.KeyFile}, "--tls-cert: " + junk + " with " + files.KeyFile},
		{[]string{"--tls-cert", files.CertFile, "--tls-key", other.KeyFile}, "--tls-cert: " + files.CertFile + " with " + other.KeyFile},
		{[]string{"--tls-cert", files.CertFile, "--tls-key", missing}, "--tls-cert: open " + missing},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			code, stdout, stderr := ratelab(t, append(base, tc.args...)...)
			if code != exitUsage || !strings.Contains(stderr, tc.want) || stdout != "" {
				t.Fatalf("exit %d, stderr %q, stdout %q; want exit 2 and %q", code, stderr, stdout, tc.want)
			}
		})
	}
}
