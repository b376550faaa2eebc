package main

import (
	"fmt"

	"github.com/spf13/cobra"
)

func newValidateCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "validate FILE",
		Short: "Check a rule file and list every problem in it",
		Long: `Check a rule file (YAML, or JSON or XML by extension). Prints every problem with its
file and line and exits 1, or prints a one-line summary and exits 0.`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			rs, ok := loadRuleSet(args[0], cmd.ErrOrStderr())
			if !ok {
				return exitError(exitFailure)
			}
			rules := rs.Source
			apps, limits := 0, 0
			for _, a := range rules.Apps {
				apps++
				limits += len(a.Limits)
			}
			routes := ""
			if len(rules.Routes) > 0 || len(rules.Upstreams) > 0 {
				routes = fmt.Sprintf(", %d route(s) to %d upstream(s)", len(rules.Routes), len(rules.Upstreams))
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s: ok: %d app section(s), %d api rule(s)%s, sha256 %s\n", args[0], apps, limits, routes, rules.SHA256)
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
