package main

import (
	"fmt"
	"strings"
	"time"

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
		Example: `  gateway match --config configs/ratelimiter-rule.yaml --app app-1 --method GET /v1/user/42
  gateway match --config configs/ratelimiter-rule.yaml /v1/anything   # an unknown caller`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			rules, err := config.Load(path)
			if err != nil {
				return err
			}
			rs, err := proxy.Compile(rules, timeZero)
			if err != nil {
				return err
			}
			out, err := rs.Explain(app, strings.ToUpper(method), args[0])
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
