// Package reports renders what ratelab measured: a terminal table (lipgloss),
// markdown and JSON. It only renders; it never talks to Redis or the network.
package reports

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/charmbracelet/lipgloss"
	"github.com/muesli/termenv"
)

// Format is an output format.
type Format string

const (
	// Table is a terminal table, coloured when Options.Color is set.
	Table Format = "table"
	// Markdown is a GitHub-flavoured markdown table.
	Markdown Format = "markdown"
	// JSON is the result as indented JSON with snake_case fields.
	JSON Format = "json"
)

// ParseFormat parses "table", "markdown" or "json".
func ParseFormat(s string) (Format, error) {
	switch f := Format(s); f {
	case Table, Markdown, JSON:
		return f, nil
	}
	return "", fmt.Errorf("unknown output %q (want table, markdown or json)", s)
}

// Options tune rendering.
type Options struct {
	// Color turns on colour in the terminal table, as far as the renderer's
	// colour profile goes.
	Color bool
	// Renderer is the renderer the terminal table's styles are built from
	// when Color is set; by default one for the writer, whose profile the
	// writer's terminal and the environment decide. One with a fixed
	// profile renders the same colours anywhere.
	Renderer *lipgloss.Renderer
}

// Styles are the terminal styles, built from one renderer.
type Styles struct {
	Title  lipgloss.Style // the report's name
	Header lipgloss.Style // table headers
	Cell   lipgloss.Style // an ordinary cell
	Good   lipgloss.Style // a limiter that held
	Bad    lipgloss.Style // a leak, a broken state
	Warn   lipgloss.Style // under-admission, aborted transactions
	Dim    lipgloss.Style // notes under the table
	Border lipgloss.Style // table borders
	Plain  lipgloss.Style // text with no style of its own
}

// NewStyles builds the styles for w, from opt.Renderer when colour is on
// and it is set; without colour every style is plain.
func NewStyles(w io.Writer, opt Options) Styles {
	r := opt.Renderer
	switch {
	case !opt.Color:
		r = lipgloss.NewRenderer(w)
		r.SetColorProfile(termenv.Ascii)
	case r == nil:
		r = lipgloss.NewRenderer(w)
	}
	cell := r.NewStyle().Padding(0, 1)
	return Styles{
		Plain:  r.NewStyle(),
		Title:  r.NewStyle().Bold(true),
		Header: cell.Bold(true),
		Cell:   cell,
		Good:   cell.Foreground(lipgloss.Color("2")),
		Bad:    cell.Foreground(lipgloss.Color("1")).Bold(true),
		Warn:   cell.Foreground(lipgloss.Color("3")),
		Dim:    r.NewStyle().Faint(true),
		Border: r.NewStyle().Foreground(lipgloss.Color("8")),
	}
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// micros renders a duration given in microseconds with its unit.
func micros(us int64) string {
	switch {
	case us < 1000:
		return fmt.Sprintf("%dµs", us)
	case us < 1_000_000:
		return trimZeros(fmt.Sprintf("%.2f", float64(us)/1e3)) + "ms"
	default:
		return trimZeros(fmt.Sprintf("%.2f", float64(us)/1e6)) + "s"
	}
}

func trimZeros(s string) string {
	if strings.Contains(s, ".") {
		s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	}
	return s
}

// serverName names a server by its version: "Redis 7.0.15", or the
// embedded server's own "miniredis v2.40.0".
func serverName(version string) string {
	if strings.HasPrefix(version, "miniredis") {
		return version
	}
	return "Redis " + version
}

// list joins names as "a, b and c".
func list(names []string) string {
	switch len(names) {
	case 0:
		return ""
	case 1:
		return names[0]
	}
	return strings.Join(names[:len(names)-1], ", ") + " and " + names[len(names)-1]
}

// escapeMarkdown keeps a cell from breaking a markdown table.
func escapeMarkdown(s string) string { return strings.ReplaceAll(s, "|", `\|`) }
