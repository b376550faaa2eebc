package main

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/ratelimit-gateway/gateway/internal/enumflag"
)

// Exit codes, chosen here and nowhere else.
const (
	exitOK      = 0
	exitFailure = 1 // a command failed, or `validate` found errors
	exitUsage   = 2 // bad flags or arguments
)

// envPrefix prefixes the environment variable of every flag:
// --redis-timeout is GATEWAY_REDIS_TIMEOUT.
const envPrefix = "GATEWAY_"

// usageError marks errors in how the command was called.
type usageError struct{ error }

// exitError carries an exit code for a failure already reported.
type exitError int

func (e exitError) Error() string { return fmt.Sprintf("exit %d", int(e)) }

// Execute runs the command line args and returns the process exit code.
func Execute(args []string) int {
	return execute(args, os.Stdout, os.Stderr)
}

// commandLine returns the arguments Execute takes for the process's
// argv: those after the program's name, or, when it is named ratelimit,
// `rls --from-env` and those, so that the binary stands in for
// envoyproxy/ratelimit's as it is invoked (docs/rls.md, "Running as
// envoyproxy/ratelimit").
func commandLine(argv []string) []string {
	if len(argv) == 0 {
		return nil
	}
	if strings.TrimSuffix(filepath.Base(argv[0]), ".exe") == "ratelimit" {
		return append([]string{"rls", "--from-env"}, argv[1:]...)
	}
	return argv[1:]
}

func execute(args []string, stdout, stderr io.Writer) int {
	root := newRootCmd(stdout, stderr)
	root.SetArgs(args)
	err := root.Execute()
	var code exitError
	var uerr usageError
	switch {
	case err == nil:
		return exitOK
	case errors.As(err, &code):
		return int(code)
	case errors.As(err, &uerr):
		fmt.Fprintf(stderr, "gateway: %v\n", err)
		return exitUsage
	default:
		fmt.Fprintf(stderr, "gateway: %v\n", err)
		return exitFailure
	}
}

func newRootCmd(stdout, stderr io.Writer) *cobra.Command {
	root := &cobra.Command{
		Use:   "gateway",
		Short: "A rate-limiting reverse proxy",
		Long: `gateway is a reverse proxy that limits every caller (identified by an app ID
header, or by client IP) per API with sliding-window limits from a rule file (YAML, JSON or XML).

Every flag can also be set from the environment as GATEWAY_<FLAG>, e.g.
GATEWAY_UPSTREAM=http://127.0.0.1:8081. A flag given on the command line wins.`,
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			return flagsFromEnv(cmd.Flags())
		},
		// Runnable, so that an unknown command is a usage error (exit 2)
		// rather than cobra's plain one.
		Args: cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return usageError{fmt.Errorf("unknown command %q; run 'gateway --help' for the commands", args[0])}
			}
			return cmd.Help()
		},
	}
	// --version prints what `gateway version` prints.
	root.Version = versionString()
	root.SetVersionTemplate("{{.Name}} {{.Version}}\n")
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	root.AddCommand(newServeCmd(), newRLSCmd(), newValidateCmd(), newMatchCmd(), newReplayCmd(), newRulesCmd(), newTopCmd(), newUsageCmd(), newHealthCmd(), newVersionCmd())
	// cobra's completion command prints its help for a shell it does not
	// know, and succeeds: make that a usage error.
	root.InitDefaultCompletionCmd()
	for _, c := range root.Commands() {
		if c.Name() == "completion" {
			c.Args = cobra.ArbitraryArgs
			c.RunE = func(cmd *cobra.Command, args []string) error {
				if len(args) > 0 {
					return usageError{fmt.Errorf("completion: unknown shell %q; use bash, zsh, fish or powershell", args[0])}
				}
				return cmd.Help()
			}
		}
	}
	return root
}

// flagsFromEnv sets every flag not given on the command line from its
// GATEWAY_ environment variable, if set.
func flagsFromEnv(fs *pflag.FlagSet) error {
	var err error
	fs.VisitAll(func(f *pflag.Flag) {
		if err != nil || f.Changed || f.Name == "help" {
			return
		}
		name := envName(f.Name)
		v, ok := os.LookupEnv(name)
		if !ok {
			return
		}
		if serr := fs.Set(f.Name, v); serr != nil {
			err = usageError{fmt.Errorf("%s=%q: %w", name, v, serr)}
		}
	})
	return err
}

func envName(flag string) string {
	return envPrefix + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
}

// logFormat is --log-format, a pflag.Value.
type logFormat string

const (
	logJSON logFormat = "json"
	logText logFormat = "text"
)

func (f logFormat) String() string { return string(f) }

func (f *logFormat) Set(s string) error { return enumflag.Set(f, s, logJSON, logText) }

func (*logFormat) Type() string { return "json|text" }

// levelFlag is --log-level, a pflag.Value; the zero value is info.
type levelFlag struct{ slog.Level }

func (l *levelFlag) Set(s string) error {
	if err := l.UnmarshalText([]byte(s)); err != nil {
		return fmt.Errorf("%q is not debug, info, warn or error", s)
	}
	return nil
}

func (l *levelFlag) String() string { return strings.ToLower(l.Level.String()) }

func (*levelFlag) Type() string { return "level" }

// newLogger builds the one logger from --log-format and --log-level.
func newLogger(w io.Writer, format logFormat, level levelFlag) *slog.Logger {
	opts := &slog.HandlerOptions{Level: level.Level, ReplaceAttr: durationString}
	if format == logText {
		return slog.New(slog.NewTextHandler(w, opts))
	}
	return slog.New(slog.NewJSONHandler(w, opts))
}

// durationString writes a duration as Go writes it ("30s", "1.5ms") in
// both log formats: slog's JSON handler would write nanoseconds
// (30000000000), which a reader has to count the zeros of.
func durationString(_ []string, a slog.Attr) slog.Attr {
	if a.Value.Kind() == slog.KindDuration {
		a.Value = slog.StringValue(a.Value.Duration().String())
	}
	return a
}
