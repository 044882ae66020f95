package pemfile

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ratelab/ratelab/internal/redisrun/redistest"
)

// TestFiles: good files read; a missing file, one with no PEM, and a key
// that is not the certificate's are errors naming the file.
func TestFiles(t *testing.T) {
	f := redistest.TLSFiles(t)
	if _, err := CertPool(f.CAFile); err != nil {
		t.Fatal(err)
	}
	if _, err := KeyPair(f.CertFile, f.KeyFile); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	junk := filepath.Join(dir, "junk.pem")
	if err := os.WriteFile(junk, []byte("not a certificate\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	other := redistest.TLSFiles(t)
	missing := filepath.Join(dir, "none.pem")
	for _, tc := range []struct {
		name string
		err  error
		want string
	}{
		{"missing CA", second(CertPool(missing)), missing},
		{"junk CA", second(CertPool(junk)), junk + " holds no PEM certificate"},
		{"missing key", second(KeyPair(f.CertFile, missing)), missing},
		{"junk certificate", second(KeyPair(junk, f.KeyFile)), junk},
		{"another's key", second(KeyPair(f.CertFile, other.KeyFile)), other.KeyFile},
	} {
		if tc.err == nil || !strings.Contains(tc.err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error naming %q", tc.name, tc.err, tc.want)
		}
	}
}

func second[T any](_ T, err error) error { return err }
