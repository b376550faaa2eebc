package main

import (
	"fmt"
	"io"
	"net/url"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/ratelimit-gateway/gateway/internal/ruleset"
	"github.com/spf13/cobra"
)

func newUsageCmd() *cobra.Command {
	var admin, key, token string
	cmd := &cobra.Command{
		Use:   "usage APP",
		Short: "Show what an app has used of each of its limits",
		Long: `Show, for one caller of a running gateway, each limit that applies to it
with what its counter holds: used, remaining, and the seconds until the limit
is full again, read from the store in use (for the whole fleet on Redis)
without counting anything. It reads GET /usage on the admin port.

APP is an app ID, or "*" for callers without one. Limits counted per client
address or per header, query or claim value are read for --key: the address
group or the values themselves ('gateway top' shows them hashed unless the
gateway runs with --top-keys).`,
		Example: `  gateway usage app-1
  gateway usage '*' --key 203.0.113.7 --admin http://10.0.0.5:9090`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			u, err := url.Parse(admin)
			if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				return usageError{fmt.Errorf("--admin %q is not an http:// URL such as http://127.0.0.1:9090", admin)}
			}
			u.Path = strings.TrimSuffix(u.Path, "/") + "/usage"
			q := url.Values{"app": {args[0]}}
			if key != "" {
				q.Set("key", key)
			}
			u.RawQuery = q.Encode()
			return printUsage(cmd.OutOrStdout(), u.String(), token)
		},
	}
	f := cmd.Flags()
	f.StringVar(&admin, "admin", "http://127.0.0.1:9090", "base URL of the gateway's admin port")
	f.StringVar(&key, "key", "", "the counter of limits counted per client address or per value: the address group or the values")
	adminTokenFlag(f, &token)
	return cmd
}

// usageListing is the JSON of GET /usage.
type usageListing struct {
	App    string              `json:"app"`
	Plan   string              `json:"plan"`
	Limits []ruleset.UsageLine `json:"limits"`
}

// printUsage reads GET /usage at u and prints it as a table.
func printUsage(w io.Writer, u, token string) error {
	var v usageListing
	if err := getAdminJSON(u, token, &v); err != nil {
		return err
	}
	if v.Plan != "" {
		fmt.Fprintf(w, "App %s, plan %s.\n", v.App, v.Plan)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "API\tLIMIT\tUNIT\tUSED\tREMAINING\tRESET")
	num := func(p *int64) string {
		if p == nil {
			return "-"
		}
		return strconv.FormatInt(*p, 10)
	}
	for _, l := range v.Limits {
		api := l.API
		if api == "" {
			api = "(total)"
		}
		if len(l.Methods) > 0 {
			api += " " + strings.Join(l.Methods, ",")
		}
		reset := "-"
		if l.Reset != nil {
			reset = strconv.FormatFloat(*l.Reset, 'f', 1, 64) + "s"
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\n", api, l.Limit, l.Unit, num(l.Used), num(l.Remaining), reset)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, l := range v.Limits {
		if l.Note != "" {
			fmt.Fprintf(w, "%s: %s\n", apiName(l.API), l.Note)
		}
	}
	return nil
}

func apiName(api string) string {
	if api == "" {
		return "(total)"
	}
	return api
}
