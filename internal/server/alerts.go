package server

import (
	"fmt"
	"log/slog"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ratelimit-gateway/gateway/internal/alert"
	"github.com/ratelimit-gateway/gateway/internal/safefile"
)

// alerts starts the budget alerts of the process (docs/plans-and-tokens.md,
// "Budget alerts"): claimed once per fleet on Redis, else in this
// process, and sent to --alert-webhook signed with --alert-secret-file.
func (s *Server) alerts(cfg Config, reg prometheus.Registerer, log *slog.Logger) (*alert.Notifier, error) {
	ac := alert.Config{URL: cfg.AlertWebhook, Queue: cfg.AlertQueue, Registerer: reg, Logger: log}
	if cfg.AlertSecretFile != "" {
		if cfg.AlertWebhook == "" {
			return nil, fmt.Errorf("--alert-secret-file signs the calls of --alert-webhook: set --alert-webhook too")
		}
		data, err := safefile.Read(cfg.AlertSecretFile, safefile.MaxSecretBytes)
		if err != nil {
			return nil, fmt.Errorf("--alert-secret-file: %w", err)
		}
		secret := strings.TrimSpace(string(data))
		if secret == "" {
			return nil, fmt.Errorf("--alert-secret-file %s is empty: write the shared secret into it", cfg.AlertSecretFile)
		}
		ac.Secret = []byte(secret)
	}
	if red := s.st.Redis(); red != nil {
		ac.Once = red
	}
	n, err := alert.New(ac)
	if err != nil {
		return nil, fmt.Errorf("--alert-webhook: %w", err)
	}
	s.closers = append(s.closers, func() error { n.Close(); return nil })
	return n, nil
}
