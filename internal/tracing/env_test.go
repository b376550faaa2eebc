package tracing

import (
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestFromEnv(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		env     map[string]string
		rls     bool
		want    Config
		wantErr string
	}{
		{name: "off by default", env: nil,
			want: Config{ServiceName: "gateway", Protocol: ProtocolHTTP, Sampler: "parentbased_always_on", SamplerArg: 1}},
		{name: "otlp turns it on", env: map[string]string{"OTEL_TRACES_EXPORTER": "otlp"},
			want: Config{Enabled: true, ServiceName: "gateway", Protocol: ProtocolHTTP, Sampler: "parentbased_always_on", SamplerArg: 1}},
		{name: "none", env: map[string]string{"OTEL_TRACES_EXPORTER": "none"},
			want: Config{ServiceName: "gateway", Protocol: ProtocolHTTP, Sampler: "parentbased_always_on", SamplerArg: 1}},
		{name: "sdk disabled wins", env: map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_SDK_DISABLED": "true"},
			want: Config{ServiceName: "gateway", Protocol: ProtocolHTTP, Sampler: "parentbased_always_on", SamplerArg: 1}},
		{name: "everything", env: map[string]string{
			"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
			"OTEL_TRACES_SAMPLER": "parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG": "0.01",
			"OTEL_PROPAGATORS": "tracecontext, b3multi", "OTEL_SERVICE_NAME": "edge",
			"OTEL_RESOURCE_ATTRIBUTES": "deployment.environment=prod,team=a%20b",
			"OTEL_BSP_MAX_QUEUE_SIZE":  "100", "OTEL_BSP_MAX_EXPORT_BATCH_SIZE": "10",
			"OTEL_BSP_SCHEDULE_DELAY": "250", "OTEL_BSP_EXPORT_TIMEOUT": "2000",
		}, want: Config{
			Enabled: true, Protocol: ProtocolGRPC, Sampler: "parentbased_traceidratio", SamplerArg: 0.01,
			Propagators: []string{"tracecontext", "b3multi"}, ServiceName: "edge",
			Resource: map[string]string{"deployment.environment": "prod", "team": "a b"},
			MaxQueue: 100, BatchSize: 10, BatchDelay: 250 * time.Millisecond, ExportTimeout: 2 * time.Second,
		}},
		{name: "traces protocol wins", env: map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf"},
			want: Config{ServiceName: "gateway", Protocol: ProtocolHTTP, Sampler: "parentbased_always_on", SamplerArg: 1}},
		{name: "service name from resource", env: map[string]string{"OTEL_RESOURCE_ATTRIBUTES": "service.name=api"},
			want: Config{ServiceName: "api", Protocol: ProtocolHTTP, Sampler: "parentbased_always_on", SamplerArg: 1,
				Resource: map[string]string{"service.name": "api"}}},
		{name: "ratelimit's variables", rls: true, env: map[string]string{
			"TRACING_ENABLED": "true", "TRACING_EXPORTER_PROTOCOL": "grpc", "TRACING_SERVICE_NAME": "RateLimit",
			"TRACING_SERVICE_NAMESPACE": "ns", "TRACING_SERVICE_INSTANCE_ID": "pod-1", "TRACING_SAMPLING_RATE": "0.5",
		}, want: Config{
			Enabled: true, Protocol: ProtocolGRPC, ServiceName: "RateLimit", Sampler: "parentbased_traceidratio", SamplerArg: 0.5,
			Resource: map[string]string{"service.namespace": "ns", "service.instance.id": "pod-1"},
		}},
		{name: "OTEL_ overrides TRACING_", rls: true, env: map[string]string{
			"TRACING_ENABLED": "true", "TRACING_EXPORTER_PROTOCOL": "http", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
			"TRACING_SERVICE_NAME": "RateLimit", "OTEL_SERVICE_NAME": "rls", "OTEL_TRACES_EXPORTER": "none",
		}, want: Config{Protocol: ProtocolGRPC, ServiceName: "rls", Sampler: "parentbased_always_on", SamplerArg: 1}},
		{name: "serve ignores TRACING_", env: map[string]string{"TRACING_ENABLED": "true"},
			want: Config{ServiceName: "gateway", Protocol: ProtocolHTTP, Sampler: "parentbased_always_on", SamplerArg: 1}},
		{name: "bad exporter", env: map[string]string{"OTEL_TRACES_EXPORTER": "jaeger"}, wantErr: `OTEL_TRACES_EXPORTER="jaeger"`},
		{name: "json protocol", env: map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"}, wantErr: "http/json is not supported"},
		{name: "bad sampler", env: map[string]string{"OTEL_TRACES_SAMPLER": "sometimes"}, wantErr: `OTEL_TRACES_SAMPLER="sometimes"`},
		{name: "bad ratio", env: map[string]string{"OTEL_TRACES_SAMPLER_ARG": "2"}, wantErr: "a ratio from 0 to 1"},
		{name: "bad propagator", env: map[string]string{"OTEL_PROPAGATORS": "xray"}, wantErr: `unknown propagator "xray"`},
		{name: "bad resource", env: map[string]string{"OTEL_RESOURCE_ATTRIBUTES": "novalue"}, wantErr: "is not key=value"},
		{name: "bad queue", env: map[string]string{"OTEL_BSP_MAX_QUEUE_SIZE": "-1"}, wantErr: "OTEL_BSP_MAX_QUEUE_SIZE"},
		{name: "bad rate", rls: true, env: map[string]string{"TRACING_SAMPLING_RATE": "x"}, wantErr: "TRACING_SAMPLING_RATE"},
		{name: "bad enabled", rls: true, env: map[string]string{"TRACING_ENABLED": "yes please"}, wantErr: "TRACING_ENABLED"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := FromEnv(func(k string) string { return tt.env[k] }, "gateway", tt.rls)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("FromEnv: got error %v, want one with %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("FromEnv: %v", err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("FromEnv: got %+v, want %+v", got, tt.want)
			}
		})
	}
}
