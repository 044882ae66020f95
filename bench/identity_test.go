package bench_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/ratelab/ratelab/audit"
	"github.com/ratelab/ratelab/bench"
	"github.com/ratelab/ratelab/rules"
)

// TestParseIdentities: one identity a line, trimmed; blank lines and #
// comments skipped; a repeat, a control character, a line too long and an
// empty file refused, naming the line and never the identity.
func TestParseIdentities(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     []string
		err      string
	}{
		{"keys", "key-a\nkey-b\n", []string{"key-a", "key-b"}, ""},
		{"comments and blanks", "# keys of the staging plan\n\n  key-a  \r\n\t\n#key-x\nkey-b", []string{"key-a", "key-b"}, ""},
		{"tokens with = and /", "YWJj+/==\nabc.def.ghi\n", []string{"YWJj+/==", "abc.def.ghi"}, ""},
		{"repeat", "key-a\nkey-b\n\nkey-a\n", nil, "line 4 repeats the identity of line 1"},
		{"control character", "key-a\nkey\x00b\n", nil, "line 2 holds a control character"},
		{"too long", "key-a\n" + strings.Repeat("k", 70<<10) + "\n", nil, "line 2 is longer than 64 KiB"},
		{"empty", "# nothing\n\n", nil, "no identity in it"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := bench.ParseIdentities(strings.NewReader(tc.in))
			if tc.err != "" {
				if err == nil || !strings.HasPrefix(err.Error(), tc.err) || strings.Contains(err.Error(), "key-a") {
					t.Fatalf("ParseIdentities = %q, %v; want %q", got, err, tc.err)
				}
				return
			}
			if err != nil || !slices.Equal(got, tc.want) {
				t.Fatalf("ParseIdentities = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

// TestParseJWTClaim: NAME=VALUE is a string template, NAME:=JSON a JSON
// value; anything else is refused.
func TestParseJWTClaim(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want bench.JWTClaim
		err  string
	}{
		{"sub={consumer}", bench.JWTClaim{Name: "sub", Value: "{consumer}"}, ""},
		{"iss=ratelab", bench.JWTClaim{Name: "iss", Value: "ratelab"}, ""},
		{"scope=a=b", bench.JWTClaim{Name: "scope", Value: "a=b"}, ""},
		{"exp:=4102444800", bench.JWTClaim{Name: "exp", Value: "4102444800", JSON: true}, ""},
		{`roles:=["a","b"]`, bench.JWTClaim{Name: "roles", Value: `["a","b"]`, JSON: true}, ""},
		{"sub", bench.JWTClaim{}, `"sub": want NAME=VALUE`},
		{"=x", bench.JWTClaim{}, "a claim needs a name"},
		{"exp:=soon", bench.JWTClaim{}, "exp:=soon: not a JSON value"},
		{"sub={user}", bench.JWTClaim{}, "sub={user}: unknown placeholder {user}"},
		{"sub={jwt}", bench.JWTClaim{}, "sub={jwt}: a token cannot hold itself"},
	} {
		t.Run(tc.in, func(t *testing.T) {
			got, err := bench.ParseJWTClaim(tc.in)
			if tc.err != "" {
				if err == nil || !strings.HasPrefix(err.Error(), tc.err) {
					t.Fatalf("ParseJWTClaim = %+v, %v; want %q", got, err, tc.err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("ParseJWTClaim = %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
}

// TestValidateIdentities: where {consumer} and {jwt} may stand, the headers
// a request carries once, and the identities and tokens.
func TestValidateIdentities(t *testing.T) {
	ok := func(f func(*bench.HTTPConfig)) bench.HTTPConfig {
		c := bench.HTTPConfig{Target: "http://127.0.0.1:1/", Duration: time.Second, Consumers: 3}
		f(&c)
		return c
	}
	sub := []bench.JWTClaim{{Name: "sub", Value: "{consumer}"}}
	for _, tc := range []struct {
		name string
		cfg  bench.HTTPConfig
		want string // the error's start; "" for none
	}{
		{"query", ok(func(c *bench.HTTPConfig) { c.Target += "?apikey={consumer}" }), ""},
		{"path", ok(func(c *bench.HTTPConfig) { c.Target += "k/{consumer}" }), ""},
		{"header", ok(func(c *bench.HTTPConfig) { c.Header = http.Header{"Authorization": {"Bearer {consumer}"}} }), ""},
		{"body", ok(func(c *bench.HTTPConfig) { c.Body = []byte(`{"key":"{consumer}"}`) }), ""},
		{"consumer header", ok(func(c *bench.HTTPConfig) { c.ConsumerHeader = "X-Id" }), ""},
		{"jwt", ok(func(c *bench.HTTPConfig) {
			c.Header, c.JWTSecret, c.JWTClaims = http.Header{"Authorization": {"Bearer {jwt}"}}, []byte("s"), sub
		}), ""},
		{"in the host", ok(func(c *bench.HTTPConfig) { c.Target = "http://{consumer}.example/" }),
			`Target "http://{consumer}.example/": {consumer} and {jwt} may stand in the URL's path or query`},
		{"in the fragment", ok(func(c *bench.HTTPConfig) { c.Target = "http://h/#{consumer}" }), `Target "http://h/#{consumer}": {consumer}`},
		{"unknown in the URL", ok(func(c *bench.HTTPConfig) { c.Target += "?k={key}" }), `Target "http://127.0.0.1:1/?k={key}": unknown placeholder {key}`},
		{"unknown in a header", ok(func(c *bench.HTTPConfig) { c.Header = http.Header{"X-A": {"{user}"}} }), `Header X-A: "{user}": unknown placeholder {user}`},
		{"unknown in the body", ok(func(c *bench.HTTPConfig) { c.Body = []byte("{id}") }), "Body: unknown placeholder {id}"},
		{"nowhere", ok(func(*bench.HTTPConfig) {}), "Consumers needs {consumer} in Target, Header or Body, or a ConsumerHeader"},
		{"no consumers", ok(func(c *bench.HTTPConfig) { c.Consumers, c.Target = 0, c.Target+"?k={consumer}" }), "Consumers must be at least 1"},
		{"one consumer", ok(func(c *bench.HTTPConfig) { c.Consumers, c.Target = 1, c.Target+"?k={consumer}" }),
			"Consumers is 1: {consumer} in Target would send one identity"},
		{"one identity", ok(func(c *bench.HTTPConfig) {
			c.Consumers, c.Identities, c.Target = 1, []string{"key-a"}, c.Target+"?k={consumer}"
		}), ""},
		{"one consumer in the consumer header", ok(func(c *bench.HTTPConfig) { c.Consumers, c.ConsumerHeader = 1, "X-Id" }), ""},
		{"two Authorization", ok(func(c *bench.HTTPConfig) {
			c.ConsumerHeader, c.Header = "X-Id", http.Header{"Authorization": {"a", "b"}}
		}), "Header Authorization is given 2 times"},
		{"two Host, by case", ok(func(c *bench.HTTPConfig) {
			c.ConsumerHeader, c.Header = "X-Id", http.Header{"Host": {"a"}, "host": {"b"}}
		}), "Header Host is given 2 times"},
		{"consumer header beside Authorization", ok(func(c *bench.HTTPConfig) {
			c.ConsumerHeader, c.Header = "authorization", http.Header{"Authorization": {"Bearer x"}}
		}), "ConsumerHeader Authorization would send a second Authorization beside Header's"},
		{"consumer header beside Host", ok(func(c *bench.HTTPConfig) { c.ConsumerHeader, c.Header = "Host", http.Header{"Host": {"x"}} }),
			"ConsumerHeader Host would send a second Host"},
		{"consumer header is Host", ok(func(c *bench.HTTPConfig) { c.ConsumerHeader = "Host" }), ""},
		{"Content-Length", ok(func(c *bench.HTTPConfig) { c.ConsumerHeader, c.Header = "X-Id", http.Header{"Content-Length": {"3"}} }),
			"Header Content-Length is set from Body"},
		{"consumer header Content-Length", ok(func(c *bench.HTTPConfig) { c.ConsumerHeader = "content-length" }),
			"ConsumerHeader Content-Length frames the body"},
		{"jwt without a secret", ok(func(c *bench.HTTPConfig) { c.Header = http.Header{"Authorization": {"Bearer {jwt}"}} }),
			"JWTSecret is needed to sign the {jwt} in Header"},
		{"secret without jwt", ok(func(c *bench.HTTPConfig) { c.ConsumerHeader, c.JWTSecret = "X-Id", []byte("s") }),
			"JWTSecret signs the tokens sent where {jwt} stands, and none does"},
		{"claims without a secret", ok(func(c *bench.HTTPConfig) { c.ConsumerHeader, c.JWTClaims = "X-Id", sub }), "JWTClaims needs JWTSecret"},
		{"one token for all", ok(func(c *bench.HTTPConfig) {
			c.Header, c.JWTSecret, c.JWTClaims = http.Header{"Authorization": {"Bearer {jwt}"}}, []byte("s"), []bench.JWTClaim{{Name: "sub", Value: "x"}}
		}), "JWTClaims must hold {consumer}"},
		{"a claim twice", ok(func(c *bench.HTTPConfig) {
			c.Header, c.JWTSecret, c.JWTClaims = http.Header{"Authorization": {"Bearer {jwt}"}}, []byte("s"), append(sub, sub[0])
		}), "JWTClaims: sub is given twice"},
		{"identities and consumers", ok(func(c *bench.HTTPConfig) { c.ConsumerHeader, c.Identities = "X-Id", []string{"a", "b"} }),
			"Identities holds 2, and Consumers says 3"},
		{"identity twice", ok(func(c *bench.HTTPConfig) { c.ConsumerHeader, c.Identities = "X-Id", []string{"a", "b", "a"} }),
			"Identities: identity 3 repeats identity 1"},
		{"identity with a line break", ok(func(c *bench.HTTPConfig) { c.ConsumerHeader, c.Identities = "X-Id", []string{"a", "b\r\nX: 1", "c"} }),
			"Identities: identity 2 is empty, holds a control character"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.Validate()
			if (tc.want == "") != (err == nil) || (err != nil && !strings.HasPrefix(err.Error(), tc.want)) {
				t.Fatalf("Validate() = %v, want %q", err, tc.want)
			}
		})
	}
}

// TestIdentitiesSent: each consumer's identity reaches the server wherever
// the request names it (the query escaped, a header, the body with its
// own length, a token signed with the secret whose sub is the identity),
// and the audit names consumers by the identities sent.
func TestIdentitiesSent(t *testing.T) {
	t.Parallel()
	ids := []string{"key-a", "key b+/=", "kéy-c"}
	secret := []byte("test secret")
	var mu sync.Mutex
	seen := map[string]int{}
	var bad []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		key := r.URL.Query().Get("apikey")
		tok, err := jwt.Parse(strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer "),
			func(*jwt.Token) (any, error) { return secret, nil }, jwt.WithValidMethods([]string{"HS256"}))
		sub := ""
		if err == nil {
			sub, _ = tok.Claims.GetSubject()
		}
		mu.Lock()
		defer mu.Unlock()
		if err != nil || sub != key || r.Header.Get("X-Key") != key || string(body) != `{"key":"`+key+`"}` ||
			r.URL.Path != "/k/"+key {
			bad = append(bad, r.URL.String()+" "+r.Header.Get("X-Key")+" "+string(body)+" "+sub)
		}
		seen[key]++
		if seen[key] > 2 {
			w.WriteHeader(http.StatusTooManyRequests)
		}
	}))
	defer srv.Close()
	res, err := bench.RunHTTP(context.Background(), bench.HTTPConfig{Target: srv.URL + "/k/{consumer}?apikey={consumer}",
		Method: http.MethodPost, Header: http.Header{"X-Key": {"{consumer}"}, "Authorization": {"Bearer {jwt}"}},
		Body: []byte(`{"key":"{consumer}"}`), Consumers: 3, Identities: ids, ShowIdentities: true, JWTSecret: secret,
		JWTClaims:   []bench.JWTClaim{{Name: "sub", Value: "{consumer}"}, {Name: "exp", Value: "4102444800", JSON: true}},
		Connections: 2, Requests: 30, ExpectLimit: 2, ExpectWindow: time.Hour, NoProbes: true})
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(bad) > 0 || len(seen) != 3 || seen["key-a"] != 10 || seen["key b+/="] != 10 || seen["kéy-c"] != 10 {
		t.Fatalf("the server saw %v, and %q", seen, bad)
	}
	if !slices.Equal(res.Config.Identities, ids) || !slices.Equal(res.Config.IdentityIn, []string{"URL", "Authorization (JWT)", "X-Key", "body"}) {
		t.Fatalf("identities %q in %q", res.Config.Identities, res.Config.IdentityIn)
	}
	a := res.Audit
	if a == nil || a.Verdict != audit.Held || len(a.Limits[0].WorstConsumers) != 3 {
		t.Fatalf("audit %+v", a)
	}
	for _, w := range a.Limits[0].WorstConsumers {
		if !slices.Contains(ids, w.Consumer) || w.Admitted != 2 || w.Denied != 8 {
			t.Fatalf("worst consumers %+v: want the identities sent, each 2 admitted and 8 denied", a.Limits[0].WorstConsumers)
		}
	}
	// The HTML page's audit chart names them alike.
	windows, err := res.RollingAdmissions(3)
	if err != nil || len(windows) != 3 {
		t.Fatalf("rolling admissions %+v, %v", windows, err)
	}
	for _, w := range windows {
		if !slices.Contains(ids, w.Consumer) {
			t.Fatalf("the audit chart names %q, not an identity sent", w.Consumer)
		}
	}
}

// TestMergeKeysByIdentity: two runs that share one identity, each with it
// under another number, are two runs (their identities differ): merged
// --as-one-run, they make three consumers named by identity, the shared
// one's requests together. Their identities shown, that is; named by
// pseudonyms of two lists, the shared one's could not be lined up, and
// the merge is refused.
func TestMergeKeysByIdentity(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	seen := map[string]int{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		key := r.URL.Query().Get("apikey")
		if seen[key]++; seen[key] > 2 {
			w.WriteHeader(http.StatusTooManyRequests)
		}
	}))
	defer srv.Close()
	var runs, hidden []bench.Result
	for _, ids := range [][]string{{"key-a", "key-b"}, {"key-b", "key-c"}} {
		for _, show := range []bool{true, false} {
			res, err := bench.RunHTTP(context.Background(), bench.HTTPConfig{Target: srv.URL + "/?apikey={consumer}", Consumers: 2,
				Identities: ids, ShowIdentities: show, Connections: 1, Requests: 10, ExpectLimit: 2, ExpectWindow: time.Hour, NoProbes: true})
			if err != nil {
				t.Fatal(err)
			}
			if show {
				runs = append(runs, res)
			} else {
				hidden = append(hidden, res)
			}
		}
	}
	if _, err := bench.MergeWith(hidden, bench.MergeOptions{AsOneRun: true, Labels: []string{"a.json", "b.json"}}); err == nil ||
		!strings.Contains(err.Error(), "a.json and b.json name their consumers by pseudonyms of different lists") {
		t.Fatalf("pseudonyms of two lists merged as one run: %v", err)
	}
	if _, err := bench.Merge(runs, 0); err == nil {
		t.Fatal("two runs merged as shards of one")
	}
	m, err := bench.MergeWith(runs, bench.MergeOptions{AsOneRun: true})
	if err != nil {
		t.Fatal(err)
	}
	if m.Config.Consumers != 3 || !slices.Equal(m.Config.Identities, []string{"key-a", "key-b", "key-c"}) || m.Audit == nil {
		t.Fatalf("merged %d consumers %q, audit %v", m.Config.Consumers, m.Config.Identities, m.Audit)
	}
	got := map[string]audit.ConsumerAudit{}
	for _, w := range m.Audit.Limits[0].WorstConsumers {
		got[w.Consumer] = w
	}
	if len(got) != 3 || got["key-b"].Admitted != 2 || got["key-b"].Denied != 8 || got["key-a"].Admitted != 2 || got["key-c"].Denied != 3 {
		t.Fatalf("merged consumers %+v", m.Audit.Limits[0].WorstConsumers)
	}
}

// TestTokenSubjectsName: when only a token names the consumer, the result
// and the audit name each by the claim that holds {consumer}, sub first.
func TestTokenSubjectsName(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	defer srv.Close()
	for _, tc := range []struct {
		claims []bench.JWTClaim
		want   []string // nil: consumer-0 …
	}{
		{[]bench.JWTClaim{{Name: "iss", Value: "team-{consumer}"}, {Name: "sub", Value: "user-{consumer}"}}, []string{"user-consumer-0", "user-consumer-1"}},
		{[]bench.JWTClaim{{Name: "iss", Value: "team-{consumer}"}}, []string{"team-consumer-0", "team-consumer-1"}},
		{[]bench.JWTClaim{{Name: "sub", Value: "{consumer}"}}, nil},
	} {
		res, err := bench.RunHTTP(context.Background(), bench.HTTPConfig{Target: srv.URL, Header: http.Header{"Authorization": {"Bearer {jwt}"}},
			JWTSecret: []byte("s"), JWTClaims: tc.claims, Consumers: 2, Connections: 1, Requests: 4, ExpectLimit: 10, ExpectWindow: time.Second,
			NoProbes: true})
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(res.Config.Identities, tc.want) || (tc.want != nil && !slices.Contains(tc.want, res.Audit.Limits[0].WorstConsumer)) {
			t.Fatalf("%+v: identities %q, worst %q; want %q", tc.claims, res.Config.Identities, res.Audit.Limits[0].WorstConsumer, tc.want)
		}
	}
}

// pseudonym is an identity's pseudonym as docs/bench.md says to compute
// it: HMAC-SHA256 keyed by the SHA-256 of every identity, sorted, each
// followed by a line feed; "id-" and its first 8 bytes in hex.
func pseudonym(ids []string, id string) string {
	sorted := slices.Clone(ids)
	slices.Sort(sorted)
	key := sha256.Sum256([]byte(strings.Join(sorted, "\n") + "\n"))
	m := hmac.New(sha256.New, key[:])
	m.Write([]byte(id))
	return "id-" + hex.EncodeToString(m.Sum(nil)[:8])
}

// TestIdentitiesHiddenByPseudonyms: identities read from a file may be
// secrets: unless shown, the result holds none of them, not in
// config.identities, the audit's names nor the counter keys of an audit by
// rules, but each one's pseudonym, the same in every shard of the run, so
// that the shards merge and line up (a shard that sent one consumer is
// given no hint that its consumers met one counter, which would quote
// its key). Shown, they are the identities.
func TestIdentitiesHiddenByPseudonyms(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	seen := map[string]int{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		key := r.Header.Get("X-Api-Key")
		if seen[key]++; seen[key] > 2 {
			w.WriteHeader(http.StatusTooManyRequests)
		}
	}))
	defer srv.Close()
	set, err := rules.Parse("rules.yaml", []byte("domain: api\ndescriptors:\n  - key: header:X-Api-Key\n"+
		"    rate_limit: {name: per-key, unit: hour, requests_per_unit: 2}\n"), rules.ForGateway())
	if err != nil {
		t.Fatal(err)
	}
	ids := []string{"ak_live_3f9a1c", "ak_live_77be02", "ak_live_c41d5e"}
	run := func(show bool, shard, shards int) bench.Result {
		t.Helper()
		res, err := bench.RunHTTP(context.Background(), bench.HTTPConfig{Target: srv.URL, Header: http.Header{"X-Api-Key": {"{consumer}"}},
			Consumers: 3, Identities: ids, ShowIdentities: show, Connections: 2, Requests: 24, Shard: shard, Shards: shards,
			ExpectRules: set, NoProbes: true})
		if err != nil {
			t.Fatal(err)
		}
		b, err := json.Marshal(res)
		if err != nil {
			t.Fatal(err)
		}
		for _, id := range ids {
			if strings.Contains(string(b), id) != show {
				t.Fatalf("shown %v: the result holds %s: %v\n%s", show, id, !show, b)
			}
		}
		var back bench.Result
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatal(err)
		}
		return back
	}
	want := make([]string, len(ids))
	for i, id := range ids {
		want[i] = pseudonym(ids, id)
	}
	shards := []bench.Result{run(false, 0, 2), run(false, 1, 2)}
	for _, r := range shards {
		if !slices.Equal(r.Config.Identities, want) || !strings.HasPrefix(r.Config.Pseudonyms, "hmac-sha256:") ||
			r.Config.Pseudonyms != shards[0].Config.Pseudonyms {
			t.Fatalf("identities %q (%s), want the pseudonyms %q", r.Config.Identities, r.Config.Pseudonyms, want)
		}
		for _, w := range r.Audit.Limits[0].WorstConsumers {
			if !slices.Contains(want, w.Consumer) {
				t.Fatalf("the audit names %q, not a pseudonym", w.Consumer)
			}
		}
		// Shard 1 sent one consumer, whose key every request it sent
		// alike: no hint that the consumers met per-key on one counter.
		if len(r.AuditHints) != 0 {
			t.Fatalf("hints %q", r.AuditHints)
		}
	}
	m, err := bench.Merge(shards, 0)
	if err != nil {
		t.Fatal(err)
	}
	l := m.Audit.Limits[0]
	if !slices.Equal(m.Config.Identities, want) || m.Config.Pseudonyms != shards[0].Config.Pseudonyms || m.Audit.Verdict != audit.Held ||
		l.Admitted != 6 || len(l.WorstConsumers) != 3 {
		t.Fatalf("merged: identities %q (%s), audit %+v; want the pseudonyms, each consumer's 2 admitted", m.Config.Identities,
			m.Config.Pseudonyms, m.Audit)
	}
	shown := run(true, 0, 1)
	if !slices.Equal(shown.Config.Identities, ids) || shown.Config.Pseudonyms != "" || !slices.Contains(ids, shown.Audit.Limits[0].WorstConsumers[0].Consumer) {
		t.Fatalf("shown: identities %q (%q), audit %+v", shown.Config.Identities, shown.Config.Pseudonyms, shown.Audit)
	}
	if _, err := bench.Merge([]bench.Result{shards[0], run(true, 1, 2)}, 0); err == nil || !strings.Contains(err.Error(), "--show-identities") {
		t.Fatalf("a shard shown and one hidden merged: %v", err)
	}
}
