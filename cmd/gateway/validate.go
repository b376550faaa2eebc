package main

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"go.yaml.in/yaml/v3"

	"github.com/ratelimit-gateway/gateway/internal/config"
	"github.com/ratelimit-gateway/gateway/internal/rlsconfig"
	"github.com/ratelimit-gateway/gateway/internal/safefile"
)

func newValidateCmd() *cobra.Command {
	var rlsFormat, mergeDomains bool
	cmd := &cobra.Command{
		Use:   "validate FILE|DIR",
		Short: "Check a rule file and list every problem in it",
		Long: `Check a rule file (YAML, or JSON or XML by extension), or a configuration of
gateway rls in envoyproxy/ratelimit's format: a file whose top level has a
domain, or descriptors, a directory of them, or any file with --rls. Prints every problem with
its file and line and exits 1, or prints a one-line summary and exits 0.`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if rlsFormat || isRLSConfig(args[0]) {
				return validateRLS(cmd, args[0], rlsconfig.Options{MergeDomains: mergeDomains})
			}
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
	cmd.Flags().BoolVar(&rlsFormat, "rls", false, "check the file as a gateway rls config (envoyproxy/ratelimit's format) even if it does not look like one")
	cmd.Flags().BoolVar(&mergeDomains, "merge-domains", false, "with an rls config: let several files declare the same domain, as gateway rls --merge-domains")
	return cmd
}

// isRLSConfig reports whether path looks like a gateway rls config: a
// directory, or a YAML file whose top level is a mapping with a domain or
// descriptors (the rule files of serve have neither).
func isRLSConfig(path string) bool {
	st, err := os.Stat(path)
	if err != nil {
		return false
	}
	if st.IsDir() {
		return true
	}
	data, err := safefile.Read(path, config.DefaultMaxBytes)
	if err != nil {
		return false
	}
	var top map[string]any
	if yaml.Unmarshal(data, &top) != nil {
		return false
	}
	_, domain := top["domain"]
	_, descriptors := top["descriptors"]
	return domain || descriptors
}

// validateRLS checks a gateway rls config and reports as validate does.
func validateRLS(cmd *cobra.Command, path string, opt rlsconfig.Options) error {
	c, err := rlsconfig.Load(path, opt)
	if err != nil {
		var list config.Errors
		if errors.As(err, &list) {
			for _, e := range list {
				fmt.Fprintln(cmd.ErrOrStderr(), e)
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "%s: %d error(s)\n", path, len(list))
		} else {
			fmt.Fprintln(cmd.ErrOrStderr(), err)
		}
		return exitError(exitFailure)
	}
	fmt.Fprintf(cmd.OutOrStdout(), "%s: ok: rls config, %d file(s), %d domain(s), %d limit(s), sha256 %s\n", path, len(c.Files), len(c.Domains), c.Limits(), c.SHA256)
	return nil
}

// exactArgs is cobra.ExactArgs reported as a usage error that names the
// arguments expected, as the command's Use line spells them.
func exactArgs(n int) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) == n {
			return nil
		}
		names := argNames(cmd.Use)
		switch {
		case n == 0:
			return usageError{fmt.Errorf("%s takes no arguments, got %q", cmd.CommandPath(), args)}
		case len(args) == 0:
			return usageError{fmt.Errorf("%s expects %s, got none; usage: %s", cmd.CommandPath(), strings.Join(names, " "), cmd.UseLine())}
		default:
			return usageError{fmt.Errorf("%s expects %s, got %d argument(s) %q; usage: %s", cmd.CommandPath(), strings.Join(names, " "), len(args), args, cmd.UseLine())}
		}
	}
}

// argNames returns the names of the positional arguments at the end of a
// command's Use line: "validate FILE|DIR" gives FILE|DIR, "match --config
// FILE [--app ID] PATH" gives PATH.
func argNames(use string) []string {
	f := strings.Fields(use)
	i := len(f)
	for i > 1 && strings.Trim(f[i-1], "ABCDEFGHIJKLMNOPQRSTUVWXYZ_|.") == "" && !strings.HasPrefix(f[i-2], "-") {
		i--
	}
	return f[i:]
}
