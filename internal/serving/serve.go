// Package serving runs the listeners of the gateway's commands (`gateway
// serve`'s proxy and admin ports, `gateway rls`'s gRPC, admin, debug and
// metrics ports) through one serve and drain loop (Run), and reloads the
// TLS certificate pair they serve (CertReloader).
//
// It serves and stops servers built elsewhere; it must not build
// handlers, read flags or handle signals: the commands' packages (server,
// rls) build the servers, cmd/gateway owns the signals.
package serving

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"google.golang.org/grpc"
)

// Server is one listener's server as Run drives it. Build one with HTTP or
// GRPC.
type Server struct {
	// Serve serves until Shutdown or Close; it returns
	// http.ErrServerClosed, or nil, once stopped that way.
	Serve func() error
	// Shutdown stops accepting, and waits for what is in flight until
	// ctx is done; then it stops at once and returns ctx's error.
	Shutdown func(ctx context.Context) error
	// Close stops at once.
	Close func() error
	// After, if not nil, holds the serving back until it is closed; if
	// Run's context ends first, the server is closed unserved.
	After <-chan struct{}
	// Admin keeps the server serving through the drain (a load
	// balancer's /readyz, the metrics): it is shut down after the
	// others are.
	Admin bool
}

// HTTP returns srv serving on ln, with TLS (srv.TLSConfig) if tls.
func HTTP(srv *http.Server, ln net.Listener, tls bool) Server {
	serve := func() error { return srv.Serve(ln) }
	if tls {
		// The certificate comes from TLSConfig.GetCertificate.
		serve = func() error { return srv.ServeTLS(ln, "", "") }
	}
	return Server{Serve: serve, Shutdown: srv.Shutdown, Close: srv.Close}
}

// GRPC returns srv serving on ln. Its Shutdown lets the calls in flight
// finish (GracefulStop) until ctx is done, then cancels them (Stop).
func GRPC(srv *grpc.Server, ln net.Listener) Server {
	return Server{
		Serve: func() error { return srv.Serve(ln) },
		Shutdown: func(ctx context.Context) error {
			done := make(chan struct{})
			go func() {
				srv.GracefulStop()
				close(done)
			}()
			select {
			case <-done:
				return nil
			case <-ctx.Done():
				srv.Stop()
				<-done
				return ctx.Err()
			}
		},
		Close: func() error {
			srv.Stop()
			ln.Close() // Serve may not have run, and Stop closes only its listeners
			return nil
		},
	}
}

// Config configures Run.
type Config struct {
	// Servers are served until the context ends, the others first, the
	// Admin ones last.
	Servers []Server
	// Started, if not nil, is called once every server serves (after
	// their After), before the context ends.
	Started func()
	// Draining, if not nil, is called once the context ends, before
	// DrainDelay: it makes readiness fail (/readyz, the gRPC health
	// service) so that load balancers send no more.
	Draining func()
	// DrainDelay is how long, after Draining, the servers keep accepting
	// as usual before they stop accepting: long enough for a load
	// balancer that polls readiness to take the process out of rotation
	// first. 0 stops accepting at once.
	DrainDelay time.Duration
	// ShutdownTimeout bounds the drain of what is in flight. Required.
	ShutdownTimeout time.Duration
	// Logger is the one logger. nil means slog.Default().
	Logger *slog.Logger
}

// Run serves every server until ctx is done, then drains: Draining,
// DrainDelay, then each server stops accepting and finishes what is in
// flight within ShutdownTimeout, the Admin ones last (they answer
// readiness 503 through the drain). It returns an error when a server
// fails (closing the others), or when the drain runs out of time.
func Run(ctx context.Context, cfg Config) error {
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	closeAll := func() {
		for _, s := range cfg.Servers {
			s.Close()
		}
	}
	errc := make(chan error, len(cfg.Servers))
	serve := func(s Server) {
		err := s.Serve()
		if errors.Is(err, http.ErrServerClosed) || errors.Is(err, grpc.ErrServerStopped) {
			err = nil
		}
		errc <- err
	}
	// The servers held back by After start in order once each is let go:
	// the admin port answers meanwhile.
	var held []Server
	for _, s := range cfg.Servers {
		if s.After == nil {
			go serve(s)
		} else {
			held = append(held, s)
		}
	}
	for _, s := range held {
		select {
		case <-s.After:
			go serve(s)
		case <-ctx.Done():
			closeAll()
			return nil
		case err := <-errc:
			closeAll()
			return fmt.Errorf("serving: %w", errOrStopped(err))
		}
	}
	if cfg.Started != nil {
		cfg.Started()
	}
	select {
	case <-ctx.Done():
	case err := <-errc:
		closeAll()
		return fmt.Errorf("serving: %w", errOrStopped(err))
	}
	if cfg.Draining != nil {
		cfg.Draining()
	}
	if cfg.DrainDelay > 0 {
		log.Info("draining: readiness fails; accepting new connections until the drain delay is over", "drain_delay", cfg.DrainDelay)
		t := time.NewTimer(cfg.DrainDelay)
		select {
		case <-t.C:
		case err := <-errc:
			t.Stop()
			closeAll()
			return fmt.Errorf("serving: %w", errOrStopped(err))
		}
	}
	log.Info("shutting down: no new connections; draining what is in flight", "timeout", cfg.ShutdownTimeout)
	sctx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownTimeout)
	defer cancel()
	var errs []error
	for _, admin := range []bool{false, true} {
		for _, s := range cfg.Servers {
			if s.Admin == admin {
				errs = append(errs, s.Shutdown(sctx))
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("shutting down: %w", err)
	}
	log.Info("stopped")
	return nil
}

// errOrStopped returns err, or an error saying that a server stopped on
// its own when it returned none.
func errOrStopped(err error) error {
	if err == nil {
		return errors.New("a server stopped")
	}
	return err
}
