package main

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/ratelab/ratelab/algorithms"
	"github.com/ratelab/ratelab/internal/field"
	"github.com/ratelab/ratelab/internal/redisrun"
	"github.com/ratelab/ratelab/reports"
)

// flagNames maps the fields of a library's configuration to the flags
// that set them, for one command.
type flagNames map[string]string

// flagError turns a library's field error into a usage error that names
// the flag, through names (and those of the shared groups); any other
// error becomes a usage error as it is.
func flagError(err error, names ...flagNames) error {
	var fe *field.Error
	if !errors.As(err, &fe) {
		return &usageError{err}
	}
	return &usageError{errors.New(fe.Render(func(f string) string {
		for _, n := range names {
			if flag, ok := n[f]; ok {
				return flag
			}
		}
		return strings.ToLower(f)
	}))}
}

// policyNames are the flags of a policy given as --limit and --window.
var policyNames = flagNames{"Limit": "--limit", "Window": "--window"}

// redisFlags are the flags that name a Redis; every command that decides
// in one binds them.
type redisFlags struct {
	url, sentinel       string
	cluster, local      bool
	ca, cert, key       string
	insecure, withLocal bool
}

func (r *redisFlags) bind(f *pflag.FlagSet, withLocal bool) {
	r.withLocal = withLocal
	f.StringVar(&r.url, "redis", "", "Redis URL: redis://, rediss:// or unix://, or comma-separated URLs of a Cluster "+
		"(default $REDIS_URL, else a private redis-server)")
	f.BoolVar(&r.cluster, "cluster", false, "treat --redis as a seed of a Redis Cluster")
	f.StringVar(&r.sentinel, "redis-sentinel", "", "NAME@HOST:PORT,...: the primary that these redis-sentinels know as NAME, "+
		"followed through failovers (instead of --redis)")
	if withLocal {
		f.BoolVar(&r.local, "cluster-local", false, "start a private three-master Redis Cluster and run on it")
	}
	f.StringVar(&r.ca, "redis-ca", "", "PEM file of the certificates that sign the server's, for rediss:// (default: the system's)")
	f.StringVar(&r.cert, "redis-cert", "", "PEM file of a client certificate, for servers that ask for one (with --redis-key)")
	f.StringVar(&r.key, "redis-key", "", "PEM file of the client certificate's key")
	f.BoolVar(&r.insecure, "redis-insecure", false, "do not verify the server's certificate (rediss://, test servers only)")
}

// config resolves the flags (and REDIS_URL) into a target, checked; its
// errors name the flag. Nothing is sent.
func (r *redisFlags) config(io *ioStreams) (redisrun.TargetConfig, error) {
	url, source := r.url, "--redis"
	if url == "" && !r.local && r.sentinel == "" {
		url, source = io.getenv("REDIS_URL"), "REDIS_URL"
		if url == "" {
			source = "--redis (or REDIS_URL)"
		}
	}
	c := redisrun.TargetConfig{URL: url, Cluster: r.cluster, ClusterLocal: r.local, CAFile: r.ca, CertFile: r.cert,
		KeyFile: r.key, Insecure: r.insecure, Sentinel: r.sentinel}
	if err := c.Validate(); err != nil {
		return c, flagError(err, flagNames{"URL": source, "Cluster": "--cluster", "ClusterLocal": "--cluster-local",
			"CAFile": "--redis-ca", "CertFile": "--redis-cert", "KeyFile": "--redis-key", "Insecure": "--redis-insecure",
			"Sentinel": "--redis-sentinel"})
	}
	return c, nil
}

// openTarget opens the Redis c names and says on the error stream which
// one it is, and when it is the embedded fallback, what that means.
func openTarget(ctx context.Context, io *ioStreams, c redisrun.TargetConfig, command string) (*redisrun.Target, error) {
	t, err := redisrun.Open(ctx, c)
	if err != nil {
		return nil, err
	}
	io.notef("%s on %s", command, t)
	if t.Mode == string(redisrun.Embedded) {
		io.notef("no redis-server on PATH: results come from an embedded in-process Redis (miniredis), not a Redis " +
			"server. Install redis-server or pass --redis URL for real numbers.")
	}
	return t, nil
}

// outputFlag is --output, the report's format, and --out, the file it is
// written to instead of standard output (for a container with no shell to
// redirect it): the root command's reportTo hook sends io.out there.
type outputFlag struct{ value, file string }

func (o *outputFlag) bind(cmd *cobra.Command) {
	cmd.Flags().StringVarP(&o.value, "output", "o", "table", "output format: table, markdown or json")
	_ = cmd.RegisterFlagCompletionFunc("output", cobra.FixedCompletions([]string{"table", "markdown", "json"}, cobra.ShellCompDirectiveNoFileComp))
	cmd.Flags().StringVar(&o.file, "out", "", "write the report to FILE instead of standard output")
}

func (o *outputFlag) format() (reports.Format, error) {
	f, err := reports.ParseFormat(o.value)
	if err != nil {
		return "", usagef("--output: %w", err)
	}
	return f, nil
}

// scriptFlags bring a user's own Lua limiter.
type scriptFlags struct {
	path, args, name string
	argsSet          bool
}

func (s *scriptFlags) bind(f *pflag.FlagSet) {
	f.StringVar(&s.path, "script", "", "a Lua limiter of your own to run beside the others (KEYS[1] is the client's key)")
	f.StringVar(&s.args, "script-args", algorithms.DefaultScriptArgs,
		"ARGV of --script: words, and the placeholders {limit} {window_ms} {now_ms} {member}")
	f.StringVar(&s.name, "script-name", "", "name of --script in reports (default script:<file name>)")
}

// load reads the script, when there is one. Errors name the flag.
func (s *scriptFlags) load(f *pflag.FlagSet) ([]algorithms.UserScript, error) {
	if s.path == "" {
		for _, name := range []string{"script-args", "script-name"} {
			if f.Changed(name) {
				return nil, usagef("--%s needs --script", name)
			}
		}
		return nil, nil
	}
	u, err := algorithms.ReadUserScript(s.path, s.args, s.name)
	if err != nil {
		return nil, flagError(err, flagNames{"Path": "--script", "Name": "--script-name", "Args": "--script"})
	}
	return []algorithms.UserScript{u}, nil
}

// scriptNames name the fields of a configuration that hold scripts.
var scriptNames = flagNames{"Scripts": "--script-args"}

// limiterHelp lists the registered limiters (or only the algorithms) for --help.
func limiterHelp(onlyAlgorithms bool) string {
	var b strings.Builder
	width := 18 // the names' column, wider when a listed name needs it
	for _, in := range algorithms.Registered() {
		if in.Algorithm || !onlyAlgorithms {
			width = max(width, len(in.Name)+1)
		}
	}
	for _, in := range algorithms.Registered() {
		if in.Algorithm || !onlyAlgorithms {
			fmt.Fprintf(&b, "  %-*s %s\n", width, in.Name, in.Description)
		}
	}
	return b.String()
}

// complete offers words for a flag's value.
func complete(cmd *cobra.Command, flag string, words ...string) {
	_ = cmd.RegisterFlagCompletionFunc(flag, cobra.FixedCompletions(words, cobra.ShellCompDirectiveNoFileComp))
}
