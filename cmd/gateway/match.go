package main

import (
	"fmt"
	"time"

	"github.com/ratelimit-gateway/gateway/configs"
	"github.com/ratelimit-gateway/gateway/internal/config"
	"github.com/ratelimit-gateway/gateway/internal/proxy"
	"github.com/spf13/cobra"
)

var timeZero time.Time

func newMatchCmd() *cobra.Command {
	var path, app, method string
	cmd := &cobra.Command{
		Use:   "match --config FILE [--app ID] [--method M] PATH",
		Short: "Show which rules apply to a request, and why",
		Long: `Show which rules of the rule file apply to a request, and why, judged as
'gateway serve' judges it: the app ID as the app header would be (an invalid
one is a 400), the method upper-cased and HEAD as GET, the path normalized.
Without --config, when the default file is missing, the rules built into
the binary are used, as 'gateway serve' does.`,
		Example: `  gateway match --config configs/demo-rules.yaml --app app-1 --method GET /v1/user/42
  gateway match --config configs/demo-rules.yaml /v1/anything   # an unknown caller`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var fallback []byte
			if !cmd.Flags().Changed("config") {
				fallback = configs.ExampleRules
			}
			rules, fellBack, err := config.LoadOrFallback(path, config.DefaultMaxBytes, fallback)
			if err != nil {
				return err
			}
			if fellBack {
				fmt.Fprintf(cmd.OutOrStdout(), "%s not found: the rules built into the binary\n", path)
			}
			rs, err := proxy.Compile(rules, timeZero)
			if err != nil {
				return err
			}
			out, err := rs.Explain(app, method, args[0])
			if err != nil {
				return err
			}
			fmt.Fprint(cmd.OutOrStdout(), out)
			return nil
		},
	}
	cmd.Flags().StringVar(&path, "config", "configs/ratelimiter-rule.yaml", "rule file")
	cmd.Flags().StringVar(&app, "app", "", "the caller's app ID (empty: an unknown caller)")
	cmd.Flags().StringVar(&method, "method", "GET", "HTTP method")
	return cmd
}
