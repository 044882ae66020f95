package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
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
	// report is out when it is a file (--out).
	report *reportFile
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

// reportTo makes path (--out) the report's stream instead of out, without
// colour. The file is created (or emptied) by the report's first write, so
// that a command refused before it leaves none, and an earlier report
// stands; a path that cannot be written is refused now, before anything is
// sent.
func (s *ioStreams) reportTo(path string) error {
	if err := checkWritable(path); err != nil {
		return usagef("--out: %w", err)
	}
	s.report = &reportFile{path: path}
	s.out, s.color = s.report, false
	return nil
}

// closeReport closes the report's file, if there is one.
func (s *ioStreams) closeReport() error {
	if s.report == nil || s.report.f == nil {
		return nil
	}
	if err := s.report.f.Close(); err != nil {
		return fmt.Errorf("--out: %w", err)
	}
	return nil
}

// checkWritable fails when path cannot be opened for writing; it leaves
// the file as it was, and no new one.
func checkWritable(path string) error {
	_, statErr := os.Stat(path)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE, 0o666)
	if err != nil {
		return err
	}
	f.Close()
	if errors.Is(statErr, fs.ErrNotExist) {
		return os.Remove(path)
	}
	return nil
}

// reportFile is a file created at its first write.
type reportFile struct {
	path string
	f    *os.File
	err  error
}

func (r *reportFile) Write(p []byte) (int, error) {
	if r.f == nil && r.err == nil {
		if r.f, r.err = os.Create(r.path); r.err != nil {
			r.err = fmt.Errorf("--out: %w", r.err)
		}
	}
	if r.err != nil {
		return 0, r.err
	}
	return r.f.Write(p)
}
