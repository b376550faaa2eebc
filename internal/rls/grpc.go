package rls

import (
	"crypto/tls"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/reflection"
)

// ServiceName is the gRPC service name of RateLimitService, which the
// health service also reports on.
const ServiceName = "envoy.service.ratelimit.v3.RateLimitService"

// NewGRPCServer returns a gRPC server of svc and of the standard health
// service (grpc.health.v1.Health), serving over TLS when tlsConf is not
// nil, with extra's options too (the tracing stats handler). The health
// service starts SERVING for "" and ServiceName; set it to NOT_SERVING
// while draining. Server reflection is on, so that grpcurl lists and
// calls the service.
func NewGRPCServer(svc *Service, tlsConf *tls.Config, extra ...grpc.ServerOption) (*grpc.Server, *health.Server) {
	opts := []grpc.ServerOption{
		// Envoy keeps its connections open for ever; pings from a client
		// more often than this are abuse.
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: true}),
		grpc.MaxRecvMsgSize(1 << 20),
	}
	if tlsConf != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(tlsConf)))
	}
	srv := grpc.NewServer(append(opts, extra...)...)
	rlsv3.RegisterRateLimitServiceServer(srv, svc)
	hs := health.NewServer()
	hs.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	hs.SetServingStatus(ServiceName, healthpb.HealthCheckResponse_SERVING)
	healthpb.RegisterHealthServer(srv, hs)
	reflection.Register(srv)
	return srv, hs
}
