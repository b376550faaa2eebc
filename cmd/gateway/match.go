package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"strings"
	"time"

	"github.com/ratelimit-gateway/gateway/configs"
	"github.com/ratelimit-gateway/gateway/internal/config"
	"github.com/ratelimit-gateway/gateway/internal/ruleset"
	"github.com/ratelimit-gateway/gateway/internal/source"
	"github.com/spf13/cobra"
)

var timeZero time.Time

func newMatchCmd() *cobra.Command {
	var path, app, method, ip, host string
	var headers, claims []string
	// match prints what it found; the store's "reachable" log line is not
	// part of it.
	sf := storeFlags{timeout: source.DefaultTimeout, maxBytes: config.DefaultMaxBytes, logger: slog.New(slog.DiscardHandler)}
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
the binary are used, as 'gateway serve' does. --config etcd://host:2379/key
or zk://host:2181/path reads the rules from a rule store, as 'gateway serve'
does, with the same credential and TLS flags.`,
		Example: `  gateway match --config configs/demo-rules.yaml --app app-1 --method GET /v1/user/42
  gateway match --config configs/demo-rules.yaml /v1/anything   # an unknown caller
  gateway match --config configs/demo-rules.yaml --app app-2 --header 'X-User-Id: 42' /v1/user/42`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			rules, err := matchRules(cmd, path, &sf)
			if err != nil {
				return err
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
	cmd.Flags().StringVar(&path, "config", "configs/ratelimiter-rule.yaml", "rule file, or a rule store: etcd://host:2379/key, zk://host:2181/path")
	sf.zkFromEnv = addStoreFlags(cmd.Flags(), &sf.auth, &sf.passwordFile, &sf.zk)
	cmd.Flags().DurationVar(&sf.timeout, "timeout", sf.timeout, "with a rule store: longest wait for one request to it")
	cmd.Flags().StringVar(&app, "app", "", "the caller's app ID (empty: an unknown caller)")
	cmd.Flags().StringVar(&method, "method", "GET", "HTTP method")
	cmd.Flags().StringArrayVar(&headers, "header", nil, "a request header, NAME: VALUE (repeatable)")
	cmd.Flags().StringVar(&ip, "ip", "", "the client's address")
	cmd.Flags().StringVar(&host, "host", "", "the request's Host header, which chooses its route (empty: only routes for every host match)")
	cmd.Flags().StringArrayVar(&claims, "claim", nil, "a claim of the caller's token, NAME=VALUE, as if verified (repeatable)")
	return cmd
}

// matchRules reads the rules of --config: from a rule store as serve reads
// them, or from a file, falling back to the built-in rules when the
// default file is missing.
func matchRules(cmd *cobra.Command, path string, sf *storeFlags) (*config.Rules, error) {
	if source.IsStore(path) {
		st, err := sf.open(path)
		if err != nil {
			return nil, err
		}
		defer st.Close()
		ctx, cancel := context.WithTimeout(cmd.Context(), 2*sf.timeout)
		defer cancel()
		rules, _, err := st.Load(ctx)
		return rules, err
	}
	var fallback []byte
	if !cmd.Flags().Changed("config") {
		fallback = configs.ExampleRules
	}
	rules, fellBack, err := config.LoadOrFallback(path, config.DefaultMaxBytes, fallback)
	if err != nil {
		return nil, err
	}
	if fellBack {
		fmt.Fprintf(cmd.OutOrStdout(), "%s not found: the rules built into the binary\n", path)
	}
	return rules, nil
}
