package monitor_test

import (
	"bufio"
	"context"
	"net"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ratelab/ratelab/internal/monitor"
	"github.com/ratelab/ratelab/internal/redisrun"
	"github.com/ratelab/ratelab/internal/redisrun/redistest"
)

var srv *redisrun.Server

func TestMain(m *testing.M) { os.Exit(redistest.Main(m, &srv)) }

// TestEveryByte: a real server's MONITOR quotes an argument holding every
// byte exactly as Quote does, and Parse reads it back.
func TestEveryByte(t *testing.T) {
	c := redistest.Client(t, srv)
	conn, err := net.DialTimeout("tcp", srv.Addr, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	rd := bufio.NewReader(conn)
	if _, err := conn.Write([]byte("MONITOR\r\n")); err != nil {
		t.Fatal(err)
	}
	if ok, err := rd.ReadString('\n'); ok != "+OK\r\n" {
		t.Fatalf("MONITOR answered %q (%v)", ok, err)
	}
	var b strings.Builder
	for i := range 256 {
		b.WriteByte(byte(i))
	}
	every := b.String()
	marker := redistest.Prefix(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.Echo(ctx, marker+every).Err(); err != nil {
		t.Fatal(err)
	}
	var line string
	for !strings.Contains(line, marker) {
		if line, err = rd.ReadString('\n'); err != nil {
			t.Fatalf("the monitor did not show the ECHO: %v", err)
		}
	}
	if want := `"echo" ` + monitor.Quote(marker+every); !strings.HasSuffix(strings.TrimRight(line, "\r\n"), want) {
		t.Fatalf("the server wrote\n%s\nwhere Quote writes\n%s", line, want)
	}
	l, err := monitor.Parse(line)
	if err != nil || !slices.Equal(l.Args, []string{"echo", marker + every}) || l.Addr == "" {
		t.Fatalf("Parse(%q) = %+v, %v", line, l, err)
	}
}
