package main

import (
	"fmt"
	"io"
	"os"

	"github.com/mattn/go-isatty"

	"github.com/ratelab/ratelab/reports"
)

// ioStreams is where every command writes, and how, decided once.
type ioStreams struct {
	out, err io.Writer
	// color is set when out is a terminal and NO_COLOR is not.
	color bool
	// live is set when err is a terminal: live lines are drawn there.
	live bool
	// getenv reads the environment (REDIS_URL).
	getenv func(string) string
}

func newIOStreams(out, err io.Writer, getenv func(string) string) *ioStreams {
	return &ioStreams{out: out, err: err, color: isTerminal(out) && getenv("NO_COLOR") == "", live: isTerminal(err), getenv: getenv}
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && (isatty.IsTerminal(f.Fd()) || isatty.IsCygwinTerminal(f.Fd()))
}

// render is how reports render on out.
func (s *ioStreams) render() reports.Options { return reports.Options{Color: s.color} }

// status redraws the live line on a terminal; elsewhere it does nothing.
func (s *ioStreams) status(format string, a ...any) {
	if s.live {
		fmt.Fprintf(s.err, "\r\033[K"+format, a...)
	}
}

// clearStatus erases the live line.
func (s *ioStreams) clearStatus() {
	if s.live {
		fmt.Fprint(s.err, "\r\033[K")
	}
}

// notef writes one line for the user on err.
func (s *ioStreams) notef(format string, a ...any) {
	fmt.Fprintf(s.err, "ratelab: "+format+"\n", a...)
}
