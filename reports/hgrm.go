package reports

import (
	"io"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// HGRM writes a latency histogram kept in µs in HdrHistogram's percentile
// format, in milliseconds, as HdrHistogram's plotter reads it.
func HGRM(w io.Writer, h *hdrhistogram.Histogram) error {
	_, err := h.PercentilesPrint(w, 5, 1000)
	return err
}
