package main

import (
	"errors"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/ratelab/ratelab/bench"
	"github.com/ratelab/ratelab/internal/field"
)

// Small flag types and helpers that bench http and bench rls share.

// optionalFloat is a float flag that sets *p when given and leaves it nil
// when not, for a threshold that is off unless asked for.
type optionalFloat struct{ p **float64 }

func (o optionalFloat) String() string {
	if o.p == nil || *o.p == nil {
		return ""
	}
	return strconv.FormatFloat(**o.p, 'g', -1, 64)
}

func (o optionalFloat) Set(s string) error {
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return err
	}
	*o.p = &v
	return nil
}

func (o optionalFloat) Type() string { return "float" }

// crossed is the threshold error (exit 3) of the thresholds a run crossed.
func crossed(errs []*field.Error) error {
	if len(errs) == 0 {
		return nil
	}
	msgs := make([]string, len(errs))
	for i, e := range errs {
		msgs[i] = e.Render(func(f string) string { return benchNames[f] })
	}
	return &thresholdError{strings.Join(msgs, "; ")}
}

// writeFile creates path and writes it with write.
func writeFile(path string, write func(*os.File) error) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := write(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// parseStartAt reads --start-at: an RFC 3339 time, or next:D, which every
// shard computes alike from now (bench.NextStart).
func parseStartAt(s string, now time.Time) (time.Time, error) {
	const forms = "want an RFC 3339 time, such as 2026-12-02T18:00:00Z, or next:D, the next multiple of D (1s to 1h) " +
		"on the UTC clock at least 15s ahead, such as next:1m"
	every, ok := strings.CutPrefix(s, "next:")
	if !ok {
		t, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			return t, usagef("--start-at %q: %s", s, forms)
		}
		return t, nil
	}
	d, err := time.ParseDuration(every)
	if err != nil {
		return time.Time{}, usagef("--start-at %q: D is not a duration; %s", s, forms)
	}
	t, err := bench.NextStart(now, d)
	var fe *field.Error
	if errors.As(err, &fe) {
		return t, usagef("--start-at %q: %s; %s", s, fe.Render(func(string) string { return "D" }), forms)
	}
	return t, err
}
