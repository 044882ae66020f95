package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/ratelab/ratelab/internal/field"
	"github.com/ratelab/ratelab/internal/plural"
	"github.com/ratelab/ratelab/limiter"
	"github.com/ratelab/ratelab/rls"
	"github.com/ratelab/ratelab/rules"
)

// rulesExplainOptions are the flags of ratelab rules explain.
type rulesExplainOptions struct {
	file, request, from, host string
	headers                   []string
	hostSet                   bool
}

// newRulesCmd is ratelab rules: check a rules file, and explain what it
// does to a request, without starting anything.
func newRulesCmd(io *ioStreams) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "rules",
		Short: "Check a rules file and explain which limits a request meets",
		Long: `A rules file is envoyproxy/ratelimit's YAML, extended: descriptors matched on a request's method,
path, host, headers, query and address, each carrying one or more limits (docs/rules.md).
rules check and rules explain read one as the gateway would, and start nothing: check a change
before the gateway reloads it.`,
	}
	var checkOpts rulesCheckOptions
	check := &cobra.Command{
		Use:   "check FILE|DIR",
		Short: "Validate a rules file, or a rate limit service's config directory, and say in words what each limit does",
		Long: `rules check reads FILE as the gateway would and prints its domain, its version (a hash of the
file) and each limit in words. It says which limits take a second Redis call on a Redis Cluster:
those under another hash tag, such as a global cap. A mistake is named by line and field, exit 2.

Given a directory, or a file with --service, it reads it as ratelab rls reads its --config:
envoyproxy/ratelimit's files, any descriptor key, each domain in words; --merge-domains as rls's.
A limit that names no algorithm is a fixed window aligned to its unit there (as
envoyproxy/ratelimit's), and the sliding log in the gateway: check says which. What the files hold
that is accepted without taking effect is listed as warnings, and files of a directory that are
not read are named.`,
		Example: `  ratelab rules check rules.yaml
  ratelab rules check /etc/ratelimit/config
  ratelab rules check --service config/ratelimit.yaml --merge-domains`,
		Args: oneFile("rules check"),
		RunE: func(_ *cobra.Command, args []string) error {
			checkOpts.path = args[0]
			return runRulesCheck(io.out, checkOpts)
		},
	}
	check.Flags().BoolVar(&checkOpts.service, "service", false, "read the file as one file of ratelab rls's --config directory (a directory always is)")
	check.Flags().BoolVar(&checkOpts.merge, "merge-domains", false, "merge the files of one domain, as ratelab rls --merge-domains")
	var opts rulesExplainOptions
	explain := &cobra.Command{
		Use:   "explain FILE",
		Short: "Say which limits of a rules file a request meets, with their counters",
		Long: `rules explain reads FILE as the gateway would and matches one request against it: the limits it
meets, each with its counter (readable, and the Redis key), and those another limit replaced.`,
		Example: `  ratelab rules explain rules.yaml --request 'GET /search?q=redis' -H 'X-Consumer-Id: alice' -H 'X-Plan: gold'
  ratelab rules explain rules.yaml --request 'POST /items' --from 203.0.113.7 --host api.example.com`,
		Args: oneFile("rules explain"),
		RunE: func(c *cobra.Command, args []string) error {
			opts.file, opts.hostSet = args[0], c.Flags().Changed("host")
			return runRulesExplain(io.out, opts)
		},
	}
	f := explain.Flags()
	f.StringVar(&opts.request, "request", "GET /", "the request line: METHOD /path?query")
	f.StringArrayVarP(&opts.headers, "header", "H", nil, "a header of the request, 'Name: value' (repeatable)")
	f.StringVar(&opts.from, "from", "127.0.0.1", "the client's address, as the gateway sees it after trusted proxies")
	f.StringVar(&opts.host, "host", "localhost", "the host the request is sent to (-H 'Host: NAME' sets it too)")
	cmd.AddCommand(check, explain)
	return cmd
}

func oneFile(command string) cobra.PositionalArgs {
	return func(_ *cobra.Command, args []string) error {
		if len(args) != 1 {
			return usagef("%s takes one rules file (got %d arguments)", command, len(args))
		}
		return nil
	}
}

// readRules reads and parses a rules file for the gateway; every mistake
// is a usage error.
func readRules(path string) (*rules.Set, error) {
	src, err := os.ReadFile(path)
	if err != nil {
		return nil, usagef("%w", err)
	}
	set, err := rules.Parse(path, src, rules.ForGateway())
	if err != nil {
		return nil, &usageError{err}
	}
	return set, nil
}

// rulesCheckOptions are the flags of ratelab rules check.
type rulesCheckOptions struct {
	path           string
	service, merge bool
}

func runRulesCheck(w io.Writer, opts rulesCheckOptions) error {
	info, err := os.Stat(opts.path)
	if err != nil {
		return usagef("%w", err)
	}
	if !info.IsDir() && !opts.service {
		if opts.merge {
			return usagef("--merge-domains is for a rate limit service's files: give a directory, or --service")
		}
		set, err := readRules(opts.path)
		if err != nil {
			return err
		}
		if err := set.Describe(w); err != nil {
			return err
		}
		fmt.Fprintf(w, "A limit that names no algorithm is the sliding log, as the gateway reads it (ratelab rls reads it as a fixed window).\n")
		_, err = io.WriteString(w, clusterCalls(set))
		return err
	}
	cfg := rls.Options{ConfigDir: opts.path, MergeDomains: opts.merge}.RulesConfig()
	cfg.Dir = info.IsDir()
	served, skipped, err := limiter.ReadRules(context.Background(), cfg)
	if err != nil {
		return &usageError{err}
	}
	what := "file"
	if cfg.Dir {
		what = "directory"
	}
	fmt.Fprintf(w, "%s %s, as ratelab rls reads it: version %s, %s.\n"+
		"A limit that names no algorithm is a fixed window aligned to its unit, as envoyproxy/ratelimit's (the gateway reads it as the sliding log).\n",
		what, opts.path, served.Version, plural.Count(len(served.Sets), "domain"))
	for _, domain := range slices.Sorted(maps.Keys(served.Sets)) {
		set := served.Sets[domain]
		if err := set.Describe(w); err != nil {
			return err
		}
		if _, err := io.WriteString(w, clusterCalls(set)); err != nil {
			return err
		}
	}
	for _, warning := range served.Warnings {
		fmt.Fprintf(w, "warning: %v\n", warning)
	}
	if len(skipped) > 0 {
		fmt.Fprintf(w, "not read (only *.yaml and *.yml files are): %s\n", strings.Join(skipped, ", "))
	}
	return nil
}

// clusterCalls says how a request's limits are decided on a Redis Cluster:
// one call per hash tag.
func clusterCalls(set *rules.Set) string {
	var tags []string
	byTag := map[string][]string{}
	for _, l := range set.Limits() {
		if l.Unlimited {
			continue
		}
		tag := "per value of " + l.TagKey()
		if l.Global() {
			tag = "the domain (one shared counter)"
		}
		if _, ok := byTag[tag]; !ok {
			tags = append(tags, tag)
		}
		byTag[tag] = append(byTag[tag], l.ID)
	}
	var b strings.Builder
	switch len(tags) {
	case 0:
		b.WriteString("Every limit is unlimited: no request reaches Redis.\n")
	case 1:
		fmt.Fprintf(&b, "On a Redis Cluster, every limit a request meets is in one slot (hash tag: %s): one call.\n", tags[0])
	default:
		b.WriteString("On a Redis Cluster, a request's limits are decided in one call per hash tag:\n")
		for i, t := range tags {
			call := "first call"
			if i > 0 {
				call = "another call"
			}
			fmt.Fprintf(&b, "  %s: %s (%s)\n", t, strings.Join(byTag[t], ", "), call)
		}
		b.WriteString("A request that meets limits under two tags takes a second call. When a later call denies, the\n" +
			"earlier one's consumption is given back, so that the request is admitted by all or none; a request\n" +
			"decided in between may see that consumption for a moment. On a single Redis every request is one call.\n")
	}
	return b.String()
}

func runRulesExplain(w io.Writer, opts rulesExplainOptions) error {
	req, err := explainRequest(opts)
	if err != nil {
		return err
	}
	set, err := readRules(opts.file)
	if err != nil {
		return err
	}
	applied, replaced := set.Explain(req)
	var b strings.Builder
	target := req.Path
	if req.Query != "" {
		target += "?" + req.Query
	}
	fmt.Fprintf(&b, "%s %s from %s to host %s", req.Method, target, req.RemoteAddress, req.Host)
	names := slices.Sorted(maps.Keys(req.Header))
	for _, name := range names {
		fmt.Fprintf(&b, ", %s: %s", name, http.Header(req.Header).Get(name))
	}
	fmt.Fprintf(&b, "\ndomain %s, version %s (%s)\n", set.Domain, set.Version, set.File)
	switch len(applied) {
	case 0:
		b.WriteString("meets no limit: admitted without asking Redis\n")
	case 1:
		b.WriteString("meets 1 limit:\n")
	default:
		fmt.Fprintf(&b, "meets %d limits:\n", len(applied))
	}
	for _, h := range applied {
		fmt.Fprintf(&b, "  %s: %s\n    counter %s\n", h.Limit.ID, h.Limit, h.Label())
		if h.Key != "" {
			fmt.Fprintf(&b, "    key     %s\n", h.Key)
		}
	}
	if len(replaced) > 0 {
		b.WriteString("replaced (met, but a limit also met replaces them):\n")
		for _, h := range replaced {
			fmt.Fprintf(&b, "  %s, by %s: %s\n", h.Limit.ID, h.ReplacedBy, h.Limit)
		}
	}
	_, err = io.WriteString(w, b.String())
	return err
}

// explainRequest reads the request of rules explain from its flags.
func explainRequest(opts rulesExplainOptions) (rules.Request, error) {
	var req rules.Request
	method, target, ok := strings.Cut(strings.TrimSpace(opts.request), " ")
	target = strings.TrimSpace(target)
	if !ok || method == "" || strings.ContainsAny(method, " \t/") {
		return req, usagef("--request %q: want METHOD /path?query, such as 'GET /search?q=redis'", opts.request)
	}
	u, err := url.ParseRequestURI(target)
	if err != nil || !strings.HasPrefix(target, "/") {
		return req, usagef("--request %q: the target is a path, such as /search?q=redis", opts.request)
	}
	addr, err := netip.ParseAddr(opts.from)
	if err != nil {
		return req, usagef("--from %q: not an IP address", opts.from)
	}
	header := http.Header{}
	for _, h := range opts.headers {
		name, value, ok := strings.Cut(h, ":")
		name = strings.TrimSpace(name)
		if !ok || name == "" || strings.ContainsAny(name, " \t") {
			return req, usagef("--header %q: want 'Name: value'", h)
		}
		header.Add(name, strings.TrimSpace(value))
	}
	host := opts.host
	if h := header.Get("Host"); h != "" {
		if !opts.hostSet {
			host = h
		}
		header.Del("Host")
	}
	return rules.Request{Method: method, Path: u.Path, Query: u.RawQuery, Host: host,
		RemoteAddress: addr.Unmap().String(), Header: header}, nil
}

// shorthandNames are the flags of the one-rule form.
var shorthandNames = flagNames{"Limits": "--limit", "KeyBy": "--key-by", "Algorithm": "--algorithm"}

// limitRules builds the rules that --limit (repeatable), --key-by and
// --algorithm stand for; a mistake names the flag.
func limitRules(limits []string, keyBy, algorithm string) (*rules.Set, error) {
	set, err := rules.Shorthand{Limits: limits, KeyBy: keyBy, Algorithm: algorithm}.Set()
	var re *rules.Error
	if errors.As(err, &re) {
		return nil, flagError(&field.Error{Field: re.Field, Reason: ": " + re.Message}, shorthandNames)
	}
	return set, err
}
