package envoyref

import (
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ratelab/ratelab/internal/redisrun/redistest"
)

// Module is the version of envoyproxy/ratelimit whose configuration tests
// (test/config: its fixtures and config_test.go) ratelab's tests hold it
// to, the version docs/envoy.md names.
const Module = "github.com/envoyproxy/ratelimit@v1.4.1-0.20260122083618-3fb702589d36"

// Fixtures is the directory of Module's test/config, which the go command
// downloads into the module cache (or finds there). Without it the test is
// skipped, and under CI it fails.
func Fixtures(t testing.TB) string {
	t.Helper()
	out, err := exec.Command("go", "mod", "download", "-json", Module).Output()
	var mod struct{ Dir, Error string }
	if jerr := json.Unmarshal(out, &mod); err == nil && (jerr != nil || mod.Dir == "") {
		err = fmt.Errorf("no module directory in %q", out)
	}
	if err != nil {
		why := mod.Error
		if ee, ok := err.(*exec.ExitError); ok && why == "" {
			why = strings.TrimSpace(string(ee.Stderr))
		}
		msg := fmt.Sprintf("envoyproxy/ratelimit's fixtures: go mod download %s: %v: %s", Module, err, why)
		if redistest.InCI() {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return filepath.Join(mod.Dir, "test", "config")
}
