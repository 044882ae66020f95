package main

import (
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/pflag"

	"github.com/ratelab/ratelab/algorithms"
)

// scriptOptions are the flags that bring a user's own Lua limiter.
type scriptOptions struct {
	Path string
	Args string
	Name string
}

func (o *scriptOptions) bind(f *pflag.FlagSet) {
	f.StringVar(&o.Path, "script", "", "a Lua limiter of your own to race beside the others (KEYS[1] is the client's key)")
	f.StringVar(&o.Args, "script-args", algorithms.DefaultScriptArgs,
		"ARGV of --script: words, and the placeholders {limit} {window_ms} {now_ms} {member}")
	f.StringVar(&o.Name, "script-name", "", "name of --script in reports (default script:<file name>)")
}

// load reads the script, when there is one. Errors name the flag.
func (o *scriptOptions) load() ([]algorithms.UserScript, error) {
	if o.Path == "" {
		if o.Name != "" {
			return nil, usagef("--script-name needs --script")
		}
		return nil, nil
	}
	src, err := os.ReadFile(o.Path)
	if err != nil {
		return nil, usagef("--script: %w", err)
	}
	name := o.Name
	if name == "" {
		name = "script:" + strings.TrimSuffix(filepath.Base(o.Path), ".lua")
	}
	if _, taken := algorithms.Lookup(name); taken {
		return nil, usagef("--script-name %q is a built-in limiter's name", name)
	}
	s := algorithms.UserScript{Name: name, Source: string(src), Args: o.Args}
	if err := s.Validate(); err != nil {
		return nil, usagef("--script: %w", err)
	}
	return []algorithms.UserScript{s}, nil
}
