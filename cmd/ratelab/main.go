// Command ratelab is a lab for Redis rate limiters: it reproduces the race in
// limiters written as check-then-act, and measures the ones that hold.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"
)

// Exit codes.
const (
	exitOK        = 0
	exitError     = 1 // runtime error: Redis unreachable, a failed run
	exitUsage     = 2 // bad flags or arguments; nothing was started or sent
	exitThreshold = 3 // a --fail-on… or --max-… threshold was crossed
)

func main() {
	// go-redis logs dial retries of its own; ratelab reports errors itself.
	redis.SetLogger(quietLogger{})
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run executes one command line and maps its error to an exit code, once.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return runEnv(ctx, args, stdout, stderr, os.Getenv)
}

// runEnv is run with the environment read through getenv.
func runEnv(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	streams := newIOStreams(stdout, stderr, getenv)
	root := newRootCmd(streams)
	root.SetArgs(args)
	cmd, err := root.ExecuteContextC(ctx)
	if closeErr := streams.closeReport(); err == nil {
		err = closeErr
	}
	if err == nil {
		return exitOK
	}
	if ctx.Err() != nil { // Ctrl-C or SIGTERM: whatever failed, it failed because of that
		fmt.Fprintln(stderr, "ratelab: interrupted")
		return exitError
	}
	fmt.Fprintf(stderr, "ratelab: %v\n", err)
	var usage *usageError
	var threshold *thresholdError
	switch {
	case errors.As(err, &threshold):
		return exitThreshold
	case errors.As(err, &usage), isCobraUsage(err):
		if cmd == nil {
			cmd = root
		}
		fmt.Fprintf(stderr, "Run '%s --help' for usage.\n", cmd.CommandPath())
		return exitUsage
	}
	return exitError
}

func newRootCmd(io *ioStreams) *cobra.Command {
	root := &cobra.Command{
		Use:   "ratelab",
		Short: "A lab for Redis rate limiters",
		Long: "ratelab reproduces the race in rate limiters written as check-then-act against a real Redis,\n" +
			"and measures the ones that hold.",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetOut(io.out)
	root.SetErr(io.err)
	root.SetFlagErrorFunc(flagParseError)
	// --out FILE of a command with --output (outputFlag) takes the report.
	root.PersistentPreRunE = func(c *cobra.Command, _ []string) error {
		if out := c.Flags().Lookup("out"); out != nil && out.Changed && c.Flags().Lookup("output") != nil {
			return io.reportTo(out.Value.String())
		}
		return nil
	}
	root.AddCommand(newRaceCmd(io), newCompareCmd(io), newSkewCmd(io), newEdgeCmd(io), newRLSCmd(io), newDrillCmd(io), newBenchCmd(io),
		newReportCmd(io), newRulesCmd(io), newVersionCmd(io), newDocsCmd())
	root.InitDefaultCompletionCmd()
	refuseUnknownSubcommands(root)
	warnOn(root, io.err)
	return root
}

// warnOn sends the flags' warnings (a deprecated flag or shorthand) to w,
// the error stream: cobra would print them on the output stream, into a
// report such as -o json's.
func warnOn(cmd *cobra.Command, w io.Writer) {
	cmd.Flags().SetOutput(w)
	for _, c := range cmd.Commands() {
		warnOn(c, w)
	}
}

// refuseUnknownSubcommands makes every command that only groups others
// (bench, report, completion) answer an unknown subcommand with exit 2,
// not with help and exit 0.
func refuseUnknownSubcommands(cmd *cobra.Command) {
	for _, c := range cmd.Commands() {
		refuseUnknownSubcommands(c)
	}
	if cmd.HasSubCommands() && cmd.Run == nil && cmd.RunE == nil && cmd.HasParent() {
		cmd.Args = cobra.ArbitraryArgs
		cmd.RunE = func(c *cobra.Command, args []string) error {
			if len(args) > 0 {
				if meant := commandSuggestions(c, args[0]); len(meant) > 0 {
					return usagef("unknown command %q for %q (did you mean %s?)", args[0], c.CommandPath(), orList(meant))
				}
				return usagef("unknown command %q for %q", args[0], c.CommandPath())
			}
			return c.Help()
		}
	}
}

// usageError is bad input: exit status 2.
type usageError struct{ err error }

func (e *usageError) Error() string { return e.err.Error() }
func (e *usageError) Unwrap() error { return e.err }

func usagef(format string, a ...any) error { return &usageError{fmt.Errorf(format, a...)} }

// thresholdError is a crossed --fail-on… or --max-… threshold: exit status 3.
type thresholdError struct{ msg string }

func (e *thresholdError) Error() string { return e.msg }

// isCobraUsage recognises cobra's own usage errors, which carry no type.
func isCobraUsage(err error) bool {
	msg := err.Error()
	for _, p := range []string{"unknown command", "unknown flag", "unknown shorthand flag", "accepts ", "requires ", "invalid argument"} {
		if strings.HasPrefix(msg, p) {
			return true
		}
	}
	return false
}

// noArgs rejects positional arguments as a usage error.
func noArgs(cmd *cobra.Command, args []string) error {
	if len(args) > 0 {
		return usagef("%s takes no arguments (got %q)", cmd.CommandPath(), strings.Join(args, " "))
	}
	return nil
}

type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}
