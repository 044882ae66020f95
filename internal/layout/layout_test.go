// Package layout holds the test of ratelab's import rules, as
// docs/architecture.md states them.
package layout

import (
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/ratelab/ratelab/"

// allowed lists, for each package, the project's packages it may import
// (a trailing / allows everything under it).
var allowed = map[string][]string{
	"algorithms":                  {"internal/field", "internal/noreplay"},
	"race":                        {"algorithms", "internal/"},
	"compare":                     {"algorithms", "race", "internal/"},
	"skew":                        {"algorithms", "internal/"},
	"audit":                       {"algorithms", "rules", "internal/"},
	"bench":                       {"algorithms", "rules", "audit", "internal/"},
	"limiter":                     {"algorithms", "rules", "internal/"},
	"edge":                        {"algorithms", "rules", "limiter", "internal/"},
	"rls":                         {"algorithms", "rules", "limiter", "internal/"},
	"rules":                       {"algorithms", "internal/edits"},
	"drill":                       {"algorithms", "bench", "edge", "rls", "limiter", "internal/"},
	"reports":                     {"race", "compare", "skew", "bench", "audit", "drill", "internal/hdr", "internal/plural", "internal/redisrun"},
	"internal/field":              {},
	"internal/edits":              {},
	"internal/hdr":                {},
	"internal/randid":             {},
	"internal/roundtrip":          {},
	"internal/monitor":            {},
	"internal/plural":             {},
	"internal/testwait":           {},
	"internal/batch":              {"internal/noreplay"},
	"internal/noreplay":           {},
	"internal/pemfile":            {},
	"internal/reload":             {},
	"internal/reload/reloadtest":  {},
	"internal/envoyref":           {"internal/testwait", "internal/redisrun/redistest"},
	"internal/redisrun":           {"internal/field"},
	"internal/redisrun/redistest": {"internal/"},
	"scripts/benchhttp":           {},
	"scripts/grpcfloor":           {},
	"scripts/image":               {},
}

// forbidden lists third-party imports a package must not make.
var forbidden = map[string][]string{
	"reports":    {"github.com/redis/go-redis", "net/http"},
	"algorithms": {"net/http", "github.com/spf13/cobra"},
	"rules":      {"net/http", "github.com/redis/go-redis", "github.com/spf13/cobra"},
	"audit":      {"github.com/redis/go-redis", "google.golang.org/grpc", "github.com/envoyproxy", "github.com/spf13/cobra"},
}

func TestImports(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || d.Name() == "docs") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		rel, _ := filepath.Rel(root, filepath.Dir(path))
		pkg := filepath.ToSlash(rel)
		if pkg == "cmd/ratelab" || pkg == "internal/layout" {
			return nil
		}
		rules, ok := allowed[pkg]
		if !ok {
			t.Errorf("%s: a package with no import rule: add it to docs/architecture.md and to this test", pkg)
			return nil
		}
		seen[pkg] = true
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		for _, imp := range f.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			for _, bad := range forbidden[pkg] {
				if p == bad || strings.HasPrefix(p, bad+"/") {
					t.Errorf("%s imports %s, which it must not", path, p)
				}
			}
			dep, ok := strings.CutPrefix(p, module)
			if !ok {
				continue
			}
			if dep == "cmd/ratelab" || !permitted(dep, rules) {
				t.Errorf("%s imports %s: %s may import only %v", path, dep, pkg, rules)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for pkg := range allowed {
		if _, err := os.Stat(filepath.Join(root, pkg)); err == nil && !seen[pkg] {
			t.Errorf("%s: no Go file read: the walk is broken", pkg)
		}
	}
}

func permitted(dep string, rules []string) bool {
	for _, r := range rules {
		if dep == r || (strings.HasSuffix(r, "/") && strings.HasPrefix(dep, r)) {
			return true
		}
	}
	return false
}
