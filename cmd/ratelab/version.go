package main

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"

	"github.com/spf13/cobra"
)

// version and commit are set by make build:
// -ldflags "-X main.version=… -X main.commit=…". Otherwise they come from
// the module's build information.
var (
	version = ""
	commit  = ""
)

func newVersionCmd(io *ioStreams) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print ratelab's version",
		Args:  noArgs,
		RunE: func(*cobra.Command, []string) error {
			_, err := fmt.Fprintf(io.out, "ratelab %s (%s, %s/%s)\n", buildVersion(), runtime.Version(), runtime.GOOS, runtime.GOARCH)
			return err
		},
	}
}

// buildVersion is "v1.2.3 0123456789ab": the version and the commit.
func buildVersion() string {
	v, c := version, commit
	if bi, ok := debug.ReadBuildInfo(); ok {
		if v == "" {
			v = bi.Main.Version
		}
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" && c == "" {
				c = s.Value
			}
		}
	}
	if v == "" {
		v = "unknown"
	}
	if len(c) > 12 {
		c = c[:12]
	}
	if c != "" && !strings.HasSuffix(v, c) { // a pseudo-version ends with it already
		v += " " + c
	}
	return v
}
