package main

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// TestReadmeListsEverything: the README names every command that --help
// lists (each by its full path: `ratelab bench rls`) and links every page
// of docs/.
func TestReadmeListsEverything(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	readme := string(b)
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		for _, s := range c.Commands() {
			switch {
			case !s.IsAvailableCommand() || s.Name() == "help":
			case s.HasAvailableSubCommands() && s.Name() != "completion":
				walk(s)
			case !strings.Contains(readme, "`"+s.CommandPath()):
				t.Errorf("the README does not name `%s`", s.CommandPath())
			}
		}
	}
	walk(newRootCmd(newIOStreams(io.Discard, io.Discard, noRedisURL)))
	pages, err := filepath.Glob(filepath.Join("..", "..", "docs", "*.md"))
	if err != nil || len(pages) == 0 {
		t.Fatalf("no docs: %v", err)
	}
	for _, p := range pages {
		if link := "](docs/" + filepath.Base(p) + ")"; !strings.Contains(readme, link) {
			t.Errorf("the README does not link docs/%s", filepath.Base(p))
		}
	}
}
