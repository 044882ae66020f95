// Package redisrun starts private Redis servers: a redis-server process from
// PATH on a free loopback port in a temporary directory, or, where there is no
// redis-server, an in-process server (miniredis). The command line uses it when
// the user names no Redis; every test that needs Redis uses it through
// redistest.
package redisrun

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/alicebob/miniredis/v2"
)

// Mode says where a Redis server came from.
type Mode string

const (
	// External is a server the user pointed ratelab at.
	External Mode = "external"
	// Ephemeral is a private redis-server process started by ratelab.
	Ephemeral Mode = "ephemeral"
	// Embedded is the in-process fallback (miniredis).
	Embedded Mode = "embedded"
)

// ErrNotFound is returned by Start when there is no redis-server on PATH.
var ErrNotFound = errors.New("redis-server not found on PATH")

// Options tune Start.
type Options struct {
	// Binary is the redis-server to run; "redis-server" from PATH by default.
	Binary string
	// StartTimeout bounds the wait for the server to accept connections;
	// 10s by default.
	StartTimeout time.Duration
	// Args are extra redis-server arguments, as "--name value" pairs.
	Args []string
	// MaxPort is the highest port to listen on; any by default. A Cluster
	// node needs port + 10000 free for its bus.
	MaxPort int
	// Port, when set, is the port to listen on (to restart a server where
	// its clients expect it); a free one by default.
	Port int
	// TLS, when set, also serves TLS on a free port (Server.TLSAddr) with
	// these PEM files; clients need no certificate of their own.
	TLS *TLSFiles
}

// TLSFiles are a server's certificate, its key, and the CA that signs it.
type TLSFiles struct {
	CertFile, KeyFile, CAFile string
}

// Server is a running private Redis.
type Server struct {
	// Addr is the server's host:port on the loopback interface.
	Addr string
	// Mode is Ephemeral or Embedded.
	Mode Mode
	// Version is the server's version ("7.0.15", or "miniredis v2.40.0").
	Version string
	// TLSAddr is where it serves TLS, when started with Options.TLS.
	TLSAddr string

	cmd  *exec.Cmd
	dir  string
	done chan struct{} // closed when the process has exited
	mini *miniredis.Miniredis
	once sync.Once
}

// URL is the redis:// URL of the server.
func (s *Server) URL() string { return "redis://" + s.Addr }

// Start runs redis-server on a free loopback port with persistence off, in a
// temporary directory, and returns once it accepts connections. It tries a few
// ports, since another process may take a free port between the look-up and the
// bind.
func Start(ctx context.Context, opts Options) (*Server, error) {
	bin := opts.Binary
	if bin == "" {
		bin = "redis-server"
	}
	path, err := exec.LookPath(bin)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNotFound, err)
	}
	timeout := opts.StartTimeout
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var lastErr error
	for range 5 {
		args := opts.Args
		tlsAddr := ""
		if t := opts.TLS; t != nil {
			port, err := freePort()
			if err != nil {
				return nil, err
			}
			tlsAddr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
			args = append(slices.Clone(args), "--tls-port", strconv.Itoa(port), "--tls-cert-file", t.CertFile,
				"--tls-key-file", t.KeyFile, "--tls-ca-cert-file", t.CAFile, "--tls-auth-clients", "no")
		}
		srv, err := startOnce(ctx, path, args, opts.MaxPort, opts.Port, serverProc)
		if srv != nil {
			srv.TLSAddr = tlsAddr
		}
		if err == nil {
			return srv, nil
		}
		lastErr = err
		if !errors.Is(err, errAddrInUse) || ctx.Err() != nil || opts.Port > 0 {
			break
		}
	}
	return nil, lastErr
}

var errAddrInUse = errors.New("address already in use")

// proc is what differs between the processes startOnce runs.
type proc struct {
	// ready is the log line that says the process accepts connections.
	ready string
	// conf, when set, writes a configuration file into dir for port and
	// returns its path, passed as the first argument.
	conf func(dir string, port int) (string, error)
}

// serverProc is redis-server.
var serverProc = proc{ready: "Ready to accept connections"}

func startOnce(ctx context.Context, path string, extra []string, maxPort, fixed int, pr proc) (*Server, error) {
	port, err := freePort()
	if fixed > 0 {
		port, maxPort = fixed, 0
	}
	for tries := 0; err == nil && maxPort > 0 && port > maxPort; tries++ {
		if tries == 100 {
			return nil, fmt.Errorf("no free loopback port at or below %d in 100 tries", maxPort)
		}
		port, err = freePort()
	}
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "ratelab-redis-")
	if err != nil {
		return nil, fmt.Errorf("redis-server: temp dir: %w", err)
	}
	var args []string
	if pr.conf != nil {
		conf, err := pr.conf(dir, port)
		if err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
		args = append(args, conf)
	}
	args = append(args,
		"--port", strconv.Itoa(port),
		"--bind", "127.0.0.1",
		"--dir", dir,
		"--save", "",
		"--appendonly", "no",
		"--daemonize", "no",
		"--logfile", "",
		"--loglevel", "notice",
	)
	args = append(args, extra...)
	cmd := exec.Command(path, args...)
	cmd.Dir = dir
	cmd.SysProcAttr = sysProcAttr()
	out, err := cmd.StdoutPipe()
	if err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("redis-server: %w", err)
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("redis-server: start: %w", err)
	}
	srv := &Server{
		Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)),
		Mode: Ephemeral,
		cmd:  cmd,
		dir:  dir,
		done: make(chan struct{}),
	}

	// Readiness comes from the server's own log: it prints its version at
	// start and "Ready to accept connections" once it listens.
	ready := make(chan struct{})
	var (
		mu      sync.Mutex
		log     strings.Builder
		version string
	)
	go func() {
		sc := bufio.NewScanner(out)
		signalled := false
		for sc.Scan() {
			line := sc.Text()
			mu.Lock()
			if log.Len() < 64<<10 {
				log.WriteString(line + "\n")
			}
			if v, ok := versionFromLog(line); ok && version == "" {
				version = v
			}
			mu.Unlock()
			if !signalled && strings.Contains(line, pr.ready) {
				signalled = true
				close(ready)
			}
		}
		_, _ = io.Copy(io.Discard, out)
		_ = cmd.Wait()
		close(srv.done)
	}()

	select {
	case <-ready:
		mu.Lock()
		srv.Version = version
		mu.Unlock()
		return srv, nil
	case <-srv.done:
		os.RemoveAll(dir)
		mu.Lock()
		text := strings.TrimSpace(log.String())
		mu.Unlock()
		if strings.Contains(text, "Address already in use") {
			return nil, fmt.Errorf("redis-server on port %d: %w", port, errAddrInUse)
		}
		return nil, fmt.Errorf("%s exited before it was ready: %s", filepath.Base(path), lastLines(text, 5))
	case <-ctx.Done():
		srv.Stop()
		return nil, fmt.Errorf("%s on port %d not ready: %w", filepath.Base(path), port, ctx.Err())
	}
}

// versionFromLog finds the version in redis-server's start-up line
// "Redis version=7.0.15, bits=64, ...".
func versionFromLog(line string) (string, bool) {
	_, rest, ok := strings.Cut(line, "Redis version=")
	if !ok {
		return "", false
	}
	v, _, _ := strings.Cut(rest, ",")
	return v, v != ""
}

func lastLines(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}

// freePort asks the kernel for a free loopback port.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// StartEmbedded runs the in-process fallback server on a free loopback port.
// Its keys expire on the wall clock, as a real server's do.
func StartEmbedded() (*Server, error) {
	m := miniredis.NewMiniRedis()
	m.ClockTTL(true)
	if err := m.StartAddr("127.0.0.1:0"); err != nil {
		return nil, fmt.Errorf("embedded redis: %w", err)
	}
	return &Server{Addr: m.Addr(), Mode: Embedded, Version: embeddedVersion(), mini: m}, nil
}

// embeddedVersion is the miniredis module version built into this binary.
func embeddedVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, dep := range bi.Deps {
			if dep.Path == "github.com/alicebob/miniredis/v2" {
				return "miniredis " + dep.Version
			}
		}
	}
	return "miniredis"
}

// Pause stops the server's process (SIGSTOP) without closing its sockets:
// clients connect and then hear nothing, as from a hung server.
func (s *Server) Pause() error {
	stop, _ := pauseSignals()
	return s.signal(stop)
}

// Resume continues a paused server (SIGCONT).
func (s *Server) Resume() error {
	_, cont := pauseSignals()
	return s.signal(cont)
}

func (s *Server) signal(sig os.Signal) error {
	if s.cmd == nil {
		return errors.New("the embedded server cannot be paused")
	}
	if sig == nil {
		return errors.New("pausing a process needs SIGSTOP, which this system has not")
	}
	return s.cmd.Process.Signal(sig)
}

// Port is the server's port.
func (s *Server) Port() int {
	_, p, _ := net.SplitHostPort(s.Addr)
	n, _ := strconv.Atoi(p)
	return n
}

// Stop ends the server and removes its directory. It waits at most five
// seconds for a clean exit before it kills the process. Safe to call twice.
func (s *Server) Stop() {
	s.once.Do(func() {
		if s.mini != nil {
			s.mini.Close()
			return
		}
		if _, cont := pauseSignals(); cont != nil {
			_ = s.cmd.Process.Signal(cont) // a paused server cannot act on the interrupt
		}
		_ = s.cmd.Process.Signal(os.Interrupt)
		select {
		case <-s.done:
		case <-time.After(5 * time.Second):
			_ = s.cmd.Process.Kill()
			<-s.done
		}
		os.RemoveAll(s.dir)
	})
}
