package proxy

import (
	"bytes"
	"context"
	"encoding/hex"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/tether-proxy/tether/proxy/tracing"
)

const (
	clientTraceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	clientParent  = "00-" + clientTraceID + "-00f067aa0ba902b7-01"
)

// TestTraceContextReachesTheBackend: one trace id follows the request from
// the client through tether to the backend (traceparent, X-Tether-Trace-Id,
// the access log), with tether's own span as the backend's parent.
func TestTraceContextReachesTheBackend(t *testing.T) {
	cases := []struct {
		desc       string
		route, top string
		hdr        http.Header
		wantTrace  string // "": a new one
		wantFlags  string
		wantState  []string
	}{
		{desc: "a valid traceparent is continued with a new span id", hdr: http.Header{"Traceparent": {clientParent}, "Tracestate": {"congo=t61rcWkgMzE"}},
			wantTrace: clientTraceID, wantFlags: "01", wantState: []string{"congo=t61rcWkgMzE"}},
		{desc: "the sampled flag is propagated as sent", hdr: http.Header{"Traceparent": {"00-" + clientTraceID + "-00f067aa0ba902b7-00"}},
			wantTrace: clientTraceID, wantFlags: "00"},
		{desc: "without a traceparent tether starts a trace and drops a stray tracestate", hdr: http.Header{"Tracestate": {"congo=t61rcWkgMzE"}},
			wantFlags: "00"},
		{desc: "an invalid traceparent starts a new trace", hdr: http.Header{"Traceparent": {"00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01"}, "Tracestate": {"a=b"}},
			wantFlags: "00"},
		{desc: "two traceparent headers are invalid", hdr: http.Header{"Traceparent": {clientParent, clientParent}},
			wantFlags: "00"},
		{desc: "RequestHeadersCopy false still propagates the trace", route: `"Transforms": [{"RequestHeadersCopy": "false"}]`,
			hdr: http.Header{"Traceparent": {clientParent}, "Tracestate": {"congo=t61rcWkgMzE"}}, wantTrace: clientTraceID, wantFlags: "01", wantState: []string{"congo=t61rcWkgMzE"}},
		{desc: "an allow list naming traceparent still sends only tether's", route: `"Transforms": [{"RequestHeadersAllowed": "traceparent;tracestate"}]`,
			hdr: http.Header{"Traceparent": {clientParent}, "Tracestate": {"congo=t61rcWkgMzE"}}, wantTrace: clientTraceID, wantFlags: "01", wantState: []string{"congo=t61rcWkgMzE"}},
		{desc: "a transform cannot forge the trace context", route: `"Transforms": [{"RequestHeader": "Traceparent", "Set": "00-0123456789abcdef0123456789abcdef-0123456789abcdef-01"}, {"RequestHeader": "Tracestate", "Set": "x=y"}]`,
			wantFlags: "00"},
		{desc: "a trusted proxy's X-Tether-Trace-Id names the new trace", top: `"TrustedProxies": ["127.0.0.1", "::1"]`,
			hdr: http.Header{"X-Tether-Trace-Id": {"0123456789abcdef0123456789abcdef"}}, wantTrace: "0123456789abcdef0123456789abcdef", wantFlags: "00"},
		{desc: "an untrusted client's X-Tether-Trace-Id is ignored", hdr: http.Header{"X-Tether-Trace-Id": {"0123456789abcdef0123456789abcdef"}}, wantFlags: "00"},
		{desc: "a valid traceparent beats a trusted X-Tether-Trace-Id", top: `"TrustedProxies": ["127.0.0.1", "::1"]`,
			hdr: http.Header{"Traceparent": {clientParent}, "X-Tether-Trace-Id": {"0123456789abcdef0123456789abcdef"}}, wantTrace: clientTraceID, wantFlags: "01"},
	}
	for _, c := range cases {
		t.Run(c.desc, func(t *testing.T) {
			b := newBackend(t, nil)
			h := newHarness(t, mustParse(t, simpleConfig(map[string]string{"d1": b.URL}, "", c.route, c.top)), nil)
			resp, _ := get(t, nil, h.front.URL+"/x", c.hdr)
			got := b.lastRequest()
			if n := len(got.Header["Traceparent"]); n != 1 {
				t.Fatalf("backend got %d traceparent headers", n)
			}
			tp, ok := tracing.Parse(got.Header.Get("Traceparent"))
			if !ok {
				t.Fatalf("backend traceparent %q is not valid", got.Header.Get("Traceparent"))
			}
			if c.wantTrace != "" && tp.TraceID != c.wantTrace {
				t.Errorf("trace id %s, want %s", tp.TraceID, c.wantTrace)
			}
			if c.wantTrace == "" && (tp.TraceID == clientTraceID || tp.TraceID == "0123456789abcdef0123456789abcdef") {
				t.Errorf("trace id %s should be new", tp.TraceID)
			}
			if got.Header.Get("Traceparent")[53:] != c.wantFlags {
				t.Errorf("flags %s, want %s", got.Header.Get("Traceparent")[53:], c.wantFlags)
			}
			if tp.SpanID == "00f067aa0ba902b7" {
				t.Error("tether must send its own span id, not the client's")
			}
			if st := got.Header["Tracestate"]; len(st) != len(c.wantState) || len(st) > 0 && st[0] != c.wantState[0] {
				t.Errorf("tracestate %q, want %q", st, c.wantState)
			}
			if resp.Header.Get("X-Tether-Trace-Id") != tp.TraceID || got.Header.Get("X-Tether-Trace-Id") != tp.TraceID {
				t.Errorf("X-Tether-Trace-Id client %q backend %q, want %s", resp.Header.Get("X-Tether-Trace-Id"), got.Header.Get("X-Tether-Trace-Id"), tp.TraceID)
			}
			lines := h.accessLines(t)
			if len(lines) != 1 || lines[0]["trace_id"] != tp.TraceID || lines[0]["span_id"] != tp.SpanID {
				t.Errorf("access log %v, want trace_id %s span_id %s", lines, tp.TraceID, tp.SpanID)
			}
		})
	}
}

// TestSpansAreExported: with an exporter, tether's server span is recorded
// in the client's trace with the client's span as parent, and it is the
// parent the backend sees.
func TestSpansAreExported(t *testing.T) {
	mem := tracetest.NewInMemoryExporter()
	exp, err := tracing.New(mem, "node-1")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = exp.Shutdown(context.Background()) })
	b := newBackend(t, nil)
	h := newHarness(t, mustParse(t, simpleConfig(map[string]string{"d1": b.URL}, "", "", "")), func(o *Options) { o.Tracing = exp })

	get(t, nil, h.front.URL+"/x", http.Header{"Traceparent": {clientParent}})
	withParent := b.lastRequest().Header.Get("Traceparent")
	get(t, nil, h.front.URL+"/y", nil)
	newTrace := b.lastRequest().Header.Get("Traceparent")
	if err := exp.ForceFlush(context.Background()); err != nil {
		t.Fatal(err)
	}
	spans := mem.GetSpans()
	if len(spans) != 2 {
		t.Fatalf("%d spans exported, want 2", len(spans))
	}
	s := spans[0]
	if s.SpanContext.TraceID().String() != clientTraceID || s.Parent.SpanID().String() != "00f067aa0ba902b7" ||
		!s.Parent.IsRemote() || s.SpanKind != trace.SpanKindServer {
		t.Errorf("span %+v: want trace %s, remote parent 00f067aa0ba902b7, kind server", s.SpanContext, clientTraceID)
	}
	if withParent != "00-"+clientTraceID+"-"+s.SpanContext.SpanID().String()+"-01" {
		t.Errorf("backend traceparent %s does not name tether's span %s", withParent, s.SpanContext.SpanID())
	}
	if s.Name != "GET r" {
		t.Errorf("span name %q", s.Name)
	}
	attrs := map[string]string{}
	for _, kv := range s.Attributes {
		attrs[string(kv.Key)] = kv.Value.String()
	}
	if attrs["http.response.status_code"] != "200" || attrs["tether.route"] != "r" || attrs["tether.destination"] != "d1" {
		t.Errorf("attributes %v", attrs)
	}
	n := spans[1]
	if n.Parent.IsValid() || newTrace != "00-"+n.SpanContext.TraceID().String()+"-"+n.SpanContext.SpanID().String()+"-01" {
		t.Errorf("a new trace: span %+v parent %+v, backend traceparent %s (sampled by the default sampler)", n.SpanContext, n.Parent, newTrace)
	}
}

// BenchmarkServeHTTPTraced is BenchmarkServeHTTP with a client
// traceparent, with export off and with spans recorded into a no-op
// exporter (the SDK's own cost).
func BenchmarkServeHTTPTraced(b *testing.B) {
	for _, export := range []bool{false, true} {
		name := "export=off"
		if export {
			name = "export=on"
		}
		b.Run(name, func(b *testing.B) {
			h := newHarness(b, mustParse(b, benchConfig), func(o *Options) {
				o.AccessLog = nil
				if export {
					exp, err := tracing.New(tracetest.NewNoopExporter(), "")
					if err != nil {
						b.Fatal(err)
					}
					b.Cleanup(func() { _ = exp.Shutdown(context.Background()) })
					o.Tracing = exp
				}
			})
			h.p.rt.Load().clusters["c"].rp.Transport = fakeTransport{}
			req := httptest.NewRequest("GET", "http://front.example/api/users/42?x=1", nil)
			req.RemoteAddr = "192.0.2.1:5555"
			req.Header.Set("Traceparent", clientParent)
			serveLoop(b, h, req)
		})
	}
}

// TestOTLPExportFromEnvironment: with OTEL_EXPORTER_OTLP_ENDPOINT set, the
// proxy exports its spans over OTLP/HTTP (flushed on Close) to a collector.
func TestOTLPExportFromEnvironment(t *testing.T) {
	got := make(chan *coltracepb.ExportTraceServiceRequest, 4)
	collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		req := &coltracepb.ExportTraceServiceRequest{}
		if r.URL.Path != "/v1/traces" || proto.Unmarshal(body, req) != nil {
			http.Error(w, "bad export", http.StatusBadRequest)
			return
		}
		got <- req
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = w.Write(nil)
	}))
	t.Cleanup(collector.Close)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", collector.URL)
	t.Setenv("OTEL_SDK_DISABLED", "")
	t.Setenv("OTEL_TRACES_EXPORTER", "")

	b := newBackend(t, nil)
	cfg := mustParse(t, simpleConfig(map[string]string{"d1": b.URL}, "", "", ""))
	p, err := New(cfg, Options{NodeID: "n1", Dial: (&net.Dialer{}).DialContext})
	if err != nil {
		t.Fatal(err)
	}
	front := httptest.NewServer(p)
	get(t, nil, front.URL+"/x", http.Header{"Traceparent": {clientParent}})
	front.Close()
	p.Close() // flushes the batch
	select {
	case req := <-got:
		rs := req.GetResourceSpans()
		if len(rs) != 1 || len(rs[0].GetScopeSpans()) != 1 || len(rs[0].GetScopeSpans()[0].GetSpans()) != 1 {
			t.Fatalf("export %v", req)
		}
		span := rs[0].GetScopeSpans()[0].GetSpans()[0]
		if hex.EncodeToString(span.GetTraceId()) != clientTraceID || hex.EncodeToString(span.GetParentSpanId()) != "00f067aa0ba902b7" {
			t.Errorf("span trace %x parent %x", span.GetTraceId(), span.GetParentSpanId())
		}
		attrs := map[string]string{}
		for _, kv := range rs[0].GetResource().GetAttributes() {
			attrs[kv.GetKey()] = kv.GetValue().GetStringValue()
		}
		if attrs["service.name"] != "tether" || attrs["service.instance.id"] != "n1" {
			t.Errorf("resource %v", attrs)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no export reached the collector")
	}
}

// TestOTLPExportFailureIsLogged: an unreachable collector costs a warning
// in tether's own log, never the request.
func TestOTLPExportFailureIsLogged(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://"+addr)
	t.Setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "200")
	t.Setenv("OTEL_SDK_DISABLED", "")
	t.Setenv("OTEL_TRACES_EXPORTER", "")
	var logs bytes.Buffer
	var mu sync.Mutex
	b := newBackend(t, nil)
	p, err := New(mustParse(t, simpleConfig(map[string]string{"d1": b.URL}, "", "", "")), Options{
		Logger: slog.New(slog.NewJSONHandler(lockedWriter{&mu, &logs}, nil)),
		Dial:   (&net.Dialer{}).DialContext,
	})
	if err != nil {
		t.Fatal(err)
	}
	front := httptest.NewServer(p)
	resp, _ := get(t, nil, front.URL+"/x", nil)
	front.Close()
	p.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	mu.Lock()
	defer mu.Unlock()
	if !strings.Contains(logs.String(), `"msg":"tracing: `) {
		t.Errorf("no tracing warning in %s", logs.String())
	}
}
