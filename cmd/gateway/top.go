package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/ratelimit-gateway/gateway/internal/observe"
)

// topTimeout bounds the whole GET /top exchange.
const topTimeout = 10 * time.Second

func newTopCmd() *cobra.Command {
	var admin, app, token string
	cmd := &cobra.Command{
		Use:   "top",
		Short: "Show the heaviest callers of each keyed limit",
		Long: `Show, per app and rule of a running gateway, the counter keys that sent the
most requests in the last one to two minutes (client address groups, or the
header or query values of keyed limits), with what was admitted and limited.
It reads GET /top on the admin port. Pointed at gateway rls, it shows per
domain (APP) and descriptor (RULE) the heaviest descriptor values.

Counts are upper bounds: a key's requests are at least COUNT minus ±ERR.`,
		Example: `  gateway top
  gateway top --admin http://10.0.0.5:9090 --app app-2
  gateway top --admin http://127.0.0.1:9091 --app my-domain   # gateway rls`,
		Args: exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			u, err := topURL(admin, app)
			if err != nil {
				return usageError{err}
			}
			return printTop(cmd.OutOrStdout(), u, token)
		},
	}
	f := cmd.Flags()
	f.StringVar(&admin, "admin", "http://127.0.0.1:9090", "base URL of the gateway's admin port")
	f.StringVar(&app, "app", "", "show only this app ID's limits")
	adminTokenFlag(f, &token)
	return cmd
}

// topURL returns the URL of GET /top on admin, for app if not "".
func topURL(admin, app string) (string, error) {
	u, err := url.Parse(admin)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", fmt.Errorf("--admin %q is not an http:// URL such as http://127.0.0.1:9090", admin)
	}
	u.Path = strings.TrimSuffix(u.Path, "/") + "/top"
	u.RawQuery = ""
	if app != "" {
		u.RawQuery = url.Values{"app": {app}}.Encode()
	}
	return u.String(), nil
}

// adminTokenFlag adds --admin-token, the token a gateway with one asks
// for at GET /top, /usage and /rules.
func adminTokenFlag(f *pflag.FlagSet, token *string) {
	f.StringVar(token, "admin-token", "", "the gateway's --admin-token, which GET /top, /usage and /rules need when it has one; prefer GATEWAY_ADMIN_TOKEN to the flag (visible in ps)")
}

// getAdminJSON reads the JSON answer of GET u, an admin endpoint, into v,
// sending token as a bearer token if it is not "".
func getAdminJSON(u, token string, v any) error {
	c := &http.Client{Timeout: topTimeout}
	req, err := http.NewRequest(http.MethodGet, u, nil)
	if err != nil {
		return fmt.Errorf("reading %s: %w", u, err)
	}
	if token = strings.TrimSpace(token); token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := c.Do(req)
	if err != nil {
		return fmt.Errorf("reading %s: %w", u, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("reading %s: %s: %s", u, resp.Status, strings.TrimSpace(string(body)))
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		return fmt.Errorf("reading %s: %w", u, err)
	}
	return nil
}

// topListing is the JSON of GET /top.
type topListing struct {
	At     time.Time          `json:"at"`
	K      int                `json:"k"`
	Limits []observe.TopLimit `json:"limits"`
}

// printTop reads GET /top at u and prints it as a table.
func printTop(w io.Writer, u, token string) error {
	var top topListing
	if err := getAdminJSON(u, token, &top); err != nil {
		return err
	}
	if len(top.Limits) == 0 {
		fmt.Fprintln(w, "No keyed limit was hit in the last minutes.")
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "APP\tRULE\tBY\tKEY\tCOUNT\t±ERR\tADMITTED\tLIMITED")
	for _, l := range top.Limits {
		api := l.API
		if api == "" {
			api = "(total)"
		}
		for _, k := range l.Keys {
			key := shownTopKey(k.Key)
			if k.Missing {
				key += " (missing: ip)" // shownTopKey quotes a value with a space
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d\t%d\t%d\n", l.App, api, l.By, key, k.Count, k.Error, k.Admitted, k.Limited)
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, "Top %d keys per limit since %s, at %s.\n", top.K, oldest(top.Limits).Format(time.TimeOnly), top.At.Format(time.TimeOnly+" MST"))
	return err
}

// shownTopKey quotes a key that a table cell would not show as it is:
// empty (a missing value), or holding spaces or control characters.
func shownTopKey(k string) string {
	if k == "" {
		return "(missing)"
	}
	if strings.ContainsFunc(k, func(r rune) bool { return r <= ' ' || r == 0x7f || r == '"' }) {
		return strconv.Quote(k)
	}
	return k
}

// oldest returns when the oldest window of ls began.
func oldest(ls []observe.TopLimit) time.Time {
	t := ls[0].From
	for _, l := range ls[1:] {
		if l.From.Before(t) {
			t = l.From
		}
	}
	return t
}
