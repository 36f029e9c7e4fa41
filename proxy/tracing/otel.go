package tracing

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// Exporter records tether's server spans and exports them. Safe for
// concurrent use.
type Exporter struct {
	tp     *sdktrace.TracerProvider
	tracer trace.Tracer
}

// Enabled reports whether the environment asks for OTLP export of traces.
func Enabled() bool {
	if v, err := strconv.ParseBool(os.Getenv("OTEL_SDK_DISABLED")); err == nil && v {
		return false
	}
	if strings.EqualFold(strings.TrimSpace(os.Getenv("OTEL_TRACES_EXPORTER")), "none") {
		return false
	}
	return os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != "" || os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != ""
}

// FromEnv returns an OTLP/HTTP exporter configured by the OTEL_*
// environment, or nil when Enabled is false. nodeID, when set, becomes the
// service.instance.id resource attribute (OTEL_RESOURCE_ATTRIBUTES wins).
func FromEnv(ctx context.Context, nodeID string) (*Exporter, error) {
	if !Enabled() {
		return nil, nil
	}
	exp, err := otlptracehttp.New(ctx)
	if err != nil {
		return nil, err
	}
	return New(exp, nodeID)
}

// New records spans into exp (batched). Tests pass an in-memory exporter.
func New(exp sdktrace.SpanExporter, nodeID string) (*Exporter, error) {
	attrs := []attribute.KeyValue{attribute.String("service.name", "tether")}
	if nodeID != "" {
		attrs = append(attrs, attribute.String("service.instance.id", nodeID))
	}
	res, err := resource.New(context.Background(),
		resource.WithAttributes(attrs...), resource.WithTelemetrySDK(), resource.WithFromEnv())
	if err != nil {
		return nil, err
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res),
		sdktrace.WithIDGenerator(idGenerator{}))
	return &Exporter{tp: tp, tracer: tp.Tracer("github.com/tether-proxy/tether/proxy")}, nil
}

// Shutdown flushes the spans not yet exported and stops the exporter.
func (e *Exporter) Shutdown(ctx context.Context) error {
	if e == nil {
		return nil
	}
	return e.tp.Shutdown(ctx)
}

// ForceFlush exports every span ended so far (tests).
func (e *Exporter) ForceFlush(ctx context.Context) error { return e.tp.ForceFlush(ctx) }

// Start begins tether's server span for a request. With a valid parent the
// span joins its trace; otherwise it starts one whose trace id is traceID
// when valid (a trusted proxy's X-Tether-Trace-Id), else a new one. The
// returned traceparent (a FormatHeader slice) carries the span's ids and
// the sampler's decision.
func (e *Exporter) Start(ctx context.Context, name string, parent Parent, hasParent bool, tracestate string, traceID string, attrs ...attribute.KeyValue) (trace.Span, []string) {
	if hasParent {
		sc := trace.SpanContextConfig{Remote: true, TraceFlags: trace.TraceFlags(parent.Flags & Sampled)}
		_, _ = hex.Decode(sc.TraceID[:], []byte(parent.TraceID))
		_, _ = hex.Decode(sc.SpanID[:], []byte(parent.SpanID))
		if ts, err := trace.ParseTraceState(tracestate); err == nil {
			sc.TraceState = ts
		}
		ctx = trace.ContextWithRemoteSpanContext(ctx, trace.NewSpanContext(sc))
	} else if ValidTraceID(traceID) {
		ctx = context.WithValue(ctx, traceIDKey{}, traceID)
	}
	_, span := e.tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindServer), trace.WithAttributes(attrs...))
	sc := span.SpanContext()
	return span, FormatHeader(sc.TraceID().String(), sc.SpanID().String(), byte(sc.TraceFlags()&trace.FlagsSampled))
}

type traceIDKey struct{}

// idGenerator lets a new trace take the trace id tether already chose (a
// trusted X-Tether-Trace-Id) instead of a random one.
type idGenerator struct{}

func (idGenerator) NewIDs(ctx context.Context) (trace.TraceID, trace.SpanID) {
	var tid trace.TraceID
	if s, ok := ctx.Value(traceIDKey{}).(string); ok {
		_, _ = hex.Decode(tid[:], []byte(s))
	}
	for !tid.IsValid() {
		binary.BigEndian.PutUint64(tid[:8], rand.Uint64())
		binary.BigEndian.PutUint64(tid[8:], rand.Uint64())
	}
	return tid, newSpanID()
}

func (idGenerator) NewSpanID(ctx context.Context, _ trace.TraceID) trace.SpanID { return newSpanID() }

func newSpanID() trace.SpanID {
	var sid trace.SpanID
	binary.BigEndian.PutUint64(sid[:], NewSpanID())
	return sid
}

var _ sdktrace.IDGenerator = idGenerator{}
