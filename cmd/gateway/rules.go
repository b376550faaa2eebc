package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/ratelimit-gateway/gateway/internal/config"
	"github.com/ratelimit-gateway/gateway/internal/rulesctl"
	"github.com/ratelimit-gateway/gateway/internal/safefile"
	"github.com/ratelimit-gateway/gateway/internal/source"
)

// storeFlags are the flags of every `gateway rules` command: how to reach
// the store, as `gateway serve` reaches it.
type storeFlags struct {
	auth         source.EtcdAuth
	passwordFile string
	zk           source.ZKAuth
	zkFromEnv    func()
	timeout      time.Duration
	maxBytes     int64
	// logger logs the store's connection changes; nil is slog.Default().
	logger *slog.Logger
}

func newRulesCmd() *cobra.Command {
	var sf storeFlags
	cmd := &cobra.Command{
		Use:   "rules",
		Short: "Read, write, list and roll back the rules in a rule store (etcd, ZooKeeper)",
		Long: `Read, write, list and roll back the rules a fleet of gateways reads from a rule
store (gateway serve --config etcd://host:2379/key or zk://host:2181/path,
etcds:// and zks:// over TLS; see docs/sources.md, "Rules for a fleet").

push checks a file exactly as the gateways would check it as the key's value
(parse, validate, compile) and writes it only if it is valid, and only if the
rules are still at the version it read (or at --expect-version): two
operators cannot silently overwrite each other. Each write keeps the value it
replaces in the history (the last --keep-history), from which rollback
restores one, checked again.

Exit codes: 0 done, 1 failed (invalid rules, a version conflict, the store
unreachable), 2 bad usage.`,
		Example: `  gateway rules get etcd://10.0.0.1:2379/gateway/rules > rules.yaml   # the version on stderr
  gateway rules push --expect-version 57 etcd://10.0.0.1:2379/gateway/rules rules.yaml
  gateway rules history etcd://10.0.0.1:2379/gateway/rules
  gateway rules rollback etcd://10.0.0.1:2379/gateway/rules 41`,
		Args: cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return usageError{fmt.Errorf("rules: unknown command %q; run 'gateway rules --help' for the commands", args[0])}
			}
			return cmd.Help()
		},
	}
	f := cmd.PersistentFlags()
	sf.zkFromEnv = addStoreFlags(f, &sf.auth, &sf.passwordFile, &sf.zk)
	f.DurationVar(&sf.timeout, "timeout", source.DefaultTimeout, "longest wait for one request to the store")
	f.Int64Var(&sf.maxBytes, "max-rules-bytes", config.DefaultMaxBytes, "the gateways' --max-rules-bytes: larger rules are refused, as they would refuse them")
	cmd.AddCommand(newRulesPushCmd(&sf), newRulesGetCmd(&sf), newRulesHistoryCmd(&sf), newRulesRollbackCmd(&sf))
	return cmd
}

// zkPasswordEnv holds the ZooKeeper password. It has no flag: a flag's
// value shows in ps.
var zkPasswordEnv = envName("zk-password")

// addStoreFlags adds the flags of a rule store's credentials and TLS
// files, which serve and rules share, and returns the function that
// completes them from the environment once the flags are parsed.
func addStoreFlags(f *pflag.FlagSet, etcd *source.EtcdAuth, etcdPasswordFile *string, zk *source.ZKAuth) (fromEnv func()) {
	f.StringVar(&etcd.Username, "etcd-username", etcd.Username, "with rules in etcd: etcd user (GATEWAY_ETCD_USERNAME)")
	f.StringVar(&etcd.Password, "etcd-password", etcd.Password, "with rules in etcd: etcd password; set GATEWAY_ETCD_PASSWORD or --etcd-password-file rather than the flag (visible in ps)")
	f.StringVar(etcdPasswordFile, "etcd-password-file", *etcdPasswordFile, "file whose trimmed contents are the etcd password; exclusive with --etcd-password")
	f.StringVar(&etcd.CAFile, "etcd-ca", etcd.CAFile, "PEM CA file that verifies etcd's certificate (turns TLS on; etcds:// too, with the system roots)")
	f.StringVar(&etcd.CertFile, "etcd-cert", etcd.CertFile, "PEM client certificate for etcd (with --etcd-key)")
	f.StringVar(&etcd.KeyFile, "etcd-key", etcd.KeyFile, "PEM private key of --etcd-cert")
	f.StringVar(&zk.Username, "zk-username", zk.Username, "with rules in ZooKeeper: digest user (GATEWAY_ZK_USERNAME); the password comes from "+zkPasswordEnv+" or --zk-password-file, never a flag")
	f.StringVar(&zk.PasswordFile, "zk-password-file", zk.PasswordFile, "file whose trimmed contents are the ZooKeeper password; exclusive with "+zkPasswordEnv)
	f.StringVar(&zk.CAFile, "zk-ca", zk.CAFile, "PEM CA file that verifies ZooKeeper's certificate (turns TLS on; zks:// too, with the system roots)")
	f.StringVar(&zk.CertFile, "zk-cert", zk.CertFile, "PEM client certificate for ZooKeeper (with --zk-key), for a server that requires one")
	f.StringVar(&zk.KeyFile, "zk-key", zk.KeyFile, "PEM private key of --zk-cert")
	return func() { zk.Password = os.Getenv(zkPasswordEnv) }
}

// open checks the SOURCE argument and the flags (a usage error if they
// cannot work) and opens the store.
func (sf *storeFlags) open(spec string) (source.Store, error) {
	sf.zkFromEnv()
	switch {
	case !source.IsStore(spec):
		return nil, usageError{fmt.Errorf("%s is not a rule store: name one as etcd://host:2379/key or zk://host:2181/path (for a rule file, edit it and run gateway validate)", spec)}
	case sf.auth.Password != "" && sf.passwordFile != "":
		return nil, usageError{errors.New("--etcd-password and --etcd-password-file are exclusive: pass one")}
	case sf.zk.Password != "" && sf.zk.PasswordFile != "":
		return nil, usageError{fmt.Errorf("%s and --zk-password-file are exclusive: set one", zkPasswordEnv)}
	case sf.maxBytes <= 0:
		return nil, usageError{fmt.Errorf("--max-rules-bytes %d is not positive", sf.maxBytes)}
	}
	if err := source.CheckSpec(spec); err != nil {
		return nil, usageError{err}
	}
	if sf.timeout <= 0 {
		return nil, usageError{fmt.Errorf("--timeout %s is not positive", sf.timeout)}
	}
	auth := sf.auth
	if sf.passwordFile != "" {
		data, err := safefile.Read(sf.passwordFile, safefile.MaxSecretBytes)
		if err != nil {
			return nil, fmt.Errorf("--etcd-password-file: %w", err)
		}
		auth.Password = strings.TrimSpace(string(data))
	}
	return source.NewStore(source.Config{Spec: spec, MaxBytes: sf.maxBytes, Etcd: auth, ZK: sf.zk, Timeout: sf.timeout, Logger: sf.logger})
}

// writeFlags are the flags of the commands that write.
type writeFlags struct {
	expect int64
	keep   int
}

func (wf *writeFlags) add(f *pflag.FlagSet) {
	f.Int64Var(&wf.expect, "expect-version", 0, "write only if the rules are at this version (as gateway rules get printed it); without it, only if they are still at the version read just before writing")
	f.IntVar(&wf.keep, "keep-history", rulesctl.DefaultKeep, "how many replaced values the store keeps for rollback (0: none)")
}

// config returns the rulesctl configuration of st and the flags.
func (wf *writeFlags) config(cmd *cobra.Command, sf *storeFlags, st source.Store) (rulesctl.Config, error) {
	if wf.keep < 0 || wf.keep > 1000 {
		return rulesctl.Config{}, usageError{fmt.Errorf("--keep-history %d is outside 0..1000", wf.keep)}
	}
	return rulesctl.Config{
		Store: st, MaxBytes: sf.maxBytes, Keep: wf.keep,
		Expect: cmd.Flags().Changed("expect-version"), ExpectVersion: wf.expect,
	}, nil
}

func newRulesPushCmd(sf *storeFlags) *cobra.Command {
	var wf writeFlags
	cmd := &cobra.Command{
		Use:   "push SOURCE FILE",
		Short: "Check a rule file as the gateways would, and only then write it to the store",
		Long: `Check FILE exactly as the gateways reading SOURCE would check it as its value
(parse in the format the key gives, validate, compile): if it has problems,
print every one at FILE:line, write nothing and exit 1. Otherwise write it,
in one atomic write that succeeds only if the rules are still at the version
read just before (and at --expect-version, if given), and that keeps the
value it replaces in the history.`,
		Example: `  gateway rules push etcd://10.0.0.1:2379/gateway/rules rules.yaml
  gateway rules push --expect-version 57 etcd://10.0.0.1:2379/gateway/rules rules.yaml`,
		Args: exactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			st, err := sf.open(args[0])
			if err != nil {
				return err
			}
			defer st.Close()
			cfg, err := wf.config(cmd, sf, st)
			if err != nil {
				return err
			}
			data, err := safefile.Read(args[1], sf.maxBytes)
			if err != nil {
				return err
			}
			res, err := rulesctl.Push(context.Background(), cfg, args[1], data)
			if err != nil {
				return reportRulesError(cmd.ErrOrStderr(), err)
			}
			printWrite(cmd.OutOrStdout(), st, res, "")
			return nil
		},
	}
	wf.add(cmd.Flags())
	return cmd
}

func newRulesRollbackCmd(sf *storeFlags) *cobra.Command {
	var wf writeFlags
	cmd := &cobra.Command{
		Use:   "rollback SOURCE VERSION",
		Short: "Restore a version of the rules that the store's history keeps",
		Long: `Write again the rules SOURCE had at VERSION (one that gateway rules history
lists), checked again as push checks a file, with the same compare-and-set:
the rules must still be at the version read just before (and at
--expect-version, if given). The value replaced goes to the history.`,
		Example: `  gateway rules rollback etcd://10.0.0.1:2379/gateway/rules 41`,
		Args:    exactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			version, err := strconv.ParseInt(args[1], 10, 64)
			if err != nil || version < 0 {
				return usageError{fmt.Errorf("rollback: VERSION %q is not a version: give one that gateway rules history lists", args[1])}
			}
			st, err := sf.open(args[0])
			if err != nil {
				return err
			}
			defer st.Close()
			cfg, err := wf.config(cmd, sf, st)
			if err != nil {
				return err
			}
			res, err := rulesctl.Rollback(context.Background(), cfg, version)
			if err != nil {
				return reportRulesError(cmd.ErrOrStderr(), err)
			}
			printWrite(cmd.OutOrStdout(), st, res, fmt.Sprintf(" restores version %d", version))
			return nil
		},
	}
	wf.add(cmd.Flags())
	return cmd
}

// printWrite reports a push or rollback.
func printWrite(w io.Writer, st source.Store, res rulesctl.Result, what string) {
	if res.Unchanged {
		fmt.Fprintf(w, "%s: unchanged: version %d already holds these rules\n", st, res.Version)
		return
	}
	apps, limits := 0, 0
	for _, a := range res.Rules.Source.Apps {
		apps++
		limits += len(a.Limits)
	}
	fmt.Fprintf(w, "%s: version %d%s (was %s): %d app section(s), %d api rule(s), sha256 %s\n",
		st, res.Version, what, source.FormatVersion(res.Previous), apps, limits, res.Rules.Source.SHA256)
}

// reportRulesError prints the problems of rules refused as invalid as
// `gateway validate` does, and returns the exit error; other errors are
// returned as they are.
func reportRulesError(stderr io.Writer, err error) error {
	var inv *rulesctl.InvalidError
	if !errors.As(err, &inv) {
		return err
	}
	problems := inv.Problems()
	for _, p := range problems {
		fmt.Fprintln(stderr, p)
	}
	fmt.Fprintf(stderr, "%s: %d error(s); nothing was written\n", inv.Name, len(problems))
	return exitError(exitFailure)
}

func newRulesGetCmd(sf *storeFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "get SOURCE",
		Short: "Print the rules in the store, and their version on stderr",
		Long: `Print the rules SOURCE holds, as they were written, on stdout, and their
version (for push --expect-version), size and sha256 on stderr, so that
gateway rules get SOURCE > rules.yaml saves them as they are.`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			st, err := sf.open(args[0])
			if err != nil {
				return err
			}
			defer st.Close()
			v, err := rulesctl.Get(context.Background(), st)
			if err != nil {
				return err
			}
			if _, err := cmd.OutOrStdout().Write(v.Data); err != nil {
				return err
			}
			e := rulesctl.NewEntry(rulesctl.Config{Store: st, MaxBytes: sf.maxBytes}, v, true)
			check := ""
			if e.Err != nil {
				check = "; the gateways refuse it: " + firstLine(e.Err.Error())
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "%s: version %d, %d bytes, sha256 %s%s\n", st, v.Version, e.Bytes, e.SHA256, check)
			return nil
		},
	}
}

func newRulesHistoryCmd(sf *storeFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "history SOURCE",
		Short: "List the current rules and the versions the store keeps for rollback",
		Long: `List the current rules and the values that writes replaced and the store
keeps (the last --keep-history of push and rollback), newest first: version,
size, sha256 (as GET /rules shows it), and whether the gateways would accept
it now.`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			st, err := sf.open(args[0])
			if err != nil {
				return err
			}
			defer st.Close()
			entries, err := rulesctl.History(context.Background(), rulesctl.Config{Store: st, MaxBytes: sf.maxBytes})
			if err != nil {
				return err
			}
			if len(entries) == 0 {
				return fmt.Errorf("%s: there are no rules there yet: write them with gateway rules push", st)
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "VERSION\t\tBYTES\tSHA256\tCHECK")
			for _, e := range entries {
				current, check := "", "ok"
				if e.Current {
					current = "current"
				}
				if e.Err != nil {
					check = "invalid: " + firstLine(e.Err.Error())
				}
				fmt.Fprintf(tw, "%d\t%s\t%d\t%s\t%s\n", e.Version, current, e.Bytes, e.SHA256, check)
			}
			return tw.Flush()
		},
	}
}

func firstLine(s string) string {
	first, _, _ := strings.Cut(s, "\n")
	return first
}
