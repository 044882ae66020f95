package race

import (
	"bufio"
	"net"
	"strings"
	"testing"
)

// TestMonitorSkipsOthersLongLines: another client's command longer than a
// monitor line may be (a 2 MB SET, cut at monitorLineMax, its quote left
// open) is passed over, and the trace of the traced clients is read whole.
func TestMonitorSkipsOthersLongLines(t *testing.T) {
	lines := []string{
		`+1700000000.000001 [0 127.0.0.1:7000] "echo" "start"`,
		`+1700000000.000002 [0 127.0.0.1:9000] "set" "big" "` + strings.Repeat("x", 2<<20) + `"`,
		`+1700000000.000003 [0 127.0.0.1:7001] "get" "k"`,
		`+1700000000.000004 [0 127.0.0.1:7000] "echo" "end"`,
	}
	ours, theirs := net.Pipe()
	defer ours.Close()
	defer theirs.Close()
	m := &monitorConn{conn: ours, rd: bufio.NewReaderSize(strings.NewReader(strings.Join(lines, "\r\n")+"\r\n"), 64<<10)}
	capt, err := m.read("start", "end", map[string]int{"127.0.0.1:7001": 0}, 100)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, l := range capt.lines {
		got = append(got, l.addr+" "+strings.Join(l.args, " "))
	}
	if !strings.Contains(strings.Join(got, "|"), "127.0.0.1:7001 get k") {
		t.Fatalf("captured %q, want the traced client's GET", got)
	}

	// A line of a traced client that cannot be read is an error.
	lines[2] = `+1700000000.000003 [0 127.0.0.1:7001] "get" "k`
	m = &monitorConn{conn: ours, rd: bufio.NewReader(strings.NewReader(strings.Join(lines, "\r\n") + "\r\n"))}
	if _, err := m.read("start", "end", map[string]int{"127.0.0.1:7001": 0}, 100); err == nil {
		t.Fatal("a traced client's unreadable line was passed over")
	}
}
