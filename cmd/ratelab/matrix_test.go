package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ratelab/ratelab/audit"
	"github.com/ratelab/ratelab/bench"
	"github.com/ratelab/ratelab/edge"
	"github.com/ratelab/ratelab/internal/redisrun"
	"github.com/ratelab/ratelab/internal/redisrun/redistest"
	"github.com/ratelab/ratelab/internal/testwait"
)

// matrixShape is one set of limits, as the gateway's rules file and as
// the rate limit service's configuration: what a request meets.
type matrixShape struct {
	name string
	// gateway is the rules file (DOMAIN replaced): every request carries
	// X-Consumer-Id.
	gateway string
	// service is the rate limit service's file, and the descriptors each
	// call sends ({consumer} stands for the consumer).
	service     string
	descriptors []string
}

// matrixShapes: one limit; two limits on one hash tag (the consumer's);
// limits on two hash tags (per consumer, and a global cap), which on a
// Cluster are two script calls. At 10 requests a second per consumer, two
// consumers, every limit is pushed to its cap within the 3 s run; whether
// it then denies requests no other limit could have (held) or not (not
// reached) may turn on where a fixed window's edges fall, and on the rate
// limit service, whose calls of two descriptors may spend the one that
// did not refuse them, on that.
var matrixShapes = []matrixShape{
	{
		name:        "one limit",
		gateway:     "domain: DOMAIN\ndescriptors:\n  - key: header:X-Consumer-Id\n    rate_limit: {name: per-second, unit: second, requests_per_unit: 3}\n",
		service:     "domain: DOMAIN\ndescriptors:\n  - key: user\n    rate_limit: {unit: second, requests_per_unit: 3}\n",
		descriptors: []string{"user={consumer}"},
	},
	{
		name: "two limits on one tag",
		gateway: "domain: DOMAIN\ndescriptors:\n  - key: header:X-Consumer-Id\n    rate_limits:\n" +
			"      - {name: per-second, unit: second, requests_per_unit: 3}\n      - {name: per-10s, window: 10s, requests_per_unit: 5}\n",
		service: "domain: DOMAIN\ndescriptors:\n  - key: user\n    rate_limits:\n" +
			"      - {name: per-second, unit: second, requests_per_unit: 3}\n      - {name: per-minute, unit: minute, requests_per_unit: 5}\n",
		descriptors: []string{"user={consumer}"},
	},
	{
		name: "limits on two tags",
		gateway: "domain: DOMAIN\ndescriptors:\n  - key: header:X-Consumer-Id\n    rate_limit: {name: per-consumer, unit: second, requests_per_unit: 3}\n" +
			"  - key: generic_key\n    value: global\n    rate_limit: {name: global, unit: minute, requests_per_unit: 15}\n",
		service: "domain: DOMAIN\ndescriptors:\n  - key: user\n    rate_limit: {name: per-consumer, unit: second, requests_per_unit: 3}\n" +
			"  - key: generic_key\n    value: global\n    rate_limit: {name: global, unit: minute, requests_per_unit: 15}\n",
		descriptors: []string{"user={consumer}", "generic_key=global"},
	},
}

// matrixLoad is the load of every cell: two consumers, 10 requests a
// second each, for 3 s, audited with --fail-on-leak (a limit not reached
// let pass: matrixHeld judges each).
var matrixLoad = []string{"--rate", "20", "--duration", "3s", "--consumers", "2", "--no-probes", "--fail-on-leak", "--allow-no-verdict", "-o", "json"}

// TestMatrix: the combinations users deploy, each run through the audit at
// the defaults: a single Redis and a 3-master Cluster; --redis-batch 1 and
// the default; one limit, two limits on one tag, limits on two tags (a
// per-consumer limit and a global cap); the go engine, the openresty
// engine, and the rate limit service. Every cell admits what its rules
// allow and denies the rest (bench exits 0, no limit leaked, every one
// held or not reached and one at least held, some requests denied); a cell that cannot exist (openresty on a Cluster) is
// refused at start, exit 2, naming the flag. The Cluster at the default
// batch with two tags is the cell where every decision used to fail with
// CROSSSLOT.
func TestMatrix(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: a long test")
	}
	t.Parallel()
	redistest.Client(t, srv)
	cl, err := redisrun.StartCluster(context.Background(), 3, redisrun.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Stop)
	clusterURL := make([]string, len(cl.Addrs()))
	for i, a := range cl.Addrs() {
		clusterURL[i] = "redis://" + a
	}
	redises := []struct {
		name string
		args []string
	}{
		{"redis", []string{"--redis", srv.URL()}},
		{"cluster", []string{"--redis", strings.Join(clusterURL, ","), "--cluster"}},
	}
	batches := []struct {
		name string
		args []string
	}{{"batch 1", []string{"--redis-batch", "1"}}, {"default batch", nil}}
	t.Run("cluster at the default batch/edge", func(t *testing.T) {
		t.Parallel()
		clusterAtDefaultBatch(t, redises[1].args, "edge")
	})
	t.Run("cluster at the default batch/rls", func(t *testing.T) {
		t.Parallel()
		clusterAtDefaultBatch(t, redises[1].args, "rls")
	})
	_, _, nginxErr := edge.FindNginx()
	for _, r := range redises {
		for _, b := range batches {
			for _, shape := range matrixShapes {
				for _, engine := range []string{edge.EngineGo, edge.EngineOpenResty, "rls"} {
					t.Run(strings.Join([]string{r.name, b.name, shape.name, engine}, "/"), func(t *testing.T) {
						t.Parallel()
						target := append(append([]string{}, r.args...), b.args...)
						switch {
						case engine == "rls":
							matrixRLS(t, shape, target)
						case engine == edge.EngineOpenResty && nginxErr != nil:
							if redistest.InCI() {
								t.Fatalf("under CI: %v", nginxErr)
							}
							t.Skip(nginxErr)
						case engine == edge.EngineOpenResty && r.name == "cluster":
							matrixRefused(t, shape, target, "--redis: the openresty engine reaches one Redis over plain TCP: no Cluster")
						default:
							matrixEdge(t, shape, engine, target)
						}
					})
				}
			}
		}
	}
}

// writeMatrixFile writes src, its domain the test's own, as name in a
// directory of its own; it returns the file's path and the domain.
func writeMatrixFile(t *testing.T, name, src string) (string, string) {
	t.Helper()
	domain := redistest.Prefix(t)
	file := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(file, []byte(strings.ReplaceAll(src, "DOMAIN", domain)), 0o644); err != nil {
		t.Fatal(err)
	}
	return file, domain
}

// matrixEdge serves the shape's rules with ratelab edge on engine and
// target, and audits it with bench http by the same rules.
func matrixEdge(t *testing.T, shape matrixShape, engine string, target []string) {
	file, _ := writeMatrixFile(t, "rules.yaml", shape.gateway)
	e := serveEdge(t, append([]string{"--rules", file, "--engine", engine}, target...)...)
	code, stdout, stderr := ratelab(t, append([]string{"bench", "http", e.url(), "--expect-rules", file}, matrixLoad...)...)
	matrixHeld(t, code, stdout, stderr, e.log.String())
}

// matrixRLS serves the shape's configuration with ratelab rls on target,
// and audits it with bench rls by the same configuration.
func matrixRLS(t *testing.T, shape matrixShape, target []string) {
	file, domain := writeMatrixFile(t, "config.yaml", shape.service)
	dir := filepath.Dir(file)
	grpcAddr, httpAddr := freeAddr(t), freeAddr(t)
	log := serveRLS(t, append([]string{"--config", dir, "--grpc", grpcAddr, "--http", httpAddr}, target...))
	args := []string{"bench", "rls", grpcAddr, "--domain", domain, "--expect-config", dir}
	for _, d := range shape.descriptors {
		args = append(args, "--descriptor", d)
	}
	code, stdout, stderr := ratelab(t, append(args, matrixLoad...)...)
	matrixHeld(t, code, stdout, stderr, log.String())
}

// serveRLS runs ratelab rls in this process with args (which give --http)
// and --redis-timeout 5s until the test ends, once its /healthz answers;
// it returns its log.
func serveRLS(t *testing.T, args []string) *syncWriter {
	t.Helper()
	httpAddr := ""
	for i, a := range args {
		if a == "--http" && i+1 < len(args) {
			httpAddr = args[i+1]
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	log := &syncWriter{}
	go func() { done <- run(ctx, append([]string{"rls", "--redis-timeout", "5s"}, args...), io.Discard, log) }()
	stop := sync.OnceValue(func() int { cancel(); return <-done })
	t.Cleanup(func() {
		if code := stop(); code != exitOK {
			t.Errorf("rls exited %d: %s", code, log.String())
		}
	})
	testwait.Eventually(t, 15*time.Second, func() (bool, string) {
		resp, err := http.Get("http://" + httpAddr + "/healthz")
		if err == nil {
			resp.Body.Close()
		}
		return err == nil && resp.StatusCode == http.StatusOK, fmt.Sprintf("rls not serving: %v\n%s", err, log.String())
	})
	return log
}

// matrixHeld fails the test unless bench exited 0 and the audit found no
// limit leaked, each held or not reached, one at least held, with requests
// denied.
func matrixHeld(t *testing.T, code int, stdout, stderr, serverLog string) {
	t.Helper()
	var res bench.Result
	decodeJSON(t, stdout, &res)
	if code != exitOK || res.Audit == nil || len(res.Audit.Limits) == 0 {
		t.Fatalf("exit %d (%s), audit %+v\nserver:\n%s", code, stderr, res.Audit, serverLog)
	}
	var denied int64
	reached := false
	for _, l := range res.Audit.Limits {
		if l.Verdict != audit.Held && l.Verdict != audit.NotReached || l.Admitted == 0 {
			t.Errorf("%s: %s %q, %d admitted", l.ID, l.Verdict, l.Reasons, l.Admitted)
		}
		// Two limits full at once leave their denials to either: both may
		// go not reached, but the load filled one of them.
		reached = reached || l.Verdict == audit.Held || l.MostInWindow >= l.Limit
		denied += l.Denials
	}
	if !reached {
		t.Errorf("no limit reached: %+v", res.Audit)
	}
	if denied == 0 || res.Errors != 0 {
		t.Errorf("%d denials, %d errors: the load did not reach the limits, or the server failed\nserver:\n%s", denied, res.Errors, serverLog)
	}
}

// matrixRefused checks that ratelab edge refuses the cell at start: exit 2,
// naming the flag in want.
func matrixRefused(t *testing.T, shape matrixShape, target []string, want string) {
	file, _ := writeMatrixFile(t, "rules.yaml", shape.gateway)
	code, _, stderr := ratelab(t, append([]string{"edge", "--rules", file, "--engine", edge.EngineOpenResty, "--upstream", "builtin",
		"--listen", freeAddr(t), "--admin", ""}, target...)...)
	if code != exitUsage || !strings.Contains(stderr, want) {
		t.Fatalf("exit %d, stderr %q; want 2 and %q", code, stderr, want)
	}
}

// clusterAtDefaultBatch: on a 3-master Cluster at the default --redis-batch,
// a rules file of 10 a minute per consumer and a global cap of 1000 a
// minute (two hash tags, two script calls a request): 30 consumers' first
// requests are all admitted, and one consumer's 11th is refused; through
// ratelab edge --rules, or ratelab rls over /json. The consumer's limit is
// a rolling window in both: rls's default fixed window, aligned to the
// minute, would admit the 11th whenever a minute began among the 40
// requests.
func clusterAtDefaultBatch(t *testing.T, cluster []string, engine string) {
	const consumerKey = "header:X-Consumer-Id"
	src := "domain: DOMAIN\ndescriptors:\n  - key: KEY\n    rate_limit: {name: per-consumer, unit: minute, requests_per_unit: 10, algorithm: sliding-log}\n" +
		"  - key: generic_key\n    value: global\n    rate_limit: {name: global, unit: minute, requests_per_unit: 1000}\n"
	var ask func(consumer string) int
	if engine == "edge" {
		file, _ := writeMatrixFile(t, "rules.yaml", strings.ReplaceAll(src, "KEY", consumerKey))
		e := serveEdge(t, append([]string{"--rules", file}, cluster...)...)
		ask = func(consumer string) int { return e.getAs(t, consumer).StatusCode }
	} else {
		file, domain := writeMatrixFile(t, "config.yaml", strings.ReplaceAll(src, "KEY", "user"))
		httpAddr := freeAddr(t)
		serveRLS(t, append([]string{"--config", filepath.Dir(file), "--grpc", freeAddr(t), "--http", httpAddr}, cluster...))
		ask = func(consumer string) int {
			body := `{"domain":"` + domain + `","descriptors":[{"entries":[{"key":"user","value":"` + consumer + `"}]},` +
				`{"entries":[{"key":"generic_key","value":"global"}]}]}`
			resp, err := http.Post("http://"+httpAddr+"/json", "application/json", strings.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			return resp.StatusCode
		}
	}
	for i := range 30 {
		if code := ask(fmt.Sprintf("consumer-%d", i)); code != http.StatusOK {
			t.Fatalf("consumer-%d's first request: %d, want 200", i, code)
		}
	}
	for i := 2; i <= 11; i++ {
		want := http.StatusOK
		if i == 11 {
			want = http.StatusTooManyRequests
		}
		if code := ask("consumer-0"); code != want {
			t.Fatalf("consumer-0's request %d: %d, want %d", i, code, want)
		}
	}
}
