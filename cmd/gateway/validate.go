package main

import (
	"errors"
	"fmt"

	"github.com/ratelimit-gateway/gateway/internal/config"
	"github.com/ratelimit-gateway/gateway/internal/proxy"
	"github.com/spf13/cobra"
)

func newValidateCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "validate FILE",
		Short: "Check a rule file and list every problem in it",
		Long: `Check a rule file (YAML, or JSON by extension). Prints every problem with its
file and line and exits 1, or prints a one-line summary and exits 0.`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			rules, err := config.Load(args[0])
			if err == nil {
				_, err = proxy.Compile(rules, timeZero)
			}
			if err != nil {
				var list config.Errors
				if errors.As(err, &list) {
					for _, e := range list {
						fmt.Fprintln(cmd.ErrOrStderr(), e)
					}
					fmt.Fprintf(cmd.ErrOrStderr(), "%s: %d error(s)\n", args[0], len(list))
				} else {
					fmt.Fprintln(cmd.ErrOrStderr(), err)
				}
				return exitError(exitFailure)
			}
			apps, limits := 0, 0
			for _, a := range rules.Apps {
				apps++
				limits += len(a.Limits)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s: ok: %d app section(s), %d api rule(s), sha256 %s\n", args[0], apps, limits, rules.SHA256)
			return nil
		},
	}
}

// exactArgs is cobra.ExactArgs reported as a usage error.
func exactArgs(n int) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if err := cobra.ExactArgs(n)(cmd, args); err != nil {
			return usageError{fmt.Errorf("%s: %w", cmd.CommandPath(), err)}
		}
		return nil
	}
}
