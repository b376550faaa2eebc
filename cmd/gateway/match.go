package main

import (
	"fmt"
	"net/http"
	"net/netip"
	"strings"
	"time"

	"github.com/ratelimit-gateway/gateway/configs"
	"github.com/ratelimit-gateway/gateway/internal/config"
	"github.com/ratelimit-gateway/gateway/internal/ruleset"
	"github.com/spf13/cobra"
)

var timeZero time.Time

func newMatchCmd() *cobra.Command {
	var path, app, method, ip, host string
	var headers, claims []string
	cmd := &cobra.Command{
		Use:   "match --config FILE [--app ID] [--method M] PATH",
		Short: "Show which rules apply to a request, and why",
		Long: `Show which rules of the rule file apply to a request, and why, judged as
'gateway serve' judges it: the app ID as the app header would be (an invalid
one is a 400), the method upper-cased and HEAD as GET, the path normalized.
For limits keyed on headers, query parameters or the client address (by),
it shows the counter key the request would get: give the headers with
--header, the query string in PATH, the client address with --ip, and the
claims of the caller's token with --claim.
Without --config, when the default file is missing, the rules built into
the binary are used, as 'gateway serve' does.`,
		Example: `  gateway match --config configs/demo-rules.yaml --app app-1 --method GET /v1/user/42
  gateway match --config configs/demo-rules.yaml /v1/anything   # an unknown caller
  gateway match --config configs/demo-rules.yaml --app app-2 --header 'X-User-Id: 42' /v1/user/42`,
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
			rs, err := ruleset.Compile(rules, timeZero)
			if err != nil {
				return err
			}
			q := ruleset.ExplainRequest{App: app, Method: method, Target: args[0], Header: http.Header{}, Host: host}
			for _, h := range headers {
				name, value, ok := strings.Cut(h, ":")
				if !ok || strings.TrimSpace(name) == "" {
					return usageError{fmt.Errorf("--header %q is not NAME: VALUE", h)}
				}
				q.Header.Add(strings.TrimSpace(name), strings.TrimSpace(value))
			}
			for _, c := range claims {
				name, value, ok := strings.Cut(c, "=")
				if !ok || name == "" {
					return usageError{fmt.Errorf("--claim %q is not NAME=VALUE", c)}
				}
				if q.Claims == nil {
					q.Claims = map[string]string{}
				}
				q.Claims[name] = value
			}
			if ip != "" {
				a, err := netip.ParseAddr(ip)
				if err != nil {
					return usageError{fmt.Errorf("--ip %q is not an IP address", ip)}
				}
				q.ClientIP = a.Unmap()
			}
			out, err := rs.ExplainRequest(q)
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
	cmd.Flags().StringArrayVar(&headers, "header", nil, "a request header, NAME: VALUE (repeatable)")
	cmd.Flags().StringVar(&ip, "ip", "", "the client's address")
	cmd.Flags().StringVar(&host, "host", "", "the request's Host header, which chooses its route (empty: only routes for every host match)")
	cmd.Flags().StringArrayVar(&claims, "claim", nil, "a claim of the caller's token, NAME=VALUE, as if verified (repeatable)")
	return cmd
}
