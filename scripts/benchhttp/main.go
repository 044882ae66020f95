// Command benchhttp measures ratelab bench http beside wrk (and wrk2 and
// bombardier, when they are installed) against nginx serving a static 200
// with one worker on loopback: in rounds, each tool once per round in a
// rotating order, and prints every figure's median, min and max over the
// rounds, and its ratio to the reference tool measured in the same round.
// The machine is shared and noisy: absolute figures drift, ratios measured
// side by side do not. scripts/bench-http.sh runs it (make bench).
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"
)

func main() {
	rounds := flag.Int("rounds", 3, "rounds; each figure is the median over them")
	duration := flag.Duration("duration", 4*time.Second, "length of each load run")
	connections := flag.Int("connections", 50, "connections of every tool")
	rates := flag.String("rates", "20000,40000", "open-model rates to measure, comma-separated")
	ratelab := flag.String("ratelab", "bin/ratelab", "the ratelab binary")
	rssConns := flag.Int("rss-connections", 10000, "connections for the memory figure (0: skip it)")
	flag.Parse()
	if err := run(*rounds, *duration, *connections, *rates, *ratelab, *rssConns); err != nil {
		fmt.Fprintln(os.Stderr, "benchhttp:", err)
		os.Exit(1)
	}
}

// figure is one measured number of one tool, a value per round.
type figure struct {
	name, unit string
	// ref names the figure this one is divided by, round by round.
	ref    string
	values []float64
	target string
}

func run(rounds int, duration time.Duration, conns int, rateList, ratelab string, rssConns int) error {
	if _, err := exec.LookPath("wrk"); err != nil {
		return errors.New("needs wrk (apt-get install wrk)")
	}
	_, errWrk2 := exec.LookPath("wrk2")
	_, errBomb := exec.LookPath("bombardier")
	var rates []int
	for _, r := range strings.Split(rateList, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(r))
		if err != nil || n <= 0 {
			return fmt.Errorf("-rates %q", rateList)
		}
		rates = append(rates, n)
	}
	ng, url, err := startNginx(max(conns, rssConns))
	if err != nil {
		return err
	}
	defer ng()
	d := strconv.Itoa(int(duration.Seconds())) + "s"
	c := strconv.Itoa(conns)

	figs := map[string]*figure{}
	var order []string
	add := func(name, unit, ref, target string, v float64) {
		f, ok := figs[name]
		if !ok {
			f = &figure{name: name, unit: unit, ref: ref, target: target}
			figs[name] = f
			order = append(order, name)
		}
		f.values = append(f.values, v)
	}
	type job struct {
		name string
		run  func() error
	}
	jobs := []job{
		{"wrk -t1", func() error {
			out, err := output("wrk", "-t1", "-c"+c, "-d"+d, url)
			if err != nil {
				return err
			}
			add("wrk -t1 -c"+c, "req/s", "", "", wrkRate(out))
			return nil
		}},
		{"ratelab closed", func() error {
			r, err := ratelabRun(ratelab, url, "--threads", "1", "--rate", "0", "--connections", c, "--duration", d)
			if err != nil {
				return err
			}
			add("ratelab --threads 1 --rate 0", "req/s", "wrk -t1 -c"+c, "≥ 1.00 × wrk -t1, above bombardier", r.ThroughputRPS)
			return nil
		}},
	}
	if errBomb == nil {
		jobs = append(jobs, job{"bombardier", func() error {
			cmd := pinned(1, "bombardier", "-c", c, "-d", d, "-p", "r", "-o", "j", url)
			cmd.Env = append(os.Environ(), "GOMAXPROCS=1")
			out, err := cmd.Output()
			if err != nil {
				return fmt.Errorf("bombardier: %w", err)
			}
			add("bombardier (GOMAXPROCS=1)", "req/s", "wrk -t1 -c"+c, "", bombardierRate(out))
			return nil
		}})
	}
	for _, rate := range rates {
		r := strconv.Itoa(rate)
		jobs = append(jobs, job{"ratelab open " + r, func() error {
			res, err := ratelabRun(ratelab, url, "--threads", "1", "--rate", r, "--connections", c, "--duration", d)
			if err != nil {
				return err
			}
			name := "ratelab --rate " + r
			add(name+": achieved", "% of rate", "", "≥ 99%", 100*res.ThroughputRPS/float64(rate))
			add(name+": send lag p99", "ms", "", "< 1 ms", float64(res.SendLagMicros.P99)/1000)
			ref := ""
			if errWrk2 == nil {
				ref = "wrk2 -R" + r + ": latency p99"
			}
			add(name+": latency p99", "ms", ref, "within 2 × wrk2 (< 10 ms without it)", float64(res.LatencyMicros.P99)/1000)
			return nil
		}})
		if errWrk2 == nil {
			jobs = append(jobs, job{"wrk2 " + r, func() error {
				out, err := output("wrk2", "-t1", "-c"+c, "-d"+d, "-R"+r, "--latency", url)
				if err != nil {
					return err
				}
				add("wrk2 -R"+r+": achieved", "% of rate", "", "", 100*wrkRate(out)/float64(rate))
				add("wrk2 -R"+r+": latency p99", "ms", "", "", wrk2P99(out))
				return nil
			}})
		}
	}
	pin := "unpinned"
	if pinned(0, "true").Args[0] == "taskset" {
		pin = "nginx on CPU 0, each tool on CPU 1 (taskset)"
	}
	fmt.Printf("nginx %s, 1 worker, static 200 on loopback; %d connections, %s per run, %d rounds, tools rotated each round; %s\n",
		nginxVersion(), conns, d, rounds, pin)
	for round := range rounds {
		for k := range jobs {
			j := jobs[(k+round)%len(jobs)]
			fmt.Fprintf(os.Stderr, "round %d/%d: %s\n", round+1, rounds, j.name)
			if err := j.run(); err != nil {
				return fmt.Errorf("%s: %w", j.name, err)
			}
		}
	}
	w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "figure\tmedian\tmin\tmax\tratio (median of rounds)\ttarget")
	for _, name := range order {
		f := figs[name]
		ratio := "–"
		if ref, ok := figs[f.ref]; ok && len(ref.values) == len(f.values) {
			rs := make([]float64, len(f.values))
			for i := range rs {
				rs[i] = f.values[i] / ref.values[i]
			}
			ratio = fmt.Sprintf("%.2f × %s", median(rs), f.ref)
		}
		fmt.Fprintf(w, "%s\t%s %s\t%s\t%s\t%s\t%s\n", f.name, num(median(f.values)), f.unit, num(slices.Min(f.values)),
			num(slices.Max(f.values)), ratio, f.target)
	}
	w.Flush()
	if errWrk2 != nil {
		fmt.Println("wrk2 not installed: open-model latency is judged against 10 ms")
	}
	if errBomb != nil {
		fmt.Println("bombardier not installed: go install github.com/codesenberg/bombardier@latest to compare")
	}
	if rssConns > 0 {
		rss, res, err := ratelabRSS(ratelab, url, rssConns)
		if err != nil {
			return err
		}
		fmt.Printf("memory: ratelab bench http --rate 0 --connections %d: max RSS %.0f MiB (%d requests, %d errors)\n",
			rssConns, rss, res.Requests, res.Errors)
	}
	return nil
}

// result holds the figures the driver reads from ratelab's JSON.
type result struct {
	Requests      int64   `json:"requests"`
	Errors        int64   `json:"errors"`
	ThroughputRPS float64 `json:"throughput_rps"`
	LatencyMicros struct {
		P99 int64 `json:"p99"`
	} `json:"latency_us"`
	SendLagMicros struct {
		P99 int64 `json:"p99"`
	} `json:"send_lag_us"`
}

func ratelabRun(bin, url string, args ...string) (result, error) {
	out, err := output(bin, append([]string{"bench", "http", url, "-o", "json"}, args...)...)
	if err != nil {
		return result{}, err
	}
	var r result
	if err := json.Unmarshal(out, &r); err != nil {
		return r, fmt.Errorf("ratelab json: %w", err)
	}
	if r.Errors > 0 {
		return r, fmt.Errorf("ratelab saw %d transport errors", r.Errors)
	}
	return r, nil
}

// ratelabRSS runs ratelab on n connections for 3 s and returns its
// largest resident set, in MiB.
func ratelabRSS(bin, url string, n int) (float64, result, error) {
	cmd := pinned(1, bin, "bench", "http", url, "-o", "json", "--rate", "0", "--connections", strconv.Itoa(n), "--duration", "3s")
	out, err := cmd.Output()
	if err != nil {
		return 0, result{}, fmt.Errorf("ratelab with %d connections: %w", n, err)
	}
	var r result
	if err := json.Unmarshal(out, &r); err != nil {
		return 0, r, err
	}
	rss, ok := maxRSS(cmd.ProcessState)
	if !ok {
		return 0, r, errors.New("no resource usage on this system")
	}
	return rss, r, nil
}

// pinned runs name on CPU cpu when taskset is there and the machine has
// two CPUs or more: nginx on the first, each load generator in turn on the
// second, so that neither takes the other's core.
func pinned(cpu int, name string, args ...string) *exec.Cmd {
	if _, err := exec.LookPath("taskset"); err == nil && runtime.NumCPU() >= 2 {
		return exec.Command("taskset", append([]string{"-c", strconv.Itoa(cpu), name}, args...)...)
	}
	return exec.Command(name, args...)
}

func output(name string, args ...string) ([]byte, error) {
	var stderr bytes.Buffer
	cmd := pinned(1, name, args...)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("%s: %w: %s", name, err, strings.TrimSpace(stderr.String()))
	}
	return out, nil
}

var rateLine = regexp.MustCompile(`Requests/sec:\s+([0-9.]+)`)

func wrkRate(out []byte) float64 {
	m := rateLine.FindSubmatch(out)
	if m == nil {
		return 0
	}
	v, _ := strconv.ParseFloat(string(m[1]), 64)
	return v
}

var p99Line = regexp.MustCompile(`(?m)^\s*99\.000%\s+([0-9.]+)(us|ms|s|m)\b`)

// wrk2P99 reads the p99 of wrk2 --latency, in ms.
func wrk2P99(out []byte) float64 {
	m := p99Line.FindSubmatch(out)
	if m == nil {
		return 0
	}
	v, _ := strconv.ParseFloat(string(m[1]), 64)
	return v * map[string]float64{"us": 0.001, "ms": 1, "s": 1000, "m": 60000}[string(m[2])]
}

func bombardierRate(out []byte) float64 {
	var raw struct {
		Result map[string]any `json:"result"`
	}
	if json.Unmarshal(out, &raw) != nil {
		return 0
	}
	var n float64
	for _, k := range []string{"req1xx", "req2xx", "req3xx", "req4xx", "req5xx", "others"} {
		if v, ok := raw.Result[k].(float64); ok {
			n += v
		}
	}
	secs, _ := raw.Result["timeTakenSeconds"].(float64)
	if secs == 0 {
		return 0
	}
	return n / secs
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func num(v float64) string {
	switch {
	case v >= 1000:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case v >= 10:
		return strconv.FormatFloat(v, 'f', 1, 64)
	}
	return strconv.FormatFloat(v, 'f', 2, 64)
}

func nginxVersion() string {
	out, _ := exec.Command("nginx", "-v").CombinedOutput()
	s := strings.TrimSpace(string(out))
	if _, v, ok := strings.Cut(s, "nginx/"); ok {
		return v
	}
	return s
}

// startNginx runs nginx with one worker on a free loopback port, serving
// a static 200, and returns how to stop it and its URL.
func startNginx(conns int) (func(), string, error) {
	bin, err := exec.LookPath("nginx")
	if err != nil {
		return nil, "", errors.New("needs nginx (apt-get install nginx)")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, "", err
	}
	addr := l.Addr().String()
	l.Close()
	dir, err := os.MkdirTemp("", "benchhttp-")
	if err != nil {
		return nil, "", err
	}
	conf := fmt.Sprintf(`worker_processes 1;
daemon off;
pid %[1]s/nginx.pid;
error_log %[1]s/error.log warn;
worker_rlimit_nofile %[3]d;
events { worker_connections %[3]d; }
http {
    access_log off;
    client_body_temp_path %[1]s/body;
    proxy_temp_path %[1]s/proxy;
    fastcgi_temp_path %[1]s/fastcgi;
    uwsgi_temp_path %[1]s/uwsgi;
    scgi_temp_path %[1]s/scgi;
    server {
        listen %[2]s backlog=65535;
        location / { default_type text/plain; return 200 "ok\n"; }
    }
}
`, dir, addr, 2*conns+100) // nginx counts more than its clients' connections
	path := filepath.Join(dir, "nginx.conf")
	if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
		return nil, "", err
	}
	cmd := pinned(0, bin, "-p", dir, "-c", path, "-e", filepath.Join(dir, "error.log"))
	if err := cmd.Start(); err != nil {
		return nil, "", err
	}
	stop := func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
		os.RemoveAll(dir)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for {
		c, err := net.DialTimeout("tcp", addr, 100*time.Millisecond)
		if err == nil {
			c.Close()
			return stop, "http://" + addr + "/", nil
		}
		select {
		case <-ctx.Done():
			stop()
			return nil, "", fmt.Errorf("nginx not accepting on %s", addr)
		case <-time.After(20 * time.Millisecond):
		}
	}
}
