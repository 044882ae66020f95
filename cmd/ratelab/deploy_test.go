package main

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
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
