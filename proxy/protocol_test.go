package proxy

import (
	"crypto/tls"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
)

// TestBackendHTTPVersion: HttpRequest.Version and VersionPolicy choose the
// protocol to the destination as .NET's HttpClient does.
func TestBackendHTTPVersion(t *testing.T) {
	proto := func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, r.Proto) }
	// A cleartext backend that speaks HTTP/1.1 and h2c with prior knowledge.
	h2c := httptest.NewUnstartedServer(http.HandlerFunc(proto))
	h2c.Config.Protocols = new(http.Protocols)
	h2c.Config.Protocols.SetHTTP1(true)
	h2c.Config.Protocols.SetUnencryptedHTTP2(true)
	h2c.Start()
	t.Cleanup(h2c.Close)
	// A TLS backend that offers h2 by ALPN, and one that speaks HTTP/1.1 only.
	h2 := httptest.NewUnstartedServer(http.HandlerFunc(proto))
	h2.EnableHTTP2 = true
	h2.StartTLS()
	t.Cleanup(h2.Close)
	h1tls := httptest.NewUnstartedServer(http.HandlerFunc(proto))
	h1tls.StartTLS()
	t.Cleanup(h1tls.Close)
	// A TLS 1.3-only backend.
	tls13 := httptest.NewUnstartedServer(http.HandlerFunc(proto))
	tls13.TLS = &tls.Config{MinVersion: tls.VersionTLS13}
	tls13.StartTLS()
	t.Cleanup(tls13.Close)

	cases := []struct {
		desc, backend, cluster string
		status                 int
		want                   string
	}{
		{"default to a cleartext backend: HTTP/1.1", h2c.URL, ``, 200, "HTTP/1.1"},
		{"Version 2 alone (OrLower) to a cleartext backend: HTTP/1.1", h2c.URL, `"HttpRequest": {"Version": "2"}`, 200, "HTTP/1.1"},
		{"Version 2, RequestVersionExact: h2c", h2c.URL, `"HttpRequest": {"Version": "2", "VersionPolicy": "RequestVersionExact"}`, 200, "HTTP/2.0"},
		{"Version 2, RequestVersionOrHigher: h2c", h2c.URL, `"HttpRequest": {"Version": "2.0", "VersionPolicy": "requestversionorhigher"}`, 200, "HTTP/2.0"},
		{"default over TLS: h2 by ALPN", h2.URL, `"HttpClient": {"DangerousAcceptAnyServerCertificate": true}`, 200, "HTTP/2.0"},
		{"Version 1.1 over TLS: HTTP/1.1 though h2 is offered", h2.URL, `"HttpClient": {"DangerousAcceptAnyServerCertificate": true}, "HttpRequest": {"Version": "1.1"}`, 200, "HTTP/1.1"},
		{"Version 2 exact to an HTTP/1.1-only TLS backend: 502", h1tls.URL, `"HttpClient": {"DangerousAcceptAnyServerCertificate": true}, "HttpRequest": {"Version": "2", "VersionPolicy": "RequestVersionExact"}`, 502, ""},
		{"Version 2 or lower to an HTTP/1.1-only TLS backend: HTTP/1.1", h1tls.URL, `"HttpClient": {"DangerousAcceptAnyServerCertificate": true}, "HttpRequest": {"Version": "2"}`, 200, "HTTP/1.1"},
		{"SslProtocols Tls12 to a TLS 1.3-only backend: 502", tls13.URL, `"HttpClient": {"DangerousAcceptAnyServerCertificate": true, "SslProtocols": ["Tls12"]}`, 502, ""},
		{"SslProtocols Tls13 to a TLS 1.3-only backend", tls13.URL, `"HttpClient": {"DangerousAcceptAnyServerCertificate": true, "SslProtocols": "Tls13"}`, 200, "HTTP/1.1"},
	}
	for _, c := range cases {
		t.Run(c.desc, func(t *testing.T) {
			h := newHarness(t, mustParse(t, simpleConfig(map[string]string{"d1": c.backend}, c.cluster, "", "")), nil)
			resp, body := get(t, nil, h.front.URL+"/", nil)
			if resp.StatusCode != c.status || (c.want != "" && body != c.want) {
				t.Fatalf("%d %q, want %d %q", resp.StatusCode, body, c.status, c.want)
			}
		})
	}
}
