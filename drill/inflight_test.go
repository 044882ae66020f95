package drill_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ratelab/ratelab/drill"
	"github.com/ratelab/ratelab/edge"
	"github.com/ratelab/ratelab/internal/field"
)

// TestInFlightDrill kills each engine's gateway while it holds slots: the
// leases come back within their TTL and nothing is left at the end; the
// counter semaphore keeps every slot the dead gateway held, to the end.
func TestInFlightDrill(t *testing.T) {
	for _, engine := range []string{edge.EngineGo, edge.EngineOpenResty} {
		t.Run(engine, func(t *testing.T) {
			need(t, engine, "")
			cfg := drill.InFlightConfig{Engines: []string{engine}, InFlight: 3, Lease: time.Second, Hold: 200 * time.Millisecond,
				Consumers: 2, Steady: 500 * time.Millisecond, Watch: 3 * time.Second}
			rep, err := drill.RunInFlight(context.Background(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			want := map[string]bool{drill.KindLease: true}
			if engine == edge.EngineGo {
				want[drill.KindCounter] = true
			}
			if len(rep.Results) != len(want) {
				t.Fatalf("%d rows, want %d: %+v", len(rep.Results), len(want), rep.Results)
			}
			for _, r := range rep.Results {
				t.Logf("%s: %+v", r.Name(), r)
				if !want[r.Kind] || r.Engine != engine {
					t.Fatalf("row %s: not asked for", r.Name())
				}
				// The load keeps every slot of every consumer asked for: a
				// kill always finds some held.
				if r.HeldAtKill < 1 || r.HeldAtKill > 2*3 {
					t.Errorf("%s: %d held at the kill, want 1 to 6", r.Name(), r.HeldAtKill)
				}
				switch r.Kind {
				case drill.KindLease:
					// Every dead lease ends at most a lease after the kill;
					// the watch (3s) leaves room on a loaded machine, and
					// the verdict is Redis's, not a timer's.
					if r.RecoverMillis == nil || r.LeakedAtEnd != 0 {
						t.Errorf("%s: recover %v, %d leaked at the end; want recovered and none leaked", r.Name(), r.RecoverMillis, r.LeakedAtEnd)
					}
					if r.Admitted == 0 {
						t.Errorf("%s: the restarted gateway admitted nothing", r.Name())
					}
				case drill.KindCounter:
					if r.RecoverMillis != nil || r.LeakedAtEnd != r.HeldAtKill {
						t.Errorf("%s: recover %v, %d leaked at the end of %d held; want every slot leaked, never recovered",
							r.Name(), r.RecoverMillis, r.LeakedAtEnd, r.HeldAtKill)
					}
				}
			}
			if got := rep.Leaked(); engine == edge.EngineGo && len(got) != 1 {
				t.Errorf("Leaked() = %v, want the counter alone", got)
			}
		})
	}
}

func TestInFlightDrillRefusesBadConfig(t *testing.T) {
	for _, tc := range []struct {
		cfg   drill.InFlightConfig
		field string
	}{
		{drill.InFlightConfig{Engines: []string{drill.EngineRLS}}, "Engines"},
		{drill.InFlightConfig{InFlight: -1}, "InFlight"},
		{drill.InFlightConfig{Lease: 10 * time.Millisecond}, "Lease"},
		{drill.InFlightConfig{Lease: time.Second, Hold: time.Second}, "Hold"},
		{drill.InFlightConfig{Consumers: 5000}, "Consumers"},
		{drill.InFlightConfig{Watch: time.Hour}, "Watch"},
	} {
		_, err := drill.RunInFlight(context.Background(), tc.cfg)
		var fe *field.Error
		if !errors.As(err, &fe) || fe.Field != tc.field {
			t.Errorf("%+v: %v, want a field error naming %s", tc.cfg, err, tc.field)
		}
	}
}
