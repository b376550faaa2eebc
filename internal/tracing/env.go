package tracing

import (
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// The OTLP protocols (OTEL_EXPORTER_OTLP_PROTOCOL).
const (
	ProtocolGRPC = "grpc"
	ProtocolHTTP = "http/protobuf"
)

// Defaults of Config, those of the SDK's batch span processor
// (OTEL_BSP_*), but for the export timeout: a receiver that has not
// answered in 10s holds up the spans behind it.
const (
	DefaultMaxQueue      = 2048
	DefaultBatchSize     = 512
	DefaultBatchDelay    = 5 * time.Second
	DefaultExportTimeout = 10 * time.Second
)

// Config configures the traces of one process. The zero value is tracing
// off.
type Config struct {
	// Enabled turns tracing on: OTEL_TRACES_EXPORTER=otlp, --tracing, or
	// for rls TRACING_ENABLED=true.
	Enabled bool
	// Protocol is ProtocolGRPC or ProtocolHTTP. Default ProtocolHTTP, as
	// in the OpenTelemetry specification.
	Protocol string
	// Endpoint, when not empty, is the receiver's URL (for HTTP with its
	// path, /v1/traces); empty leaves it to the exporter, which reads
	// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or OTEL_EXPORTER_OTLP_ENDPOINT
	// (default localhost:4317 for gRPC, localhost:4318 for HTTP), as it
	// reads the _HEADERS, _TIMEOUT, _COMPRESSION, _CERTIFICATE and
	// _INSECURE variables.
	Endpoint string
	// Sampler is OTEL_TRACES_SAMPLER's value and SamplerArg its ratio.
	// Default "parentbased_always_on".
	Sampler    string
	SamplerArg float64
	// Propagators are OTEL_PROPAGATORS's: tracecontext, baggage, b3
	// (single header) and b3multi. Default tracecontext and baggage; b3
	// is read whichever of its two forms a request carries.
	Propagators []string
	// ServiceName is the resource's service.name. Default the
	// program's ("gateway", "gateway-rls").
	ServiceName string
	// Resource are further resource attributes (OTEL_RESOURCE_ATTRIBUTES).
	Resource map[string]string
	// MaxQueue bounds the spans waiting for export; past it spans are
	// dropped and counted. Default DefaultMaxQueue.
	MaxQueue int
	// BatchSize is the most spans one export sends. Default
	// DefaultBatchSize.
	BatchSize int
	// BatchDelay is the longest a span waits for a batch to fill.
	// Default DefaultBatchDelay.
	BatchDelay time.Duration
	// ExportTimeout bounds one export. Default DefaultExportTimeout.
	ExportTimeout time.Duration
	// Store names the counter store on the spans (memory, redis).
	Store string
}

// FromEnv reads the standard OpenTelemetry SDK environment through
// getenv (os.Getenv). service is the default service name. With rls, it
// also reads envoyproxy/ratelimit's TRACING_ENABLED,
// TRACING_EXPORTER_PROTOCOL (http or grpc), TRACING_SERVICE_NAME,
// TRACING_SERVICE_NAMESPACE, TRACING_SERVICE_INSTANCE_ID and
// TRACING_SAMPLING_RATE, which the OTEL_ variables override. Tracing is on
// with OTEL_TRACES_EXPORTER=otlp (or TRACING_ENABLED=true), and off with
// OTEL_TRACES_EXPORTER=none or OTEL_SDK_DISABLED=true whatever else says.
func FromEnv(getenv func(string) string, service string, rls bool) (Config, error) {
	c := Config{ServiceName: service, Protocol: ProtocolHTTP, Sampler: "parentbased_always_on", SamplerArg: 1}
	env := func(name string) string { return strings.TrimSpace(getenv(name)) }
	if rls {
		if err := c.fromRatelimitEnv(env); err != nil {
			return Config{}, err
		}
	}
	switch v := strings.ToLower(env("OTEL_TRACES_EXPORTER")); v {
	case "":
	case "otlp":
		c.Enabled = true
	case "none":
		c.Enabled = false
	default:
		return Config{}, fmt.Errorf("OTEL_TRACES_EXPORTER=%q: the gateway exports traces only over OTLP; set otlp, or none for no traces", v)
	}
	if b, err := envBool(env, "OTEL_SDK_DISABLED"); err != nil {
		return Config{}, err
	} else if b {
		c.Enabled = false
	}
	proto := env("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
	if proto == "" {
		proto = env("OTEL_EXPORTER_OTLP_PROTOCOL")
	}
	if proto != "" {
		if err := c.setProtocol("OTEL_EXPORTER_OTLP_PROTOCOL", proto); err != nil {
			return Config{}, err
		}
	}
	if s := env("OTEL_TRACES_SAMPLER"); s != "" {
		c.Sampler, c.SamplerArg = strings.ToLower(s), 1
	}
	if a := env("OTEL_TRACES_SAMPLER_ARG"); a != "" {
		f, err := strconv.ParseFloat(a, 64)
		if err != nil || f < 0 || f > 1 {
			return Config{}, fmt.Errorf("OTEL_TRACES_SAMPLER_ARG=%q: give a ratio from 0 to 1, e.g. 0.01", a)
		}
		c.SamplerArg = f
	}
	if _, err := newSampler(c.Sampler, c.SamplerArg); err != nil {
		return Config{}, fmt.Errorf("OTEL_TRACES_SAMPLER=%q: %w", c.Sampler, err)
	}
	if p := env("OTEL_PROPAGATORS"); p != "" {
		c.Propagators = nil
		for _, name := range strings.Split(p, ",") {
			if name = strings.ToLower(strings.TrimSpace(name)); name != "" {
				c.Propagators = append(c.Propagators, name)
			}
		}
		if _, err := newPropagator(c.Propagators); err != nil {
			return Config{}, fmt.Errorf("OTEL_PROPAGATORS=%q: %w", p, err)
		}
	}
	if ra := env("OTEL_RESOURCE_ATTRIBUTES"); ra != "" {
		attrs, err := parseResource(ra)
		if err != nil {
			return Config{}, fmt.Errorf("OTEL_RESOURCE_ATTRIBUTES: %w", err)
		}
		if c.Resource == nil {
			c.Resource = map[string]string{}
		}
		for k, v := range attrs {
			c.Resource[k] = v
		}
		if v, ok := attrs["service.name"]; ok {
			c.ServiceName = v
		}
	}
	if s := env("OTEL_SERVICE_NAME"); s != "" {
		c.ServiceName = s
	}
	for _, n := range []struct {
		name string
		to   *int
	}{{"OTEL_BSP_MAX_QUEUE_SIZE", &c.MaxQueue}, {"OTEL_BSP_MAX_EXPORT_BATCH_SIZE", &c.BatchSize}} {
		if v := env(n.name); v != "" {
			i, err := strconv.Atoi(v)
			if err != nil || i <= 0 {
				return Config{}, fmt.Errorf("%s=%q: give a whole number above 0", n.name, v)
			}
			*n.to = i
		}
	}
	for _, n := range []struct {
		name string
		to   *time.Duration
	}{{"OTEL_BSP_SCHEDULE_DELAY", &c.BatchDelay}, {"OTEL_BSP_EXPORT_TIMEOUT", &c.ExportTimeout}} {
		if v := env(n.name); v != "" {
			ms, err := strconv.Atoi(v)
			if err != nil || ms <= 0 {
				return Config{}, fmt.Errorf("%s=%q: give milliseconds above 0", n.name, v)
			}
			*n.to = time.Duration(ms) * time.Millisecond
		}
	}
	return c, nil
}

// fromRatelimitEnv reads envoyproxy/ratelimit's TRACING_ variables.
func (c *Config) fromRatelimitEnv(env func(string) string) error {
	on, err := envBool(env, "TRACING_ENABLED")
	if err != nil {
		return err
	}
	c.Enabled = on
	if p := env("TRACING_EXPORTER_PROTOCOL"); p != "" {
		if err := c.setProtocol("TRACING_EXPORTER_PROTOCOL", p); err != nil {
			return err
		}
	}
	if s := env("TRACING_SERVICE_NAME"); s != "" {
		c.ServiceName = s
	}
	for name, attr := range map[string]string{"TRACING_SERVICE_NAMESPACE": "service.namespace", "TRACING_SERVICE_INSTANCE_ID": "service.instance.id"} {
		if v := env(name); v != "" {
			if c.Resource == nil {
				c.Resource = map[string]string{}
			}
			c.Resource[attr] = v
		}
	}
	if r := env("TRACING_SAMPLING_RATE"); r != "" {
		f, err := strconv.ParseFloat(r, 64)
		if err != nil || f < 0 || f > 1 {
			return fmt.Errorf("TRACING_SAMPLING_RATE=%q: give a ratio from 0 to 1, e.g. 0.01", r)
		}
		c.Sampler, c.SamplerArg = "parentbased_traceidratio", f
	}
	return nil
}

// setProtocol sets the protocol from variable name's value v: grpc,
// http/protobuf, or http as envoyproxy/ratelimit spells it.
func (c *Config) setProtocol(name, v string) error {
	switch strings.ToLower(v) {
	case "grpc":
		c.Protocol = ProtocolGRPC
	case "http/protobuf", "http":
		c.Protocol = ProtocolHTTP
	default:
		return fmt.Errorf("%s=%q: give grpc or http/protobuf (http/json is not supported)", name, v)
	}
	return nil
}

func envBool(env func(string) string, name string) (bool, error) {
	v := env(name)
	if v == "" {
		return false, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, fmt.Errorf("%s=%q: give true or false", name, v)
	}
	return b, nil
}

// parseResource parses OTEL_RESOURCE_ATTRIBUTES: key=value pairs
// separated by commas, values percent-encoded (W3C Baggage's format).
func parseResource(s string) (map[string]string, error) {
	out := map[string]string{}
	for _, kv := range strings.Split(s, ",") {
		kv = strings.TrimSpace(kv)
		if kv == "" {
			continue
		}
		k, v, ok := strings.Cut(kv, "=")
		k = strings.TrimSpace(k)
		if !ok || k == "" {
			return nil, fmt.Errorf("%q is not key=value", kv)
		}
		dv, err := url.PathUnescape(strings.TrimSpace(v))
		if err != nil {
			return nil, fmt.Errorf("the value of %s: %w", k, err)
		}
		out[k] = dv
	}
	return out, nil
}
