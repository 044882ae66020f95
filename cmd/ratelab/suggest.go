package main

import (
	"errors"
	"fmt"
	"strings"

	"github.com/ratelab/ratelab/internal/edits"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// suggestionDistance is how far (in edits, case aside) a mistyped name may
// be from a name it is said to mean: cobra's SuggestionsMinimumDistance
// for commands.
const suggestionDistance = 2

// maxSuggestions bounds the names one mistake is answered with.
const maxSuggestions = 3

// flagParseError is the error of flags that do not parse: a usage error
// (exit 2), which for an unknown flag names the flags of c it most likely
// meant, as cobra does for a mistyped command.
func flagParseError(c *cobra.Command, err error) error {
	var unknown *pflag.NotExistError
	if errors.As(err, &unknown) {
		var meant []string
		if group := unknown.GetSpecifiedShortnames(); group == "" {
			meant = flagSuggestions(c, unknown.GetSpecifiedName())
		} else if name, _, _ := strings.Cut(group, "="); len(name) > 1 && c.Flags().Lookup(name) != nil {
			meant = []string{name} // -expect-limit: a long flag with one dash
		}
		if len(meant) > 0 {
			for i, m := range meant {
				meant[i] = "--" + m
			}
			err = fmt.Errorf("%w (did you mean %s?)", err, orList(meant))
		}
	}
	return &usageError{err}
}

// flagSuggestions are the flags of c, shown in its help, that typed most
// likely meant: the closest within suggestionDistance of it (case aside),
// else those it begins.
func flagSuggestions(c *cobra.Command, typed string) []string {
	typed = strings.ToLower(typed)
	best := suggestionDistance + 1
	var closest, prefixed []string
	c.Flags().VisitAll(func(f *pflag.Flag) {
		if f.Hidden || f.Deprecated != "" {
			return
		}
		name := strings.ToLower(f.Name)
		switch d := edits.Distance(typed, name); {
		case d < best:
			best, closest = d, []string{f.Name}
		case d == best:
			closest = append(closest, f.Name)
		case len(typed) >= 3 && strings.HasPrefix(name, typed):
			prefixed = append(prefixed, f.Name)
		}
	})
	if len(closest) == 0 {
		closest = prefixed
	}
	return closest[:min(len(closest), maxSuggestions)]
}

// commandSuggestions are the subcommands of c that typed most likely
// meant, as cobra finds them.
func commandSuggestions(c *cobra.Command, typed string) []string {
	if c.SuggestionsMinimumDistance <= 0 {
		c.SuggestionsMinimumDistance = suggestionDistance
	}
	s := c.SuggestionsFor(typed)
	return s[:min(len(s), maxSuggestions)]
}

// orList joins names as a sentence does: a, b or c.
func orList(names []string) string {
	if len(names) < 2 {
		return strings.Join(names, "")
	}
	return strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
}
