package race_test

import (
	"bufio"
	"context"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/ratelab/ratelab/internal/redisrun/redistest"
	"github.com/ratelab/ratelab/race"
)

// BenchmarkReleaseSpread reports the p50 release spread of 100 goroutines:
// through the harness with the lua limiter, and, as the machine's floor,
// with each goroutine sending a raw PING on its own pre-opened socket.
func BenchmarkReleaseSpread(b *testing.B) {
	redistest.Client(b, srv)
	const n = 100
	b.Run("raw-ping", func(b *testing.B) {
		conns := make([]net.Conn, n)
		for i := range conns {
			c, err := net.DialTimeout("tcp", srv.Addr, 2*time.Second)
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			conns[i] = c
		}
		var spreads []int64
		for b.Loop() {
			first := make([]time.Time, n)
			var ready, done sync.WaitGroup
			ready.Add(n)
			done.Add(n)
			release := make(chan struct{})
			for i, c := range conns {
				go func() {
					defer done.Done()
					ready.Done()
					<-release
					first[i] = time.Now()
					_ = c.SetDeadline(time.Now().Add(5 * time.Second))
					_, _ = c.Write([]byte("PING\r\n"))
					_, _ = bufio.NewReader(c).ReadString('\n')
				}()
			}
			ready.Wait()
			close(release)
			done.Wait()
			slices.SortFunc(first, func(a, b time.Time) int { return a.Compare(b) })
			spreads = append(spreads, first[n-1].Sub(first[0]).Microseconds())
		}
		slices.Sort(spreads)
		b.ReportMetric(float64(spreads[(len(spreads)-1)/2]), "spread-p50-µs")
	})
	b.Run("harness-lua", func(b *testing.B) {
		cfg := config(b, srv.Addr, "lua")
		cfg.Trials = 20
		var spreads []int64
		for b.Loop() {
			rep, err := race.Run(context.Background(), cfg)
			if err != nil {
				b.Fatal(err)
			}
			spreads = append(spreads, rep.Results[0].ReleaseSpreadMicros.P50)
		}
		slices.Sort(spreads)
		b.ReportMetric(float64(spreads[(len(spreads)-1)/2]), "spread-p50-µs")
	})
}
