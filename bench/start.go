package bench

import (
	"time"

	"github.com/ratelab/ratelab/internal/field"
)

// StartMargin is how far ahead of now NextStart's instant is, at least:
// time for every shard to set up its connections before it begins.
const StartMargin = 15 * time.Second

// NextStart is the instant every shard of a run can compute alike, with no
// time agreed on beforehand: the first multiple of every on the UTC clock
// that is at least StartMargin after now. With every = 1m it is the next
// whole minute at least 15 s away; shards that compute it within the same
// minute's window get the same instant. every must be between 1s and 1h:
// the error, a *field.Error, names Every.
func NextStart(now time.Time, every time.Duration) (time.Time, error) {
	if every < time.Second || every > time.Hour {
		return time.Time{}, field.Errorf("Every", "must be between 1s and 1h (got %s)", every)
	}
	earliest := now.Add(StartMargin)
	start := earliest.Truncate(every)
	if start.Before(earliest) {
		start = start.Add(every)
	}
	return start.UTC(), nil
}
