package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/ratelab/ratelab/internal/testwait"
)

// servedEdge is a ratelab edge that a test runs in this process.
type servedEdge struct {
	// addr is where it listens (host:port).
	addr string
	// log is its standard error: the start-up lines, reloads, failures.
	log *syncWriter
	// stop ends it, once, and returns its exit code; later calls return
	// the same code.
	stop func() int
}

// url is the gateway's root URL.
func (e *servedEdge) url() string { return "http://" + e.addr + "/" }

// getAs sends a GET of the gateway's root as consumer (X-Consumer-Id) and
// returns the answer, its body read and closed; the test fails at once
// when it cannot.
func (e *servedEdge) getAs(t *testing.T, consumer string) *http.Response {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, e.url(), nil)
	req.Header.Set("X-Consumer-Id", consumer)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%v\n%s", err, e.log.String())
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp
}

// serveEdge runs ratelab edge in this process until the test ends, with
// args after --listen (a free port), --admin "" (none), --upstream builtin
// and --redis-timeout 5s (a loaded machine must not fail a decision open,
// an admission the limiter never made). It returns once the gateway
// accepts connections, having sent it nothing; an edge that exits before
// that fails the test with its log. At the end of the test an exit other
// than 0 fails it too.
func serveEdge(t *testing.T, args ...string) *servedEdge {
	t.Helper()
	e := &servedEdge{addr: freeAddr(t), log: &syncWriter{}}
	ctx, cancel := context.WithCancel(context.Background())
	exited := make(chan struct{})
	var code int
	go func() {
		defer close(exited)
		code = run(ctx, append([]string{"edge", "--listen", e.addr, "--admin", "", "--upstream", "builtin", "--redis-timeout", "5s"}, args...),
			io.Discard, e.log)
	}()
	e.stop = sync.OnceValue(func() int { cancel(); <-exited; return code })
	t.Cleanup(func() {
		if code := e.stop(); code != exitOK && !t.Failed() {
			t.Errorf("edge exit %d:\n%s", code, e.log.String())
		}
	})
	testwait.Eventually(t, 15*time.Second, func() (bool, string) {
		select {
		case <-exited:
			t.Fatalf("edge exit %d before it served:\n%s", code, e.log.String())
		default:
		}
		c, err := net.DialTimeout("tcp", e.addr, time.Second)
		if err != nil {
			return false, fmt.Sprintf("nothing listens on %s: %v\n%s", e.addr, err, e.log.String())
		}
		c.Close()
		return true, ""
	})
	return e
}

// syncWriter is a buffer written by a command's goroutines and read by the test.
type syncWriter struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (w *syncWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

func (w *syncWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}
