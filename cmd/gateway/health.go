package main

import (
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/spf13/cobra"
)

// newHealthCmd is `gateway health`: the probe of container health checks,
// since the image has no shell, curl or wget to ask /readyz with.
func newHealthCmd() *cobra.Command {
	var (
		admin   string
		live    bool
		timeout time.Duration
	)
	cmd := &cobra.Command{
		Use:   "health",
		Short: "Exit 0 if a gateway on the admin port is ready (for container health checks)",
		Long: `Ask a running gateway's admin port for GET /readyz (or /healthz with
--live) and exit 0 if it answers 200, 1 otherwise, printing the answer.
The container image has no shell, curl or wget: this is what a Docker or
Compose healthcheck runs.`,
		Example: `  gateway health
  gateway health --admin http://127.0.0.1:9090 --live`,
		Args: exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			u, err := url.Parse(admin)
			if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				return usageError{fmt.Errorf("--admin %q is not an http:// URL such as http://127.0.0.1:9090", admin)}
			}
			if timeout <= 0 {
				return usageError{fmt.Errorf("--timeout %s is not positive", timeout)}
			}
			u.Path = strings.TrimSuffix(u.Path, "/") + "/readyz"
			if live {
				u.Path = strings.TrimSuffix(u.Path, "/readyz") + "/healthz"
			}
			u.RawQuery = ""
			resp, err := (&http.Client{Timeout: timeout}).Get(u.String())
			if err != nil {
				return err
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
			answer := strings.TrimSpace(string(body))
			if resp.StatusCode != http.StatusOK {
				return fmt.Errorf("%s: %s %s", u, resp.Status, answer)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s: %s %s\n", u, resp.Status, answer)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&admin, "admin", "http://127.0.0.1:9090", "base URL of the gateway's admin port")
	f.BoolVar(&live, "live", false, "ask /healthz (the process is alive) rather than /readyz (it serves)")
	f.DurationVar(&timeout, "timeout", 5*time.Second, "longest wait for the answer")
	return cmd
}
