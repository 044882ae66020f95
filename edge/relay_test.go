package edge_test

import (
	"bytes"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratelab/ratelab/internal/testwait"
)

// relay passes TCP connections through to a server, and counts how often
// a byte string appears in what the clients send: a test can count the
// commands an engine sent for one key, whether or not the server answered.
type relay struct {
	ln     net.Listener
	target string
	needle []byte
	seen   atomic.Int64

	mu     sync.Mutex
	conns  []net.Conn
	closed bool
	wg     sync.WaitGroup
}

// startRelay relays a free loopback port to target until the test ends,
// counting needle in what clients send.
func startRelay(t *testing.T, target string, needle []byte) *relay {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &relay{ln: ln, target: target, needle: needle}
	r.wg.Add(1)
	go r.accept()
	t.Cleanup(r.close)
	return r
}

// Port is the port clients connect to.
func (r *relay) Port() int { return r.ln.Addr().(*net.TCPAddr).Port }

// Seen is how often the needle has been sent so far.
func (r *relay) Seen() int64 { return r.seen.Load() }

// waitSeen waits until the needle has been sent at least n times, for at
// most 10 seconds (the relay reads what a client sent a moment after it
// was sent), and returns the count.
func (r *relay) waitSeen(t *testing.T, n int64) int64 {
	t.Helper()
	testwait.Eventually(t, 10*time.Second, func() (bool, string) {
		seen := r.Seen()
		return seen >= n, fmt.Sprintf("the relay saw the needle %d times, want %d or more", seen, n)
	})
	return r.Seen()
}

func (r *relay) accept() {
	defer r.wg.Done()
	for {
		c, err := r.ln.Accept()
		if err != nil {
			return // closed
		}
		s, err := net.DialTimeout("tcp", r.target, 5*time.Second)
		if err != nil {
			c.Close()
			continue
		}
		if !r.track(c, s) {
			return
		}
		r.wg.Add(2)
		go r.pipe(s, c, true)
		go r.pipe(c, s, false)
	}
}

// track keeps c and s to close at the end; false once the relay is closed.
func (r *relay) track(c, s net.Conn) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		c.Close()
		s.Close()
		return false
	}
	r.conns = append(r.conns, c, s)
	return true
}

// pipe copies from src to dst until either ends, counting the needle in
// what clients send; then it closes both, so the other direction ends too.
func (r *relay) pipe(dst, src net.Conn, count bool) {
	defer r.wg.Done()
	defer dst.Close()
	defer src.Close()
	buf := make([]byte, 32<<10)
	var tail []byte // the end of what came before, for a needle cut in two
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if count {
				data := append(tail, buf[:n]...)
				r.seen.Add(int64(bytes.Count(data, r.needle)))
				// Keep fewer bytes than the needle: one counted is never counted again.
				tail = bytes.Clone(data[max(len(data)-len(r.needle)+1, 0):])
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return // the client or the server closed, or the relay did
		}
	}
}

// close stops accepting, cuts every connection and waits for the goroutines.
func (r *relay) close() {
	r.ln.Close()
	r.mu.Lock()
	conns := r.conns
	r.conns, r.closed = nil, true
	r.mu.Unlock()
	for _, c := range conns {
		c.Close()
	}
	r.wg.Wait()
}
