package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/ratelab/ratelab/internal/reload/reloadtest"
	"github.com/ratelab/ratelab/limiter"
	"github.com/ratelab/ratelab/rls"
)

// TestKubernetesJob: deploy/kubernetes/bench-job.yaml runs every shard at
// once as an Indexed Job whose index is the shard, and then one merge, on
// ratelab's image: no shell (Kubernetes puts the variables in, ratelab
// writes its own files), no user of root, and no start time to edit in.
// Every command line, with its variables put in as Kubernetes does, is one
// ratelab parses.
func TestKubernetesJob(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("../../deploy/kubernetes/bench-job.yaml")
	if err != nil {
		t.Fatal(err)
	}
	type container struct {
		Image string
		Env   []struct {
			Name, Value string
			ValueFrom   struct {
				FieldRef struct {
					FieldPath string `yaml:"fieldPath"`
				} `yaml:"fieldRef"`
			} `yaml:"valueFrom"`
		}
		Command, Args []string
	}
	type doc struct {
		Kind     string
		Metadata struct {
			Name   string
			Labels map[string]string
		}
		Spec struct {
			CompletionMode string `yaml:"completionMode"`
			Completions    int
			Parallelism    int
			Template       struct {
				Spec struct {
					SecurityContext struct {
						RunAsNonRoot bool `yaml:"runAsNonRoot"`
						FSGroup      int  `yaml:"fsGroup"`
					} `yaml:"securityContext"`
					Containers []container
				}
			}
		}
	}
	jobs := map[string]doc{}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	for {
		var d doc
		if err := dec.Decode(&d); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		// The bench is applied first, the merge after it: by this label.
		if c := d.Metadata.Labels["app.kubernetes.io/component"]; c != "bench" && c != "merge" {
			t.Errorf("%s %s: component label %q, want bench or merge", d.Kind, d.Metadata.Name, c)
		}
		if d.Kind == "Job" {
			jobs[d.Metadata.Name] = d
		}
	}
	shards, merge := jobs["ratelab-bench"], jobs["ratelab-merge"]
	if shards.Spec.CompletionMode != "Indexed" || shards.Spec.Completions < 2 || shards.Spec.Parallelism != shards.Spec.Completions {
		t.Fatalf("the bench Job: %+v; want an Indexed Job running every shard at once", shards.Spec)
	}
	if merge.Metadata.Labels["app.kubernetes.io/component"] != "merge" {
		t.Errorf("the merge Job is not labelled as the merge: %v", merge.Metadata.Labels)
	}
	var image string
	for _, j := range []doc{shards, merge} {
		s := j.Spec.Template.Spec
		if len(s.Containers) != 1 {
			t.Fatalf("%s: %d containers, want 1", j.Metadata.Name, len(s.Containers))
		}
		c := s.Containers[0]
		if image == "" {
			image = c.Image
		}
		if c.Image != image || !strings.HasSuffix(c.Image, "/ratelab:VERSION") {
			t.Errorf("%s runs %q: want ratelab's image, REGISTRY/ratelab:VERSION as docs/distributed.md says, in both Jobs", j.Metadata.Name, c.Image)
		}
		if len(c.Command) != 0 {
			t.Errorf("%s runs %q: the image has no shell, and its entrypoint is ratelab", j.Metadata.Name, c.Command)
		}
		// 65532 is the image's user (scripts/image): it must write the volume.
		if !s.SecurityContext.RunAsNonRoot || s.SecurityContext.FSGroup != 65532 {
			t.Errorf("%s: security context %+v; want runAsNonRoot and fsGroup 65532", j.Metadata.Name, s.SecurityContext)
		}
	}

	c := shards.Spec.Template.Spec.Containers[0]
	env := map[string]string{}
	for _, e := range c.Env {
		env[e.Name] = e.Value
		if e.ValueFrom.FieldRef.FieldPath == "metadata.annotations['batch.kubernetes.io/job-completion-index']" {
			env[e.Name] = "1" // the pod's index, as Kubernetes gives it
		}
		if e.Name == "START_AT" {
			t.Errorf("START_AT %q: the shards compute their start with --start-at next:D", e.Value)
		}
	}
	if env["SHARDS"] != strconv.Itoa(shards.Spec.Completions) {
		t.Fatalf("SHARDS is %q, completions %d", env["SHARDS"], shards.Spec.Completions)
	}
	// Kubernetes, not a shell, replaces $(VAR) by the container's variable.
	expand := func(args []string) []string {
		out := make([]string, len(args))
		for i, a := range args {
			out[i] = regexp.MustCompile(`\$\(([A-Z_]+)\)`).ReplaceAllStringFunc(a, func(m string) string {
				v, ok := env[m[2:len(m)-1]]
				if !ok {
					t.Errorf("%s: no variable %s in the container", a, m)
				}
				return v
			})
		}
		return out
	}
	args := expand(c.Args)
	line := strings.Join(args, " ")
	for _, want := range []string{"--shard=1/" + env["SHARDS"], "--start-at=next:", "--output=json", "--out=/results/shard-1.json"} {
		if !strings.Contains(line, want) {
			t.Errorf("the shard's command lacks %s: %s", want, line)
		}
	}
	// parse parses a command line as ratelab would, and returns the
	// command's positional arguments and its flags' values.
	parse := func(args []string) (positional []string, flag func(string) string) {
		t.Helper()
		root := newRootCmd(newIOStreams(io.Discard, io.Discard, noRedisURL))
		cmd, rest, err := root.Find(args)
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.ParseFlags(rest); err != nil {
			t.Errorf("%s: %v", strings.Join(args, " "), err)
		}
		return cmd.Flags().Args(), func(name string) string { return cmd.Flags().Lookup(name).Value.String() }
	}
	_, flag := parse(args)
	if _, err := parseStartAt(flag("start-at"), time.Now()); err != nil {
		t.Error(err)
	}
	out := flag("out")
	patterns, _ := parse(merge.Spec.Template.Spec.Containers[0].Args)
	if !slices.ContainsFunc(patterns, func(p string) bool { ok, _ := filepath.Match(p, out); return ok }) {
		t.Errorf("the merge reads %q, not the shard's %s", patterns, out)
	}
}

// TestKubernetesRLS: deploy/kubernetes/rls.yaml serves ratelab rls on
// ratelab's image, its configuration a ConfigMap mounted whole as the
// --config directory (a subPath mount is never updated), which is one
// ratelab rls loads once laid out as the kubelet lays it out. The command
// line is one ratelab rls parses; the ports its flags name are the
// container's, probed on /healthcheck and reached by the Service by name.
func TestKubernetesRLS(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("../../deploy/kubernetes/rls.yaml")
	if err != nil {
		t.Fatal(err)
	}
	type port struct {
		Name          string
		ContainerPort int    `yaml:"containerPort"`
		Port          int    // a Service's
		TargetPort    string `yaml:"targetPort"`
	}
	type probe struct {
		HTTPGet struct {
			Path string
			Port string
		} `yaml:"httpGet"`
	}
	type container struct {
		Image          string
		Command, Args  []string
		Ports          []port
		ReadinessProbe probe `yaml:"readinessProbe"`
		LivenessProbe  probe `yaml:"livenessProbe"`
		VolumeMounts   []struct {
			Name      string
			MountPath string `yaml:"mountPath"`
			SubPath   string `yaml:"subPath"`
			ReadOnly  bool   `yaml:"readOnly"`
		} `yaml:"volumeMounts"`
	}
	type volume struct {
		Name      string
		ConfigMap struct{ Name string } `yaml:"configMap"`
	}
	type doc struct {
		Kind     string
		Metadata struct {
			Name   string
			Labels map[string]string
		}
		Data map[string]string
		Spec struct {
			Selector struct { // a Deployment's; a Service's is the map itself
				MatchLabels map[string]string `yaml:"matchLabels"`
			}
			Ports    []port
			Template struct {
				Metadata struct{ Labels map[string]string }
				Spec     struct {
					SecurityContext struct {
						RunAsNonRoot bool `yaml:"runAsNonRoot"`
					} `yaml:"securityContext"`
					Containers []container
					Volumes    []volume
				}
			}
		}
	}
	docs := map[string]doc{}
	var serviceSelector map[string]string
	dec := yaml.NewDecoder(bytes.NewReader(b))
	for {
		var node yaml.Node
		if err := dec.Decode(&node); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		var d doc
		if err := node.Decode(&d); err != nil {
			t.Fatal(err)
		}
		if d.Kind == "Service" {
			var s struct {
				Spec struct{ Selector map[string]string }
			}
			if err := node.Decode(&s); err != nil {
				t.Fatal(err)
			}
			serviceSelector = s.Spec.Selector
		}
		if d.Metadata.Labels["app.kubernetes.io/component"] != "rls" {
			t.Errorf("%s %s: labels %v, want component rls", d.Kind, d.Metadata.Name, d.Metadata.Labels)
		}
		docs[d.Kind] = d
	}
	cm, deploy, svc := docs["ConfigMap"], docs["Deployment"], docs["Service"]
	if cm.Kind == "" || deploy.Kind == "" || svc.Kind == "" {
		t.Fatalf("want a ConfigMap, a Deployment and a Service; got %v", slices.Sorted(maps.Keys(docs)))
	}

	// The ConfigMap, laid out as the kubelet lays it out, is a
	// configuration ratelab rls loads.
	dir := reloadtest.NewConfigMap(t, t.TempDir(), cm.Data).Dir
	domains, _, err := limiter.ReadRules(context.Background(), rls.Options{ConfigDir: dir}.RulesConfig())
	if err != nil {
		t.Fatalf("the ConfigMap's files: %v", err)
	}
	if len(domains.Sets) != len(cm.Data) {
		t.Errorf("%d domains of %d files", len(domains.Sets), len(cm.Data))
	}

	pod := deploy.Spec.Template
	if len(pod.Spec.Containers) != 1 {
		t.Fatalf("%d containers, want 1", len(pod.Spec.Containers))
	}
	c := pod.Spec.Containers[0]
	if c.Image != "REGISTRY/ratelab:VERSION" || len(c.Command) != 0 {
		t.Errorf("runs %q %q: want ratelab's image, REGISTRY/ratelab:VERSION as bench-job.yaml names it, and its entrypoint", c.Image, c.Command)
	}
	if !pod.Spec.SecurityContext.RunAsNonRoot {
		t.Error("the pod may run as root")
	}
	root := newRootCmd(newIOStreams(io.Discard, io.Discard, noRedisURL))
	cmd, rest, err := root.Find(c.Args)
	if err != nil {
		t.Fatal(err)
	}
	if cmd.Name() != "rls" {
		t.Fatalf("runs ratelab %s, want rls", cmd.Name())
	}
	if err := cmd.ParseFlags(rest); err != nil {
		t.Fatalf("%s: %v", strings.Join(c.Args, " "), err)
	}
	if args := cmd.Flags().Args(); len(args) != 0 {
		t.Errorf("arguments %q: ratelab rls takes none", args)
	}
	flag := func(name string) string { return cmd.Flags().Lookup(name).Value.String() }
	if !strings.HasPrefix(flag("redis"), "redis://") {
		t.Errorf("--redis %q: want the Redis to share", flag("redis"))
	}

	// --config is the ConfigMap's volume, mounted whole.
	var mounted bool
	for _, m := range c.VolumeMounts {
		if m.MountPath != flag("config") {
			continue
		}
		mounted = true
		if m.SubPath != "" || !m.ReadOnly {
			t.Errorf("%s is mounted with subPath %q, read-only %v: want the whole volume (subPath is never updated), read-only", m.MountPath, m.SubPath, m.ReadOnly)
		}
		i := slices.IndexFunc(pod.Spec.Volumes, func(v volume) bool { return v.Name == m.Name })
		if i < 0 || pod.Spec.Volumes[i].ConfigMap.Name != cm.Metadata.Name {
			t.Errorf("--config %s is volume %s, not one of ConfigMap %q", m.MountPath, m.Name, cm.Metadata.Name)
		}
	}
	if !mounted {
		t.Errorf("nothing is mounted at --config %s", flag("config"))
	}

	// --grpc and --http listen on the container's ports of those names,
	// the probes ask /healthcheck on http, and the Service reaches each port
	// by its name.
	ports := map[string]int{}
	for _, p := range c.Ports {
		ports[p.Name] = p.ContainerPort
	}
	for _, name := range []string{"grpc", "http"} {
		_, listen, _ := strings.Cut(flag(name), ":")
		if n, err := strconv.Atoi(listen); err != nil || n != ports[name] {
			t.Errorf("--%s %s; the container's port %s is %d", name, flag(name), name, ports[name])
		}
	}
	for what, p := range map[string]probe{"readiness": c.ReadinessProbe, "liveness": c.LivenessProbe} {
		if p.HTTPGet.Path != "/healthcheck" || p.HTTPGet.Port != "http" {
			t.Errorf("the %s probe asks %s on %q, want /healthcheck on http", what, p.HTTPGet.Path, p.HTTPGet.Port)
		}
	}
	want := map[string]int{"grpc": 8081, "http": 8080}
	if len(svc.Spec.Ports) != len(want) {
		t.Errorf("the Service has %d ports, want grpc and http", len(svc.Spec.Ports))
	}
	for _, p := range svc.Spec.Ports {
		if p.Port != want[p.Name] || p.TargetPort != p.Name || ports[p.Name] == 0 {
			t.Errorf("the Service's port %s: %d to %q; want %d to the container's port %s", p.Name, p.Port, p.TargetPort, want[p.Name], p.Name)
		}
	}
	for what, labels := range map[string]map[string]string{"the Service": serviceSelector, "the Deployment": deploy.Spec.Selector.MatchLabels} {
		if len(labels) == 0 {
			t.Errorf("%s selects every pod", what)
		}
		for k, v := range labels {
			if pod.Metadata.Labels[k] != v {
				t.Errorf("%s selects %s=%s, which the pods are not labelled", what, k, v)
			}
		}
	}
}
