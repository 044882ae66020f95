package bench

import (
	"encoding/json"
	"testing"

	"github.com/ratelab/ratelab/audit"
)

// report html draws a saved run's admissions per window from its audit:
// an audit of no limit (window 0, as a hand-edited or foreign file may say)
// is an error, not a division by zero in the guarantee.
func TestRollingAdmissionsOfNoLimit(t *testing.T) {
	for _, bad := range []audit.LimitAudit{{Limit: 0, WindowMillis: 0}, {Limit: 5, WindowMillis: -1000}, {Limit: 5, WindowMillis: 1 << 62}} {
		var r Result
		if err := json.Unmarshal(fuzzRun(1767225600000, 200, 429), &r); err != nil {
			t.Fatal(err)
		}
		r.Audit.Limits = []audit.LimitAudit{bad}
		if w, err := r.RollingAdmissions(4); err == nil {
			t.Errorf("audit %d per %d ms: %+v", bad.Limit, bad.WindowMillis, w)
		}
	}
}
