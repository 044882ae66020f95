package main

import (
	"bytes"
	"errors"
	"io"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// TestKubernetesJob: deploy/kubernetes/bench-job.yaml runs every shard at
// once as an Indexed Job whose index is the shard, and then one merge; every
// flag it passes is one ratelab has.
func TestKubernetesJob(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("../../deploy/kubernetes/bench-job.yaml")
	if err != nil {
		t.Fatal(err)
	}
	type container struct {
		Env  []struct{ Name, Value string }
		Args []string
	}
	type doc struct {
		Kind     string
		Metadata struct{ Name string }
		Spec     struct {
			CompletionMode string `yaml:"completionMode"`
			Completions    int
			Parallelism    int
			Template       struct {
				Spec struct{ Containers []container }
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
		if d.Kind == "Job" {
			jobs[d.Metadata.Name] = d
		}
	}
	shards, merge := jobs["ratelab-bench"], jobs["ratelab-merge"]
	if shards.Spec.CompletionMode != "Indexed" || shards.Spec.Completions < 2 || shards.Spec.Parallelism != shards.Spec.Completions {
		t.Fatalf("the bench Job: %+v; want an Indexed Job running every shard at once", shards.Spec)
	}
	c := shards.Spec.Template.Spec.Containers[0]
	var n string
	for _, e := range c.Env {
		if e.Name == "SHARDS" {
			n = e.Value
		}
	}
	if n != strconv.Itoa(shards.Spec.Completions) {
		t.Fatalf("SHARDS is %q, completions %d", n, shards.Spec.Completions)
	}
	args := strings.Join(c.Args, " ")
	for _, want := range []string{`--shard "$JOB_COMPLETION_INDEX/$SHARDS"`, "--start-at", "--output json"} {
		if !strings.Contains(args, want) {
			t.Errorf("the shard's command lacks %s: %s", want, args)
		}
	}
	root := newRootCmd(newIOStreams(io.Discard, io.Discard, noRedisURL))
	check := func(line string, path ...string) {
		cmd, _, err := root.Find(path)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range regexp.MustCompile(`(?:^|\s)--([a-z-]+)`).FindAllStringSubmatch(line, -1) {
			if cmd.Flags().Lookup(m[1]) == nil {
				t.Errorf("%s has no flag --%s", cmd.CommandPath(), m[1])
			}
		}
	}
	check(args, "bench", "http")
	check(strings.Join(merge.Spec.Template.Spec.Containers[0].Args, " "), "report", "merge")
}
