package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/ratelimit-gateway/gateway/internal/config"
	"github.com/ratelimit-gateway/gateway/internal/limit"
	"github.com/ratelimit-gateway/gateway/internal/replay"
	"github.com/ratelimit-gateway/gateway/internal/ruleset"
	"github.com/spf13/cobra"
)

// replayConfig is what `gateway replay` was asked to do.
type replayConfig struct {
	Rules         string
	Baseline      string
	Report        string
	Strict        bool
	ReorderWindow time.Duration
	MaxKeys       int
	Logs          []string
}

func newReplayCmd() *cobra.Command {
	var cfg replayConfig
	cmd := &cobra.Command{
		Use:   "replay --rules FILE [--baseline FILE] [--report OUT.html] ACCESS_LOG...",
		Short: "Preview a rule change on recorded traffic",
		Long: `Replay the gateway's own access log (written with --access-log) through a
candidate rule file, and with --baseline through the rules in force too, and
show what would change: per app and rule, how many requests each rule file
admits and limits, and which callers the candidate newly limits.

Every request is decided by the gateway's own handler and limiter at the
instant the log recorded, on a fresh in-memory store per rule file, so the
result is what the live gateway would have decided. The log records times to
the nanosecond.

The logs are read in the order given (give rotated logs oldest first; "-" is
stdin; names ending in .gz are decompressed). Within them, lines are put
back in time order up to --reorder-window apart: the log is written as
responses complete, so a slow request is logged after faster, later ones.

Malformed lines are skipped, counted and listed with their file and line;
they fail the command only with --strict. An invalid rule file is reported
as 'gateway validate' reports it. Exit status: 0 done, 1 invalid rules, an
unreadable log or (with --strict) a malformed line, 2 bad usage.`,
		Example: `  gateway replay --rules candidate.yaml --baseline current.yaml access.log
  gateway replay --rules candidate.yaml --baseline current.yaml --report preview.html access.log.1.gz access.log`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return usageError{fmt.Errorf("%s: no access log given", cmd.CommandPath())}
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if cfg.Rules == "" {
				return usageError{errors.New("replay: --rules is required")}
			}
			cfg.Logs = args
			return runReplay(cfg, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.Rules, "rules", "", "the candidate rule file (required)")
	f.StringVar(&cfg.Baseline, "baseline", "", "the rule file to compare with, usually the one in force")
	f.StringVar(&cfg.Report, "report", "", "also write a self-contained HTML report with charts to this file")
	f.BoolVar(&cfg.Strict, "strict", false, "exit 1 when a log line is malformed")
	f.DurationVar(&cfg.ReorderWindow, "reorder-window", 30*time.Second, "put lines logged up to this far out of time order back in order (0: log order)")
	f.IntVar(&cfg.MaxKeys, "max-keys", limit.DefaultMaxKeys, "most counters each replay store keeps, as in 'gateway serve'")
	return cmd
}

func runReplay(cfg replayConfig, stdout, stderr io.Writer) error {
	if cfg.ReorderWindow < 0 {
		return usageError{fmt.Errorf("--reorder-window %s is negative", cfg.ReorderWindow)}
	}
	cand, ok := loadRuleSet(cfg.Rules, stderr)
	var base *ruleset.Set
	if cfg.Baseline != "" {
		var bok bool
		base, bok = loadRuleSet(cfg.Baseline, stderr)
		ok = ok && bok
	}
	if !ok {
		return exitError(exitFailure)
	}
	var report *os.File
	if cfg.Report != "" {
		var err error
		// Created before the replay, so that a bad path fails at once.
		if report, err = os.Create(cfg.Report); err != nil {
			return fmt.Errorf("creating the report: %w", err)
		}
		defer report.Close()
	}

	res, err := replay.Files(replay.Config{
		Candidate:     cand,
		Baseline:      base,
		MaxKeys:       cfg.MaxKeys,
		ReorderWindow: cfg.ReorderWindow,
	}, cfg.Logs)
	if err != nil {
		if report != nil {
			os.Remove(cfg.Report) // not leave an empty report behind
		}
		return err
	}
	if err := res.WriteSummary(stdout); err != nil {
		return err
	}
	if report != nil {
		if err := res.WriteReport(report); err != nil {
			return fmt.Errorf("writing the report: %w", err)
		}
		if err := report.Close(); err != nil {
			return fmt.Errorf("writing the report: %w", err)
		}
		fmt.Fprintf(stdout, "\nReport: %s\n", cfg.Report)
	}
	if cfg.Strict && res.Malformed > 0 {
		fmt.Fprintf(stderr, "gateway: %d malformed line(s) in the access log (--strict)\n", res.Malformed)
		return exitError(exitFailure)
	}
	return nil
}

// loadRuleSet loads and compiles a rule file, printing every problem as
// `gateway validate` does; ok is false if there was one.
func loadRuleSet(path string, stderr io.Writer) (rs *ruleset.Set, ok bool) {
	rules, err := config.Load(path)
	if err == nil {
		rs, err = ruleset.Compile(rules, timeZero)
	}
	if err == nil {
		return rs, true
	}
	var list config.Errors
	if errors.As(err, &list) {
		for _, e := range list {
			fmt.Fprintln(stderr, e)
		}
		fmt.Fprintf(stderr, "%s: %d error(s)\n", path, len(list))
	} else {
		fmt.Fprintln(stderr, err)
	}
	return nil, false
}
