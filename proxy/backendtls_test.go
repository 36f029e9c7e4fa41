package proxy

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tether-proxy/tether/proxy/config"
)

// testCert is a self-signed certificate (its own CA) written as PEM files.
type testCert struct {
	certFile, keyFile string
	pair              tls.Certificate
	pool              *x509.CertPool
}

func newTestCert(t *testing.T, cn string, usage x509.ExtKeyUsage, dnsNames []string, ips []net.IP) testCert {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		DNSNames: dnsNames, IPAddresses: ips, IsCA: true, BasicConstraintsValid: true,
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage: []x509.ExtKeyUsage{usage},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, _ := x509.MarshalECPrivateKey(key)
	dir := t.TempDir()
	tc := testCert{certFile: filepath.Join(dir, cn+".pem"), keyFile: filepath.Join(dir, cn+"-key.pem")}
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})
	if err := os.WriteFile(tc.certFile, certPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(tc.keyFile, keyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	if tc.pair, err = tls.X509KeyPair(certPEM, keyPEM); err != nil {
		t.Fatal(err)
	}
	c, _ := x509.ParseCertificate(der)
	tc.pool = x509.NewCertPool()
	tc.pool.AddCert(c)
	return tc
}

// tlsBackend is an HTTPS backend that records the SNI and the client
// certificate of each request.
type tlsBackend struct {
	*httptest.Server
	mu       sync.Mutex
	sni      string
	clientCN string
}

func newTLSBackend(t *testing.T, serverCert testCert, clientCAs *x509.CertPool) *tlsBackend {
	b := &tlsBackend{}
	b.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b.mu.Lock()
		b.sni = r.TLS.ServerName
		b.clientCN = ""
		if len(r.TLS.PeerCertificates) > 0 {
			b.clientCN = r.TLS.PeerCertificates[0].Subject.CommonName
		}
		b.mu.Unlock()
		_, _ = io.WriteString(w, "ok")
	}))
	b.TLS = &tls.Config{Certificates: []tls.Certificate{serverCert.pair}}
	if clientCAs != nil {
		b.TLS.ClientCAs, b.TLS.ClientAuth = clientCAs, tls.RequireAndVerifyClientCert
	}
	b.Config.ErrorLog = nil
	b.StartTLS()
	t.Cleanup(b.Close)
	return b
}

// TestBackendTLSTrust: a cluster's CertificateAuthority replaces the
// system's roots, its ClientCertificate is presented to backends that ask,
// and SNI (and the name checked) follow the destination's Host.
func TestBackendTLSTrust(t *testing.T) {
	server := newTestCert(t, "backend", x509.ExtKeyUsageServerAuth, []string{"api.internal"}, []net.IP{net.ParseIP("127.0.0.1")})
	client := newTestCert(t, "tether-client", x509.ExtKeyUsageClientAuth, nil, nil)
	plain := newTLSBackend(t, server, nil)
	mtls := newTLSBackend(t, server, client.pool)
	ca := fmt.Sprintf(`"CertificateAuthority": {"Path": %q}`, server.certFile)
	cc := fmt.Sprintf(`"ClientCertificate": {"Path": %q, "KeyPath": %q}`, client.certFile, client.keyFile)
	cases := []struct {
		desc       string
		backend    *tlsBackend
		httpClient string
		host       string
		want       int
		wantSNI    string
		wantCN     string
	}{
		{desc: "without the CA the backend's certificate is refused", backend: plain, want: 502},
		{desc: "with the CA bundle it is trusted", backend: plain, httpClient: ca, want: 200, wantSNI: ""},
		{desc: "SNI follows the destination's Host", backend: plain, httpClient: ca, host: "api.internal:8443", want: 200, wantSNI: "api.internal"},
		{desc: "the certificate is checked against the Host's name", backend: plain, httpClient: ca, host: "other.internal", want: 502},
		{desc: "a backend asking for a client certificate without one configured refuses", backend: mtls, httpClient: ca, want: 502},
		{desc: "the client certificate is presented", backend: mtls, httpClient: ca + ", " + cc, want: 200, wantCN: "tether-client"},
	}
	for _, c := range cases {
		t.Run(c.desc, func(t *testing.T) {
			dest := fmt.Sprintf(`"d1": {"Address": %q, "Host": %q}`, c.backend.URL, c.host)
			js := strings.Replace(simpleConfig(map[string]string{"d1": c.backend.URL}, `"HttpClient": {`+c.httpClient+`}`, "", ""),
				fmt.Sprintf(`"d1": {"Address": %q}`, c.backend.URL), dest, 1)
			h := newHarness(t, mustParse(t, js), nil)
			resp, _ := get(t, nil, h.front.URL+"/", nil)
			if resp.StatusCode != c.want {
				t.Fatalf("status %d, want %d", resp.StatusCode, c.want)
			}
			if c.want != 200 {
				return
			}
			c.backend.mu.Lock()
			defer c.backend.mu.Unlock()
			if c.backend.sni != c.wantSNI || c.backend.clientCN != c.wantCN {
				t.Errorf("backend saw SNI %q, client CN %q; want %q, %q", c.backend.sni, c.backend.clientCN, c.wantSNI, c.wantCN)
			}
		})
	}
}

// TestBackendTLSHTTP2: the TLS dialer keeps ALPN, so HTTPS backends that
// speak HTTP/2 still get it.
func TestBackendTLSHTTP2(t *testing.T) {
	server := newTestCert(t, "backend", x509.ExtKeyUsageServerAuth, nil, []net.IP{net.ParseIP("127.0.0.1")})
	var proto string
	var mu sync.Mutex
	b := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		proto = r.Proto
		mu.Unlock()
	}))
	b.TLS = &tls.Config{Certificates: []tls.Certificate{server.pair}}
	b.EnableHTTP2 = true
	b.StartTLS()
	t.Cleanup(b.Close)
	h := newHarness(t, mustParse(t, simpleConfig(map[string]string{"d1": b.URL},
		fmt.Sprintf(`"HttpClient": {"CertificateAuthority": {"Path": %q}}`, server.certFile), "", "")), nil)
	if resp, _ := get(t, nil, h.front.URL+"/", nil); resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	mu.Lock()
	defer mu.Unlock()
	if proto != "HTTP/2.0" {
		t.Fatalf("backend saw %s, want HTTP/2.0", proto)
	}
}

func TestBackendTLSConfigErrors(t *testing.T) {
	junk := filepath.Join(t.TempDir(), "junk.pem")
	if err := os.WriteFile(junk, []byte("not pem"), 0o600); err != nil {
		t.Fatal(err)
	}
	const cl = "ReverseProxy.Clusters.c"
	cases := []struct {
		desc, cluster, dests, path, msg string
	}{
		{"a certificate needs its key", `"HttpClient": {"ClientCertificate": {"Path": "` + junk + `"}}`, "",
			cl + ".HttpClient.ClientCertificate.KeyPath", "required"},
		{"a missing CA file", `"HttpClient": {"CertificateAuthority": {"Path": "/nonexistent/ca.pem"}}`, "",
			cl + ".HttpClient.CertificateAuthority.Path", "does not exist"},
		{"a CA file without certificates", `"HttpClient": {"CertificateAuthority": {"Path": "` + junk + `"}}`, "",
			cl + ".HttpClient.CertificateAuthority.Path", "no PEM certificate"},
		{"a certificate that does not parse", `"HttpClient": {"ClientCertificate": {"Path": "` + junk + `", "KeyPath": "` + junk + `"}}`, "",
			cl + ".HttpClient.ClientCertificate.Path", "not a PEM certificate"},
		{"two destinations on one address with different server names", "",
			`"d1": {"Address": "https://10.0.0.1/", "Host": "a.example"}, "d2": {"Address": "https://10.0.0.1:443/x", "Host": "b.example"}`,
			cl + ".Destinations.d2.Host", "pooled by address"},
	}
	for _, c := range cases {
		t.Run(c.desc, func(t *testing.T) {
			js := simpleConfig(map[string]string{"d0": "http://10.0.0.9/"}, c.cluster, "", "")
			if c.dests != "" {
				js = strings.Replace(js, `"d0": {"Address": "http://10.0.0.9/"}`, c.dests, 1)
			}
			_, _, err := config.Parse([]byte(js), "json")
			es, _ := err.(config.Errors)
			for _, e := range es {
				if e.Path == c.path && strings.Contains(e.Message, c.msg) {
					return
				}
			}
			t.Fatalf("errors %v, want %s: %s", es, c.path, c.msg)
		})
	}
}
