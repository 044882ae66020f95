package edge

import (
	"bytes"
	"context"
	_ "embed"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"text/template"
	"time"

	"github.com/ratelab/ratelab/algorithms"
)

//go:embed openresty/nginx.conf
var nginxConf string

//go:embed openresty/ratelimit.lua
var ratelimitLua string

// NginxConfig fills edge/openresty/nginx.conf.
type NginxConfig struct {
	// Listen and Admin are host:port. Admin serves /healthz and
	// /__ratelab/forwarded, and no /metrics; none when empty.
	Listen, Admin string
	// Upstream is a URL for proxy_pass, or "builtin".
	Upstream string
	// RedisHost, RedisPort and RedisPassword reach Redis (a single server).
	RedisHost     string
	RedisPort     int
	RedisPassword string
	// Timeout bounds one decision.
	Timeout time.Duration
	// Clock is where the module takes the time from: "redis" (TIME inside
	// the script, the default) or "caller" (nginx's own clock, passed in).
	Clock string
	// KeyBy is "ip" or "header:NAME": whom the built-in upstream counts a
	// request for (the rules say whom it is limited as). OnError is "open"
	// or "closed"; Headers "draft", "legacy" or "both".
	KeyBy, OnError, Headers string
	// DenyCache answers denied consumers from a shared dict.
	DenyCache bool
	// BreakerFailures opens each worker's circuit after this many Redis
	// failures in a row; 0: never.
	BreakerFailures int
	// Off leaves the limiter out, to measure what it adds.
	Off bool
	// Rules is the rules table RenderRules wrote: the module decides every
	// limit a request meets with decide.lua. Required unless Off.
	Rules string
	// ShowRules has /healthz name the rules' version, file and load time,
	// as the Go engine's does for rules read from a file (--rules); the
	// rules of a lone --limit are not shown.
	ShowRules bool
	// UpstreamDelay holds each request the built-in upstream serves for
	// this long, ending early when the client goes away.
	UpstreamDelay time.Duration
	// Workers is the number of nginx worker processes; 1 by default.
	Workers int
	// Dir holds the rendered files, the pid and the error log.
	Dir string
	// LoadModules loads ndk and the lua module from ModulesDir (Debian's
	// nginx); OpenResty has them built in.
	LoadModules bool
	ModulesDir  string
}

// Render returns the nginx.conf for c. The Lua module, the rules and
// decide.lua it reads are in c.Dir (see WriteFiles).
func (c NginxConfig) Render() (string, error) {
	if c.Rules == "" && !c.Off {
		return "", errors.New("nginx.conf: no rules to serve: want RenderRules' table, or Off")
	}
	t, err := template.New("nginx.conf").Funcs(template.FuncMap{"lua": strconv.Quote}).Parse(nginxConf)
	if err != nil {
		return "", err
	}
	if c.Workers < 1 {
		c.Workers = 1
	}
	if c.Clock == "" {
		c.Clock = algorithms.ClockRedis.String()
	}
	if _, err := algorithms.ParseClock(c.Clock); err != nil {
		return "", err
	}
	data := struct {
		NginxConfig
		ModuleDir, RulesPath, DecidePath           string
		TimeoutMillis, UpstreamDelayMillis         int64
		UpstreamScheme, UpstreamHost, UpstreamPath string
	}{NginxConfig: c, ModuleDir: c.Dir, RulesPath: filepath.Join(c.Dir, "rules.lua"), DecidePath: filepath.Join(c.Dir, "decide.lua"),
		TimeoutMillis: c.Timeout.Milliseconds(), UpstreamDelayMillis: c.UpstreamDelay.Milliseconds()}
	if c.Upstream != "builtin" {
		u, err := url.Parse(c.Upstream)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return "", fmt.Errorf("upstream %q: want an http:// or https:// URL, or builtin", c.Upstream)
		}
		port := u.Port()
		if port == "" {
			port = map[string]string{"http": "80", "https": "443"}[u.Scheme]
		}
		data.UpstreamScheme, data.UpstreamHost, data.UpstreamPath = u.Scheme, net.JoinHostPort(u.Hostname(), port), strings.TrimSuffix(u.Path, "/")
	}
	var b bytes.Buffer
	if err := t.Execute(&b, data); err != nil {
		return "", err
	}
	return b.String(), nil
}

// WriteFiles writes nginx.conf, the Lua module and, with rules, the rules
// table and decide.lua (the very bytes of algorithms/decide.lua built into
// ratelab) into c.Dir.
func (c NginxConfig) WriteFiles() error {
	conf, err := c.Render()
	if err != nil {
		return err
	}
	files := map[string]string{
		"nginx.conf":    conf,
		"ratelimit.lua": ratelimitLua,
	}
	if c.Rules != "" {
		files["rules.lua"], files["decide.lua"] = c.Rules, algorithms.DecideSource()
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(c.Dir, name), []byte(body), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// FindNginx looks for an nginx that can run the module: OpenResty's, or
// nginx with Debian's lua module. It returns the binary and, for the latter,
// the modules' directory.
func FindNginx() (bin, modulesDir string, err error) {
	if p, err := exec.LookPath("openresty"); err == nil {
		return p, "", nil
	}
	p, err := exec.LookPath("nginx")
	if err != nil {
		return "", "", errors.New("neither openresty nor nginx on PATH (on Debian: apt-get install nginx libnginx-mod-http-lua lua-nginx-redis)")
	}
	for _, dir := range []string{"/usr/lib/nginx/modules", "/usr/share/nginx/modules"} {
		if _, err := os.Stat(filepath.Join(dir, "ngx_http_lua_module.so")); err == nil {
			return p, dir, nil
		}
	}
	return "", "", errors.New("nginx has no lua module (on Debian: apt-get install libnginx-mod-http-lua lua-nginx-redis)")
}

// Nginx is a running nginx.
type Nginx struct {
	cmd    *exec.Cmd
	dir    string
	exited chan struct{} // closed when nginx has exited; err is then set
	err    error
}

// StartNginx writes c's files into a new temporary directory, starts nginx
// with them, and returns once it accepts connections on c.Listen.
func StartNginx(ctx context.Context, c NginxConfig) (*Nginx, error) {
	bin, modules, err := FindNginx()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "ratelab-nginx-")
	if err != nil {
		return nil, err
	}
	c.Dir, c.ModulesDir, c.LoadModules = dir, modules, modules != ""
	if err := c.WriteFiles(); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	cmd := exec.Command(bin, "-p", dir, "-c", filepath.Join(dir, "nginx.conf"), "-e", filepath.Join(dir, "error.log"))
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("nginx: %w", err)
	}
	n := &Nginx{cmd: cmd, dir: dir, exited: make(chan struct{})}
	go func() { n.err = cmd.Wait(); close(n.exited) }()
	// Both ports must accept: nginx listens on the first while it retries
	// binding the second, and exits when it cannot.
	pending := []string{c.Listen}
	if c.Admin != "" {
		pending = append(pending, c.Admin)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		for len(pending) > 0 {
			conn, err := net.DialTimeout("tcp", pending[0], 100*time.Millisecond)
			if err != nil {
				break
			}
			conn.Close()
			pending = pending[1:]
		}
		if len(pending) == 0 {
			return n, nil
		}
		select {
		case <-n.exited:
			log, _ := os.ReadFile(filepath.Join(dir, "error.log"))
			os.RemoveAll(dir)
			return nil, fmt.Errorf("nginx exited (%v): %s %s", n.err, strings.TrimSpace(out.String()), lastLines(string(log), 5))
		case <-ctx.Done():
			n.Stop()
			return nil, ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			n.Stop()
			return nil, fmt.Errorf("nginx not accepting on %s after 10s", pending[0])
		}
	}
}

// ReloadRules writes rules (RenderRules' table) over the running nginx's
// and has nginx reload: new workers read them, old ones finish their
// requests with the old rules.
func (n *Nginx) ReloadRules(rules string) error {
	path := filepath.Join(n.dir, "rules.lua")
	tmp := path + ".new"
	if err := os.WriteFile(tmp, []byte(rules), 0o644); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	return n.cmd.Process.Signal(syscallHup)
}

// Dir is where the rendered files and the error log are.
func (n *Nginx) Dir() string { return n.dir }

// Exited is closed when nginx exits.
func (n *Nginx) Exited() <-chan struct{} { return n.exited }

// Stop asks nginx to quit gracefully (SIGQUIT), which lets requests in
// flight finish; after 2 seconds (idle Redis connections in the module's
// pool hold a graceful quit until they expire) it asks for a fast stop
// (SIGTERM), and kills it 5 seconds later. It removes nginx's directory.
func (n *Nginx) Stop() {
	for _, step := range []struct {
		sig  os.Signal
		wait time.Duration
	}{{syscallQuit, 2 * time.Second}, {syscallTerm, 5 * time.Second}, {os.Kill, time.Minute}} {
		_ = n.cmd.Process.Signal(step.sig)
		select {
		case <-n.exited:
			os.RemoveAll(n.dir)
			return
		case <-time.After(step.wait):
		}
	}
}

// StopNow asks nginx for a fast stop (SIGTERM), which drops requests in
// flight, and kills it 5 seconds later; it removes nginx's directory.
func (n *Nginx) StopNow() {
	for _, step := range []struct {
		sig  os.Signal
		wait time.Duration
	}{{syscallTerm, 5 * time.Second}, {os.Kill, time.Minute}} {
		_ = n.cmd.Process.Signal(step.sig)
		select {
		case <-n.exited:
			os.RemoveAll(n.dir)
			return
		case <-time.After(step.wait):
		}
	}
}

func lastLines(s string, k int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > k {
		lines = lines[len(lines)-k:]
	}
	return strings.Join(lines, " | ")
}
