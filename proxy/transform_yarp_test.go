package proxy

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"io"
	"math/big"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tether-proxy/tether/proxy/config"
	"github.com/tether-proxy/tether/proxy/frontdoor"
)

// TestYARPTransformsThroughTheDataPath drives the route-value, query,
// method and trailer transforms through ReverseProxy and a real backend.
func TestYARPTransformsThroughTheDataPath(t *testing.T) {
	b := newBackend(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Trailer", "Grpc-Status, X-Internal")
		w.Header().Set("X-Internal-Header", "secret")
		w.Header().Set("Content-Type", "text/plain")
		_, _ = io.WriteString(w, "ok")
		w.Header().Set("Grpc-Status", "0")
		w.Header().Set("X-Internal", "secret")
	})
	js := `{"ReverseProxy": {
	  "Routes": { "r": { "ClusterId": "c", "Match": { "Path": "/api/{plugin}/stuff/{**remainder}" },
	    "Transforms": [
	      {"PathPattern": "/my/{plugin}/api/{**remainder}"},
	      {"QueryRouteParameter": "p", "Append": "plugin"},
	      {"QueryRemoveParameter": "secret"},
	      {"HttpMethodChange": "PUT", "Set": "POST"},
	      {"RequestHeaderRouteValue": "X-Plugin", "Set": "plugin"},
	      {"ResponseHeadersAllowed": "Content-Type"},
	      {"ResponseTrailersAllowed": "grpc-status"},
	      {"ResponseTrailer": "X-Added", "Set": "yes"}
	    ] } },
	  "Clusters": { "c": { "Destinations": { "d1": { "Address": "` + b.URL + `/base/" } } } } } }`
	h := newHarness(t, mustParse(t, js), nil)
	req, _ := http.NewRequest(http.MethodPut, h.front.URL+"/api/v1/stuff/more/stuff?secret=1&q=2", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	got := b.lastRequest()
	if got.Method != "POST" || got.URL.Path != "/base/my/v1/api/more/stuff" || got.URL.RawQuery != "q=2&p=v1" ||
		got.Header.Get("X-Plugin") != "v1" {
		t.Errorf("backend saw %s %s?%s X-Plugin %q", got.Method, got.URL.Path, got.URL.RawQuery, got.Header.Get("X-Plugin"))
	}
	if string(body) != "ok" || resp.Header.Get("X-Internal-Header") != "" || resp.Header.Get("Content-Type") != "text/plain" {
		t.Errorf("response %q headers %v", body, resp.Header)
	}
	if resp.Header.Get("X-Tether-Trace-Id") == "" {
		t.Error("tether's own trace header must survive ResponseHeadersAllowed")
	}
	if resp.Trailer.Get("Grpc-Status") != "0" || resp.Trailer.Get("X-Internal") != "" || resp.Trailer.Get("X-Added") != "yes" {
		t.Errorf("trailers %v", resp.Trailer)
	}
}

// TestPathPatternKeepsEncodedSlashOnTheWire: a client's %2F in a route
// value reaches the backend still encoded, joined under the destination's
// base path.
func TestPathPatternKeepsEncodedSlashOnTheWire(t *testing.T) {
	b := newBackend(t, nil)
	js := `{"ReverseProxy": {
	  "Routes": { "r": { "ClusterId": "c", "Match": { "Path": "/api/{id}" },
	    "Transforms": [ {"PathPattern": "/items/{id}/detail"} ] } },
	  "Clusters": { "c": { "Destinations": { "d1": { "Address": "` + b.URL + `/base" } } } } } }`
	h := newHarness(t, mustParse(t, js), nil)
	resp, _ := get(t, nil, h.front.URL+"/api/a%2Fb%20c", nil)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	if got := b.lastRequest().RequestURI; got != "/base/items/a%2Fb%20c/detail" {
		t.Errorf("backend request URI %q", got)
	}
}

// TestResponseTransformsOnTetherErrors: as in YARP, response header
// transforms whose When matches also apply to the errors tether answers
// itself (here a 502 from an unreachable backend).
func TestResponseTransformsOnTetherErrors(t *testing.T) {
	dead := newBackend(t, nil)
	deadURL := dead.URL
	dead.Close()
	cases := []struct {
		desc, when string
		want       string
	}{
		{"When Always applies to a 502", "Always", "v"},
		{"When Failure applies to a 502", "Failure", "v"},
		{"the default When (Success) does not", "Success", ""},
	}
	for _, c := range cases {
		t.Run(c.desc, func(t *testing.T) {
			route := `"Transforms": [{"ResponseHeader": "X-A", "Set": "v", "When": "` + c.when + `"}, {"ResponseHeaderRemove": "X-Never", "When": "Always"}]`
			h := newHarness(t, mustParse(t, simpleConfig(map[string]string{"d1": deadURL}, "", route, "")), nil)
			resp, body := get(t, nil, h.front.URL+"/x", nil)
			if resp.StatusCode != http.StatusBadGateway || body != "bad gateway\n" {
				t.Fatalf("status %d body %q", resp.StatusCode, body)
			}
			if got := resp.Header.Get("X-A"); got != c.want {
				t.Errorf("X-A = %q, want %q", got, c.want)
			}
			if resp.Header.Get("X-Tether-Trace-Id") == "" {
				t.Error("the trace id must stay on the error")
			}
		})
	}
}

// TestResponseTransformsOnAffinityRefusal: a Return503Error refusal is one
// of tether's own errors too.
func TestResponseTransformsOnAffinityRefusal(t *testing.T) {
	b := newBackend(t, nil)
	cluster := `"SessionAffinity": {"Enabled": true, "AffinityKeyName": ".T", "FailurePolicy": "Return503Error"}`
	route := `"Transforms": [{"ResponseHeader": "Cache-Control", "Set": "no-store", "When": "Failure"}]`
	h := newHarness(t, mustParse(t, simpleConfig(map[string]string{"d1": b.URL}, cluster, route, "")), nil)
	resp, _ := get(t, nil, h.front.URL+"/", http.Header{"Cookie": {".T=garbage"}})
	if resp.StatusCode != 503 || resp.Header.Get("Cache-Control") != "no-store" {
		t.Errorf("status %d Cache-Control %q", resp.StatusCode, resp.Header.Get("Cache-Control"))
	}
}

// TestTrailerTransformsOverHTTP2: gRPC-style trailers from an HTTP/2
// backend that also sends Content-Length reach an HTTP/1 client, through
// the trailer transforms (the HTTP/2 transport fills the trailer map
// tether declared).
func TestTrailerTransformsOverHTTP2(t *testing.T) {
	b := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ProtoMajor != 2 {
			http.Error(w, "want HTTP/2", http.StatusHTTPVersionNotSupported)
			return
		}
		w.Header().Set("Trailer", "Grpc-Status, Grpc-Message, X-Debug")
		_, _ = io.WriteString(w, "ok")
		w.Header().Set("Grpc-Status", "0")
		w.Header().Set("Grpc-Message", "fine")
		w.Header().Set("X-Debug", "internal")
		w.Header().Set(http.TrailerPrefix+"X-Undeclared", "late")
	}))
	b.EnableHTTP2 = true
	b.StartTLS()
	t.Cleanup(b.Close)
	js := `{"ReverseProxy": {
	  "Routes": { "r": { "ClusterId": "c", "Match": { "Path": "{**all}" },
	    "Transforms": [ {"ResponseTrailerRemove": "X-Debug"}, {"ResponseTrailer": "Grpc-Message", "Append": "via tether"} ] } },
	  "Clusters": { "c": { "HttpClient": { "DangerousAcceptAnyServerCertificate": true },
	    "Destinations": { "d1": { "Address": "` + b.URL + `" } } } } } }`
	h := newHarness(t, mustParse(t, js), nil)
	resp, body := get(t, nil, h.front.URL+"/x", nil)
	if resp.StatusCode != 200 || body != "ok" {
		t.Fatalf("status %d body %q", resp.StatusCode, body)
	}
	tr := resp.Trailer
	if tr.Get("Grpc-Status") != "0" || len(tr["Grpc-Message"]) != 2 || tr["Grpc-Message"][1] != "via tether" ||
		tr.Get("X-Debug") != "" || tr.Get("X-Undeclared") != "late" {
		t.Errorf("trailers %v", tr)
	}
}

// TestClientCertThroughTheDataPath: a certificate the client presented on a
// listener that asks for one reaches the backend base64-encoded; a forged
// header from a client without one never does.
func TestClientCertThroughTheDataPath(t *testing.T) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(7), Subject: pkix.Name{CommonName: "client"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	b := newBackend(t, nil)
	route := `"Transforms": [{"ClientCert": "X-Client-Cert"}]`
	h := newHarness(t, mustParse(t, simpleConfig(map[string]string{"d1": b.URL}, "", route, "")), nil)
	front := httptest.NewUnstartedServer(h.p)
	front.TLS = &tls.Config{ClientAuth: tls.RequestClientCert}
	front.StartTLS()
	t.Cleanup(front.Close)
	for _, c := range []struct {
		desc  string
		certs []tls.Certificate
		want  string
	}{
		{"the client's certificate is forwarded", []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}, base64.StdEncoding.EncodeToString(der)},
		{"without one a forged header is removed", nil, ""},
	} {
		t.Run(c.desc, func(t *testing.T) {
			cl := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{
				InsecureSkipVerify: true, Certificates: c.certs}}} //nolint:gosec // test server
			t.Cleanup(cl.CloseIdleConnections)
			get(t, cl, front.URL+"/", http.Header{"X-Client-Cert": {"forged"}})
			if got := b.lastRequest().Header.Get("X-Client-Cert"); got != c.want {
				t.Errorf("X-Client-Cert = %.20q..., want %.20q...", got, c.want)
			}
		})
	}
}

// TestClientCertReachesTheBackendInEveryTLSMode: on a real HTTPS listener
// with ClientCertificateMode AllowCertificate, the client's certificate is
// forwarded by the ClientCert transform whoever serves the connection: the
// own loop over TLS (a GET), net/http after the loop handed it over (a
// POST), net/http's HTTP/1.1 server with the loop off, and HTTP/2.
func TestClientCertReachesTheBackendInEveryTLSMode(t *testing.T) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(8), Subject: pkix.Name{CommonName: "client"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	want := base64.StdEncoding.EncodeToString(der)
	for _, c := range []struct {
		desc   string
		http1  frontdoor.HTTP1Server
		h2     bool
		method string
	}{
		{"the own loop over TLS", frontdoor.HTTP1Own, false, http.MethodGet},
		{"handed to net/http by the own loop", frontdoor.HTTP1Own, false, http.MethodPost},
		{"net/http's HTTP/1.1 server", frontdoor.HTTP1Stdlib, false, http.MethodGet},
		{"HTTP/2", frontdoor.HTTP1Own, true, http.MethodGet},
	} {
		t.Run(c.desc, func(t *testing.T) {
			b := newBackend(t, nil)
			cfg := mustParse(t, simpleConfig(map[string]string{"d1": b.URL}, "", `"Transforms": [{"ClientCert": "X-Client-Cert"}]`, ""))
			l := config.Listener{Address: "127.0.0.1:0"}
			l.SelfSigned = true
			l.ClientCertificateMode = "AllowCertificate"
			cfg.Listeners = []config.Listener{l}
			p := newTestProxy(t, cfg, prometheus.NewRegistry(), io.Discard, nil)
			s, err := newFrontDoor(cfg, p, frontdoor.WithHTTP1Server(c.http1))
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				defer cancel()
				_ = s.Shutdown(ctx)
			})
			tr := &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true, //nolint:gosec // the listener's self-signed certificate
				Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}}, Protocols: new(http.Protocols)}
			if c.h2 {
				tr.Protocols.SetHTTP2(true)
			} else {
				tr.Protocols.SetHTTP1(true)
			}
			cl := &http.Client{Transport: tr, Timeout: 10 * time.Second}
			t.Cleanup(cl.CloseIdleConnections)
			req, _ := http.NewRequest(c.method, "https://"+s.Addrs()[0].String()+"/", strings.NewReader("x"))
			req.Header.Set("X-Client-Cert", "forged")
			resp, err := cl.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if got := b.lastRequest().Header.Get("X-Client-Cert"); resp.StatusCode != 200 || got != want {
				t.Errorf("status %d, X-Client-Cert = %.20q..., want %.20q...", resp.StatusCode, got, want)
			}
		})
	}
}
