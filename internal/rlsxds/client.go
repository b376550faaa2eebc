// Package rlsxds is a state-of-the-world ADS client of envoyproxy/ratelimit's
// RateLimitConfig resources (type.googleapis.com/ratelimit.config.ratelimit.v3.RateLimitConfig),
// as Envoy Gateway and Envoy AI Gateway push them to their rate-limit
// service (docs/rls.md, "Config over xDS"): it subscribes with a node ID,
// hands every response's resources to an Apply function, ACKs what Apply
// takes and NACKs what it refuses with its error, and reconnects with
// backoff when the stream breaks.
//
// It speaks the xDS transport protocol only: it neither reads nor keeps
// the configuration (Apply does) and decides nothing.
package rlsxds

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/ratelimit-gateway/gateway/internal/backoff"
)

// TypeURL is the type of the resources the client subscribes to.
const TypeURL = "type.googleapis.com/ratelimit.config.ratelimit.v3.RateLimitConfig"

// Defaults of Config, envoyproxy/ratelimit's (XDS_CLIENT_BACKOFF_*).
const (
	DefaultBackoffInitial = 10 * time.Second
	DefaultBackoffMax     = 60 * time.Second
)

// Config configures a Client.
type Config struct {
	// ServerURL is the xDS server's host:port (or any gRPC target).
	// Required.
	ServerURL string
	// NodeID identifies this service to the server, which keeps a
	// snapshot per node ID. Required.
	NodeID string
	// NodeMetadata is sent as the node's metadata, every value a string.
	NodeMetadata map[string]string
	// TLS, if not nil, connects with TLS (with a client certificate for
	// mutual TLS); nil connects in plain text.
	TLS *tls.Config
	// Headers are sent as gRPC metadata on the stream.
	Headers map[string]string
	// BackoffInitial and BackoffMax bound the waits before a reconnection
	// (full jitter, doubling). Defaults DefaultBackoffInitial and
	// DefaultBackoffMax.
	BackoffInitial, BackoffMax time.Duration
	// MaxMsgSize is the largest response taken, in bytes; 0 means gRPC's
	// default (4 MiB).
	MaxMsgSize int
	// Apply is given the resources of every response, the whole set in
	// force (state of the world), with the response's version. It returns
	// nil to have them ACKed, or an error to have them NACKed with it;
	// after an error the configuration in force must stay as it was.
	// Required.
	Apply func(version string, resources []*rlsconfv3.RateLimitConfig) error
	// Logger is the one logger. Default slog.Default().
	Logger *slog.Logger
}

// Client is an ADS client. It is used by one goroutine, through Run.
type Client struct {
	cfg  Config
	conn *grpc.ClientConn
	node *corev3.Node
	// acked is the version of the last response Apply took.
	acked string
}

// New returns a Client of cfg; it connects only when Run runs.
func New(cfg Config) (*Client, error) {
	switch {
	case cfg.ServerURL == "":
		return nil, errors.New("rlsxds: the xDS server URL is empty")
	case cfg.NodeID == "":
		return nil, errors.New("rlsxds: the node ID is empty")
	case cfg.Apply == nil:
		return nil, errors.New("rlsxds: New needs an Apply function")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.BackoffInitial <= 0 {
		cfg.BackoffInitial = DefaultBackoffInitial
	}
	if cfg.BackoffMax <= 0 {
		cfg.BackoffMax = DefaultBackoffMax
	}
	creds := insecure.NewCredentials()
	if cfg.TLS != nil {
		creds = credentials.NewTLS(cfg.TLS)
	}
	opts := []grpc.DialOption{grpc.WithTransportCredentials(creds)}
	if cfg.MaxMsgSize > 0 {
		opts = append(opts, grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(cfg.MaxMsgSize)))
	}
	conn, err := grpc.NewClient(cfg.ServerURL, opts...)
	if err != nil {
		return nil, fmt.Errorf("rlsxds: xDS server %s: %w", cfg.ServerURL, err)
	}
	node := &corev3.Node{Id: cfg.NodeID}
	if len(cfg.NodeMetadata) > 0 {
		m := make(map[string]any, len(cfg.NodeMetadata))
		for k, v := range cfg.NodeMetadata {
			m[k] = v
		}
		node.Metadata, _ = structpb.NewStruct(m) // strings only: cannot fail
	}
	return &Client{cfg: cfg, conn: conn, node: node}, nil
}

// Run subscribes and applies responses until ctx is done, reconnecting
// after a broken stream with backoff (reset by every response). It
// returns nil once ctx is done, and closes the connection.
func (c *Client) Run(ctx context.Context) error {
	defer c.conn.Close()
	b := backoff.Backoff{Base: c.cfg.BackoffInitial, Max: c.cfg.BackoffMax}
	for {
		got, err := c.stream(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if got {
			b.Reset()
		}
		wait := b.Next()
		c.cfg.Logger.Warn("xDS stream broken; reconnecting", "server", c.cfg.ServerURL, "err", err, "in", wait)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
	}
}

// stream runs one ADS stream until it breaks; got reports whether it
// received a response.
func (c *Client) stream(ctx context.Context) (got bool, err error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for k, v := range c.cfg.Headers {
		ctx = metadata.AppendToOutgoingContext(ctx, k, v)
	}
	st, err := discoveryv3.NewAggregatedDiscoveryServiceClient(c.conn).StreamAggregatedResources(ctx)
	if err != nil {
		return false, err
	}
	// The first request names the node and the version in force, so that
	// a server that restarted with the same snapshot sends nothing new.
	if err := st.Send(&discoveryv3.DiscoveryRequest{Node: c.node, TypeUrl: TypeURL, VersionInfo: c.acked}); err != nil {
		return false, err
	}
	for {
		resp, err := st.Recv()
		if err != nil {
			return got, err
		}
		got = true
		if resp.GetTypeUrl() != TypeURL {
			continue // not subscribed to: ADS may multiplex others
		}
		next := &discoveryv3.DiscoveryRequest{TypeUrl: TypeURL, ResponseNonce: resp.GetNonce()}
		if err := c.apply(resp); err != nil {
			c.cfg.Logger.Error("xDS config refused (NACK); the config in force stays", "version", resp.GetVersionInfo(), "err", err)
			next.VersionInfo = c.acked
			next.ErrorDetail = status.New(codes.InvalidArgument, err.Error()).Proto()
		} else {
			c.acked = resp.GetVersionInfo()
			next.VersionInfo = c.acked
		}
		if err := st.Send(next); err != nil {
			return got, err
		}
	}
}

// apply decodes resp's resources and hands them to Apply.
func (c *Client) apply(resp *discoveryv3.DiscoveryResponse) error {
	rs := make([]*rlsconfv3.RateLimitConfig, 0, len(resp.GetResources()))
	for i, a := range resp.GetResources() {
		rc := new(rlsconfv3.RateLimitConfig)
		if err := a.UnmarshalTo(rc); err != nil {
			return fmt.Errorf("resource %d (%s): %w", i, a.GetTypeUrl(), err)
		}
		rs = append(rs, rc)
	}
	return c.cfg.Apply(resp.GetVersionInfo(), rs)
}
