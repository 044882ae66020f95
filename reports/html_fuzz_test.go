package reports_test

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ratelab/ratelab/reports"
)

// FuzzHTML adds a saved result of any kind to a page, as report html reads
// one, from any bytes and under any file name, and draws the page: a
// result that does not decode is an error, and one that does is drawn
// without a panic, into a page whose text cannot open a script.
func FuzzHTML(f *testing.F) {
	goldens, _ := filepath.Glob(filepath.Join("testdata", "*.json.golden"))
	for _, g := range goldens {
		if data, err := os.ReadFile(g); err == nil {
			f.Add(filepath.Base(g), data)
		}
	}
	f.Add("bench.json", []byte(`{"command":"bench_http","target":"http://h/","config":{"consumers":2},
		"timeline":{"interval_ms":1000,"intervals":[{"start_ms":0,"requests":3,"throughput_rps":3,"status":{"2xx":2,"429":1},
		"latency_us":{"p50":900,"p99":1500,"max":1500}}]},
		"audit":{"limit":2,"window_ms":1000,"worst_consumer":"consumer-0"},
		"audit_samples":{"encoding":"ratelab-samples-v1","count":3,"data":"AOgHsAnIAQADAgIA4KcSsAnIAQADAQIBiCeEB60D6QcDAQI="}}`))
	f.Add(`</h2><script>alert(1)</script>`, []byte(`{"command":"skew","rows":[{"algorithm":"<script>"}]}`))
	f.Add("a.json", []byte(`{"command":"compare","config":{"window_ms":0,"limit":-1}}`))
	f.Add("a.json", []byte(`{"command":"race","trials":[{}],"config":{"limit":9223372036854775807}}`))
	f.Add("a.json", []byte(`{"command":"drill"}`))
	f.Add("a.json", []byte(`{"command":"nope"}`))
	f.Fuzz(func(t *testing.T, name string, data []byte) {
		var p reports.Page
		if err := p.Add(name, data); err != nil {
			return
		}
		var out bytes.Buffer
		if err := reports.HTML(&out, p); err != nil {
			t.Fatalf("%v", err)
		}
		if strings.Contains(strings.ToLower(out.String()), "<script") {
			t.Fatalf("the page opens a script")
		}
	})
}
