package main

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

// TestBenchIdentityRefusals: each way of naming consumers that cannot be
// sent as asked is refused before anything is sent, exit 2, naming the
// flag (or the URL) that holds the mistake.
func TestBenchIdentityRefusals(t *testing.T) {
	t.Parallel()
	var sent atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { sent.Add(1) }))
	defer srv.Close()
	dir := t.TempDir()
	file := func(name, text string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	keys := file("keys", "key-a\nkey-b\n# retired\nkey-c\n")
	repeated := file("repeated", "key-a\nkey-b\nkey-a\n")
	url := srv.URL + "/"
	query := srv.URL + "/?apikey={consumer}"
	for _, tc := range []struct {
		name string
		args []string
		want string // in stderr
	}{
		{"consumer header not a token", []string{url, "--consumer-header", "Bad Header"}, `--consumer-header "Bad Header" is not a header name`},
		{"header name not a token", []string{url, "-H", "Bad Header: x"}, `--header "Bad Header" is not a header name`},
		{"second Authorization by --consumer-header", []string{url, "--consumer-header", "Authorization", "-H", "Authorization: Bearer x"},
			"--consumer-header Authorization would send a second Authorization beside --header's"},
		{"second Authorization by -H", []string{query, "--consumers", "3", "-H", "Authorization: a", "-H", "authorization: b"},
			"--header Authorization is given 2 times"},
		{"second Host", []string{url, "--consumer-header", "Host", "-H", "Host: example.com"}, "--consumer-header Host would send a second Host"},
		{"Content-Length", []string{url, "-X", "POST", "--body", "abc", "-H", "Content-Length: 3"}, "--header Content-Length is set from --body"},
		{"{consumer} with one consumer", []string{query}, "--consumers is 1: {consumer} in URL would send one identity"},
		{"{consumer} with --consumers 1", []string{url, "-H", "X-Key: {consumer}", "--consumers", "1"}, "--consumers is 1: {consumer} in --header"},
		{"{consumer} in the host", []string{"http://{consumer}.localhost/", "--consumers", "3"}, "{consumer} and {jwt} may stand in the URL's path or query"},
		{"{jwt} without a secret", []string{url, "-H", "Authorization: Bearer {jwt}"}, "--jwt-secret is needed to sign the {jwt} in --header"},
		{"secret without {jwt}", []string{url, "--jwt-secret", "s"}, "--jwt-secret signs the tokens sent where {jwt} stands, and none does"},
		{"claim without a secret", []string{url, "--jwt-claim", "sub={consumer}"}, "--jwt-claim needs --jwt-secret"},
		{"claim malformed", []string{url, "--jwt-claim", "sub"}, `--jwt-claim "sub": want NAME=VALUE`},
		{"one token for all", []string{url, "-H", "Authorization: Bearer {jwt}", "--jwt-secret", "s", "--jwt-claim", "sub=x", "--consumers", "3"},
			"--jwt-claim must hold {consumer}"},
		{"unknown placeholder in the URL", []string{srv.URL + "/?k={key}"}, "unknown placeholder {key}"},
		{"unknown placeholder in a header", []string{url, "-H", "X-Key: {user}"}, `--header X-Key: "{user}": unknown placeholder {user}`},
		{"unknown placeholder in the body", []string{url, "--body", "{id}"}, "--body: unknown placeholder {id}"},
		{"unknown placeholder in a claim", []string{url, "--jwt-claim", "sub={user}"}, "--jwt-claim sub={user}: unknown placeholder {user}"},
		{"identities repeated", []string{query, "--consumers-from", repeated}, "--consumers-from " + repeated + ": line 3 repeats the identity of line 1"},
		{"identities and --consumers", []string{query, "--consumers-from", keys, "--consumers", "5"},
			"--consumers 5 conflicts with --consumers-from, which holds 3 identities"},
		{"no identities file", []string{query, "--consumers-from", filepath.Join(dir, "none")}, "--consumers-from: open "},
		{"identities shown, none given", []string{url, "--consumers", "3", "--show-identities"},
			"--show-identities shows the identities of --consumers-from, which is not given"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, stdout, stderr := ratelab(t, append([]string{"bench", "http", "--requests", "5", "--rate", "0"}, tc.args...)...)
			if code != exitUsage || !strings.Contains(stderr, tc.want) || stdout != "" {
				t.Fatalf("exit %d, stderr %q, stdout %q; want 2 and %q", code, stderr, stdout, tc.want)
			}
			if n := sent.Load(); n != 0 {
				t.Fatalf("refused, yet %d requests were sent", n)
			}
		})
	}
}

// TestBenchIdentityFlags: --consumers-from sends its identities where
// {consumer} stands and sets the number of consumers (an equal --consumers
// is fine); the default X-Consumer-Id is left out when the request names
// its consumer elsewhere, and sent when --consumer-header is given.
func TestBenchIdentityFlags(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	keys, headers := map[string]int{}, map[string]int{}
	srv := httptest.NewServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		keys[r.URL.Query().Get("apikey")]++
		headers[r.Header.Get("X-Consumer-Id")]++
	}))
	defer srv.Close()
	path := filepath.Join(t.TempDir(), "keys")
	if err := os.WriteFile(path, []byte("# staging\nkey-a\n\nkey-b\nkey-c\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	query := srv.URL + "/?apikey={consumer}"
	for _, tc := range []struct {
		name    string
		args    []string
		keys    int    // distinct apikeys seen
		header  string // the X-Consumer-Id of the first consumer, "" for none
		summary string
	}{
		{"from a file", []string{"--consumers-from", path}, 3, "", "3 consumers in URL"},
		{"from a file, as many consumers", []string{"--consumers-from", path, "--consumers", "3"}, 3, "", "3 consumers in URL"},
		{"numbered", []string{"--consumers", "4"}, 4, "", "4 consumers in URL"},
		{"with the header asked for", []string{"--consumers-from", path, "--consumer-header", "X-Consumer-Id"}, 3, "key-a",
			"3 consumers in URL, X-Consumer-Id"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mu.Lock()
			clear(keys)
			clear(headers)
			mu.Unlock()
			code, stdout, stderr := ratelab(t, append([]string{"bench", "http", query, "--requests", "12", "--rate", "0", "--connections", "2"},
				tc.args...)...)
			mu.Lock()
			defer mu.Unlock()
			if code != exitOK || len(keys) != tc.keys || keys[""] != 0 || !strings.Contains(stdout, tc.summary) {
				t.Fatalf("exit %d (%s): keys %v; want %d\n%s", code, stderr, keys, tc.keys, stdout)
			}
			if _, ok := headers[tc.header]; !ok || (tc.header == "" && len(headers) != 1) {
				t.Fatalf("X-Consumer-Id sent %v, want %q", headers, tc.header)
			}
		})
	}
}
