package proxy

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"strings"
	"testing"
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
	st.clientHost = hostOf(in.RemoteAddr)
	st.trusted = rt.trust.trusts(st.clientHost)
	st.proto = clientProto(in, st.trusted)
	st.traceID = requestTrace(in, st.trusted)
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
		out.Header.Get("X-Forwarded-For") != "1.2.3.4, 10.9.9.9" {
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

// BenchmarkServeHTTP measures the whole data path per request (route
// match, affinity off, pick, ReverseProxy, rewrite, metrics) against an
// in-memory transport.
func BenchmarkServeHTTP(b *testing.B) {
	h := newHarness(b, mustParse(b, benchConfig), func(o *Options) { o.AccessLog = nil })
	h.p.rt.Load().clusters["c"].rp.Transport = fakeTransport{}
	req := httptest.NewRequest("GET", "http://front.example/api/users/42?x=1", nil)
	req.RemoteAddr = "192.0.2.1:5555"
	w := &discardWriter{h: http.Header{}}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		clear(w.h)
		h.p.ServeHTTP(w, req)
	}
}
