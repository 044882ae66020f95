package redistest_test

import (
	"context"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/ratelab/ratelab/internal/redisrun"
	"github.com/ratelab/ratelab/internal/redisrun/redistest"
)

var srv *redisrun.Server

func TestMain(m *testing.M) { os.Exit(redistest.Main(m, &srv)) }

// TestMonitorFind: the monitor gives a command's arguments back as they
// were sent, whatever bytes they hold.
func TestMonitorFind(t *testing.T) {
	c := redistest.Client(t, srv)
	mon := redistest.NewMonitor(t, srv)
	key := redistest.Prefix(t)
	value := "a\nb\rc\td\ae\bf\"g\\h\x00i\x7fj\xffk l"
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.Set(ctx, key, value, time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	got := mon.Find(t, 5*time.Second, func(args []string) bool { return args[0] == "set" && len(args) > 1 && args[1] == key })
	if want := []string{"set", key, value, "ex", "60"}; !slices.Equal(got, want) {
		t.Fatalf("the monitor saw %q, want %q", got, want)
	}
}
