package proxy

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tether-proxy/tether/proxy/accesslog"
	"github.com/tether-proxy/tether/proxy/affinity"
	"github.com/tether-proxy/tether/proxy/forwarded"
)

const benchConfig = `{
  "TrustedProxies": ["10.0.0.0/8"],
  "ReverseProxy": {
    "Routes": { "r": { "ClusterId": "c", "Match": { "Path": "/api/{**rest}" },
      "Transforms": [ {"PathRemovePrefix": "/api"}, {"RequestHeader": "X-Env", "Set": "prod"} ] } },
    "Clusters": { "c": { "Destinations": { "d1": { "Address": "http://10.1.2.3:8080/base/" } } } }
  }
}`

// BenchmarkRewrite measures one full outbound rewrite: forwarded headers,
// two transforms, target join. Building Out (ReverseProxy's Clone) is
// excluded.
func BenchmarkRewrite(b *testing.B) {
	h := newHarness(b, mustParse(b, benchConfig), nil)
	rt := h.p.rt.Load()
	in := httptest.NewRequest("GET", "http://front.example/api/users/42?x=1", nil)
	in.RemoteAddr = "10.9.9.9:5555"
	in.RequestURI = "/api/users/42?x=1" // origin form, as a server hands it over
	in.Header.Set("X-Forwarded-For", "1.2.3.4")
	in.Header.Set("User-Agent", "bench")
	in.Header.Set("Accept", "*/*")
	rr := rt.match(in)
	if rr == nil {
		b.Fatal("no route")
	}
	st := &reqState{route: rr, cluster: rr.cluster, dest: rr.cluster.up.Destinations[0]}
	st.client.Host = forwarded.HostOf(in.RemoteAddr)
	st.client.Trusted = rt.trust.Trusts(st.client.Host)
	st.client.Proto = forwarded.ClientProto(in, st.client.Trusted)
	h.p.startTrace(in, st)
	ctx := context.WithValue(in.Context(), stateKey{}, st)
	outs := make([]*http.Request, 0, 1)
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		outs = append(outs[:0], in.Clone(ctx))
		b.StartTimer()
		h.p.rewrite(&httputil.ProxyRequest{In: in, Out: outs[0]})
	}
	b.StopTimer()
	out := outs[0]
	if out.URL.String() != "http://10.1.2.3:8080/base/users/42?x=1" || out.Header.Get("X-Env") != "prod" ||
		out.Header.Get("X-Forwarded-For") != "1.2.3.4, 10.9.9.9" || out.Header.Get("Traceparent") == "" {
		b.Fatalf("rewrite produced %s %v", out.URL, out.Header)
	}
}

// fakeTransport answers every request with a small 200.
type fakeTransport struct{}

func (fakeTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	return &http.Response{StatusCode: 200, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: http.Header{"Content-Type": {"text/plain"}}, ContentLength: 2,
		Body: io.NopCloser(strings.NewReader("ok")), Request: r}, nil
}

// discardWriter is a ResponseWriter that allocates nothing per request.
type discardWriter struct{ h http.Header }

func (w *discardWriter) Header() http.Header         { return w.h }
func (w *discardWriter) WriteHeader(int)             {}
func (w *discardWriter) Write(b []byte) (int, error) { return len(b), nil }

// serveLoop runs req through h's handler b.N times, the response
// discarded.
func serveLoop(b *testing.B, h *harness, req *http.Request) {
	w := &discardWriter{h: http.Header{}}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		clear(w.h)
		h.p.ServeHTTP(w, req)
	}
}

// BenchmarkServeHTTP measures the whole data path per request (route
// match, affinity off, pick, ReverseProxy, rewrite, metrics) against an
// in-memory transport.
func BenchmarkServeHTTP(b *testing.B) {
	h := newHarness(b, mustParse(b, benchConfig), func(o *Options) { o.AccessLog = nil })
	h.p.rt.Load().clusters["c"].rp.Transport = fakeTransport{}
	req := httptest.NewRequest("GET", "http://front.example/api/users/42?x=1", nil)
	req.RemoteAddr = "192.0.2.1:5555"
	serveLoop(b, h, req)
}

// BenchmarkServeHTTPAccessLog is BenchmarkServeHTTP with the access log
// on: through slog's JSONHandler (one write per line, as before the
// AccessLog), and through an AccessLog (tether agent's).
func BenchmarkServeHTTPAccessLog(b *testing.B) {
	for _, mode := range []string{"slog", "batched"} {
		b.Run(mode, func(b *testing.B) {
			al := accesslog.New(io.Discard)
			defer al.Close()
			h := newHarness(b, mustParse(b, benchConfig), func(o *Options) {
				if mode == "slog" {
					o.AccessLog = slog.New(slog.NewJSONHandler(io.Discard, nil))
				} else {
					o.AccessLog = al.Logger()
				}
			})
			h.p.rt.Load().clusters["c"].rp.Transport = fakeTransport{}
			req := httptest.NewRequest("GET", "http://front.example/api/users/42?x=1", nil)
			req.RemoteAddr = "192.0.2.1:5555"
			serveLoop(b, h, req)
		})
	}
}

const affinityBenchConfig = `{
  "ReverseProxy": {
    "Routes": { "r": { "ClusterId": "c", "Match": { "Path": "{**catch-all}" } } },
    "Clusters": { "c": {
      "LoadBalancingPolicy": "RoundRobin",
      "SessionAffinity": { "Enabled": true, "Policy": "HashCookie", "AffinityKeyName": "aff" },
      "Destinations": {
        "d1": { "Address": "http://10.1.2.3:8080/" },
        "d2": { "Address": "http://10.1.2.4:8080/" },
        "d3": { "Address": "http://10.1.2.5:8080/" } } } }
  }
}`

// affinityPath runs what the data path does for affinity on a request
// with a valid HashCookie key: resolve, pick, the outgoing request's
// rewrite and the response's (no cookie again: the key was valid).
func affinityPath(tb testing.TB) func() {
	h := newHarness(tb, mustParse(tb, affinityBenchConfig), func(o *Options) { o.AccessLog = nil })
	rt := h.p.rt.Load()
	in := httptest.NewRequest("GET", "http://front.example/x", nil)
	in.RemoteAddr = "192.0.2.1:5555"
	rr := rt.match(in)
	cl := rr.cluster
	st := &reqState{route: rr, cluster: cl, client: forwarded.Client{Host: "192.0.2.1"}}
	// The key of d2, as its first response set it.
	first := rr.aff.ResolveClient(in, "192.0.2.1", cl.up, time.Now(), nil)
	resp := &http.Response{Header: http.Header{}, Request: in}
	rr.aff.Affinitize(resp, cl.up.Destinations[1], first, false)
	ck := resp.Header.Get("Set-Cookie")
	if ck == "" {
		tb.Fatal("no affinity cookie on a new session's response")
	}
	in.Header.Set("Cookie", strings.SplitN(ck, ";", 2)[0])
	out := in.Clone(in.Context())
	resp = &http.Response{Header: http.Header{}, Request: out}
	now := time.Now()
	return func() {
		st.dec = rr.aff.ResolveClient(in, st.client.Address(in), cl.up, now, st.buf[:0])
		if st.dec.Outcome != affinity.Routed || len(st.dec.Candidates) != 1 {
			tb.Fatalf("decision %v with %d candidates, want routed to one", st.dec.Outcome, len(st.dec.Candidates))
		}
		st.dest = st.dec.Candidates[0]
		rr.aff.RewriteRequest(in, out, st.dest, st.dec)
		rr.aff.Affinitize(resp, st.dest, st.dec, false)
	}
}

// BenchmarkAffinityPath: the affinity path of a request with a valid
// HashCookie key allocates nothing (TestAffinityPathAllocatesNothing
// holds it to that).
func BenchmarkAffinityPath(b *testing.B) {
	run := affinityPath(b)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		run()
	}
}

func TestAffinityPathAllocatesNothing(t *testing.T) {
	run := affinityPath(t)
	if n := testing.AllocsPerRun(200, run); n != 0 {
		t.Fatalf("the affinity path allocates %.1f times per request, want 0", n)
	}
}

// BenchmarkServeHTTPLoopback is the handler (HashCookie session, access
// log batched to io.Discard) over its real backend path to a loopback
// backend: the direct and lean path, or with lean=false ReverseProxy over
// http.Transport (the path before them). Allocations
// are the data path's own and the backend round trip's, not the server's.
func BenchmarkServeHTTPLoopback(b *testing.B) {
	be := newBackend(b, func(w http.ResponseWriter, r *http.Request) { w.Write(make([]byte, 1024)) })
	for _, lean := range []bool{true, false} {
		b.Run(fmt.Sprintf("lean=%v", lean), func(b *testing.B) {
			al := accesslog.New(io.Discard)
			defer al.Close()
			cfg := regexp.MustCompile(`"http://10\.1\.2\.\d:8080/"`).ReplaceAllString(affinityBenchConfig, strconv.Quote(be.URL+"/"))
			hooks := &testHooks{}
			h := newHarness(b, mustParse(b, cfg), func(o *Options) { o.AccessLog = al.Logger(); o.hooks = hooks })
			cl := h.p.rt.Load().clusters["c"]
			if !lean {
				// The path before the lean one: ReverseProxy over http.Transport.
				cl.rp.Transport.(*retryTransport).base = cl.transport
				hooks.noDirect = true
			}
			req := httptest.NewRequest("GET", "http://front.example/x", nil)
			req.RemoteAddr = "192.0.2.1:5555"
			w := &discardWriter{h: http.Header{}}
			h.p.ServeHTTP(w, req) // a new session: its key
			ck := w.h.Get("Set-Cookie")
			if ck == "" {
				b.Fatal("no affinity cookie")
			}
			req.Header.Set("Cookie", strings.SplitN(ck, ";", 2)[0])
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				clear(w.h)
				h.p.ServeHTTP(w, req)
			}
		})
	}
}
