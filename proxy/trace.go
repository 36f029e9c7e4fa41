package proxy

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/tether-proxy/tether/proxy/forwarded"
	"github.com/tether-proxy/tether/proxy/internal/h1wire"
	"github.com/tether-proxy/tether/proxy/tracing"
)

// reqTrace is one request's W3C trace context (the trace id
// follows the request from the client through tether to the backend).
type reqTrace struct {
	// header is the traceparent sent to the backend, as a header value
	// slice: tether's own span (a new span id, the request's trace id) as
	// the parent. The request's trace id is header[0][3:35]. String and
	// slice are one allocation, on the heap rather than in the pooled
	// reqState, since a transport may still read the outgoing header
	// after the request is over.
	header []string
	// incoming: the client sent a valid traceparent, so its tracestate
	// goes on to the backend.
	incoming bool
	// span is tether's exported span; nil when export is off.
	span trace.Span
}

// parent is the traceparent sent to the backend.
func (t *reqTrace) parent() string {
	if len(t.header) == 0 {
		return ""
	}
	return t.header[0]
}

// initTracing takes Options.Tracing, or an OTLP exporter when the
// OTEL_* environment asks for one (off by default).
func (p *Proxy) initTracing() error {
	if p.opts.Tracing != nil {
		p.tracing = p.opts.Tracing
		return nil
	}
	exp, err := tracing.FromEnv(context.Background(), p.opts.NodeID)
	if err != nil {
		return fmt.Errorf("tracing: %w", err)
	}
	p.tracing, p.ownTracing = exp, exp != nil
	if exp != nil {
		// The SDK reports failed exports through its global handler;
		// send them to tether's log rather than the SDK's stderr logger.
		logger := p.logger
		otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
			logger.Warn("tracing: span export failed", "err", err)
		}))
	}
	return nil
}

// closeTracing flushes and stops the exporter initTracing made.
func (p *Proxy) closeTracing() {
	if !p.ownTracing {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := p.tracing.Shutdown(ctx); err != nil {
		p.logger.Warn("tracing: flushing spans failed", "err", err)
	}
}

// startTrace gives the request its trace: the client's when it sent a
// valid traceparent (from any peer, as YARP takes it), else a trusted
// proxy's X-Tether-Trace-Id, else a new one; and tether's span in it.
func (p *Proxy) startTrace(r *http.Request, st *reqState) {
	in, ok := tracing.ParseHeader(r.Header[tracing.HeaderTraceparent])
	st.trace.incoming = ok
	var traceID string
	switch {
	case ok:
		traceID = in.TraceID
	case st.client.Trusted:
		if v := r.Header[forwarded.TraceHeader]; len(v) > 0 && forwarded.ValidTraceID(v[0]) {
			traceID = v[0]
		}
	}
	if p.tracing != nil {
		st.trace.span, st.trace.header = p.tracing.Start(r.Context(), r.Method, in, ok,
			strings.Join(r.Header[tracing.HeaderTracestate], ","), traceID,
			attribute.String("http.request.method", r.Method),
			attribute.String("url.path", r.URL.Path),
			attribute.String("url.scheme", st.client.Proto),
			attribute.String("server.address", r.Host),
			attribute.String("client.address", st.client.Host))
	} else {
		// The traceparent shares its allocation with the request's state
		// context, which ServeHTTP makes for every proxied request anyway
		// (stateContext): both outlive the request as long as a transport
		// holds them.
		sc := &stateCtx{Context: r.Context(), st: st}
		st.sctx = sc
		st.trace.header = sc.tp.Format(traceID, "", in.Flags&tracing.Sampled)
	}
	st.client.TraceID = st.trace.parent()[3:35]
}

// setTrace writes the backend's traceparent, and the client's tracestate
// with a valid traceparent only (W3C Trace Context). It runs after the
// route's transforms, as .NET's HttpClient injects the trace context after
// YARP's transforms: an allow list or RequestHeadersCopy=false cannot drop
// it, and a client's own traceparent copied by a transform never goes out
// beside tether's.
func setTrace(in *http.Request, h http.Header, st *reqState) {
	h[traceparentKey] = st.trace.header
	if v := in.Header[tracing.HeaderTracestate]; st.trace.incoming && len(v) > 0 {
		h[tracing.HeaderTracestate] = slices.Clip(v)
	} else {
		delete(h, tracing.HeaderTracestate)
	}
}

// endTrace ends the exported span with the request's outcome.
func (p *Proxy) endTrace(st *reqState, r *http.Request, status int) {
	span := st.trace.span
	if span == nil {
		return
	}
	attrs := []attribute.KeyValue{attribute.Int("http.response.status_code", status)}
	if st.route != nil {
		span.SetName(r.Method + " " + st.route.id)
		attrs = append(attrs, attribute.String("tether.route", st.route.id), attribute.String("tether.cluster", st.cluster.id))
	}
	if st.dest != nil {
		attrs = append(attrs, attribute.String("tether.destination", st.dest.ID))
	}
	if st.aborted {
		attrs = append(attrs, attribute.Bool("tether.aborted", true))
	}
	span.SetAttributes(attrs...)
	if status >= 500 {
		span.SetStatus(codes.Error, http.StatusText(status))
	}
	span.End()
}

// traceparentKey is the outgoing traceparent's map key: h1wire's table
// slice of the name, which the lean head writer takes as valid without a
// look at its bytes.
var traceparentKey = h1wire.TableName(tracing.HeaderTraceparent)
