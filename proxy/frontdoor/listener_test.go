package frontdoor

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"software.sslmate.com/src/go-pkcs12"

	"github.com/tether-proxy/tether/proxy/config"
	"github.com/tether-proxy/tether/test/testutil"
)

// protoHandler answers with the protocol the request came in.
func protoHandler(w http.ResponseWriter, r *http.Request) {
	fmt.Fprintf(w, "%s %v", r.Proto, r.TLS != nil)
}

// writePFX writes a PKCS#12 file of a new certificate for 127.0.0.1 and
// returns its name and a pool trusting the certificate.
func writePFX(t *testing.T, password string) (string, *x509.CertPool) {
	t.Helper()
	cert, err := selfSigned()
	if err != nil {
		t.Fatal(err)
	}
	data, err := pkcs12.Modern.Encode(cert.PrivateKey, cert.Leaf, nil, password)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "site.pfx")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert.Leaf)
	return path, pool
}

func TestPFXListenerServesTLS(t *testing.T) {
	path, pool := writePFX(t, "secret")
	cfg := &config.Config{Listeners: []config.Listener{{Address: "127.0.0.1:0", Certificate: &config.Certificate{Path: path, Password: "secret"}}}}
	s := startServer(t, cfg, http.HandlerFunc(protoHandler))
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, ForceAttemptHTTP2: true}}
	defer client.CloseIdleConnections()
	status, _, body := testutil.Get(t, client, "https://"+s.Addrs()[0].String()+"/", nil)
	if status != 200 || body != "HTTP/2.0 true" {
		t.Fatalf("got %d %q", status, body)
	}

	bad := &config.Config{Listeners: []config.Listener{{Address: "127.0.0.1:0", ListenerOptions: config.ListenerOptions{Source: "Kestrel.Endpoints.Https"}, Certificate: &config.Certificate{Path: path, Password: "wrong"}}}}
	if _, err := New(bad, http.HandlerFunc(okHandler), nil); err == nil || !strings.Contains(err.Error(), "Kestrel.Endpoints.Https.Certificate: loading "+path+": wrong Password") {
		t.Fatalf("NewServer with a wrong password: %v", err)
	}
}

func TestSelfSignedListenerServesLocalhost(t *testing.T) {
	cfg := &config.Config{Listeners: []config.Listener{{Address: "127.0.0.1:0", ListenerOptions: config.ListenerOptions{SelfSigned: true}}}}
	s := startServer(t, cfg, http.HandlerFunc(protoHandler))
	conn, err := tls.Dial("tcp", s.Addrs()[0].String(), &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // the test inspects the certificate itself
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	leaf := conn.ConnectionState().PeerCertificates[0]
	if err := leaf.VerifyHostname("localhost"); err != nil {
		t.Fatalf("self-signed certificate: %v", err)
	}
}

func TestListenerProtocols(t *testing.T) {
	path, pool := writePFX(t, "")
	pfx := &config.Certificate{Path: path}
	listener := func(protocols string, cert *config.Certificate) config.Listener {
		l := config.Listener{Address: "127.0.0.1:0", Certificate: cert}
		l.Protocols = protocols
		return l
	}
	h2c := func() *http.Client {
		p := new(http.Protocols)
		p.SetUnencryptedHTTP2(true)
		return &http.Client{Transport: &http.Transport{Protocols: p}, Timeout: 5 * time.Second}
	}
	tlsClient := func() *http.Client {
		return &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, ForceAttemptHTTP2: true}, Timeout: 5 * time.Second}
	}
	h1 := func() *http.Client { return &http.Client{Timeout: 5 * time.Second} }
	cases := []struct {
		desc   string
		l      config.Listener
		scheme string
		client func() *http.Client
		want   string // body; "" means the request must fail
	}{
		{"TLS Http1AndHttp2 (default): h2 by ALPN", listener("", pfx), "https", tlsClient, "HTTP/2.0 true"},
		{"TLS Http1: HTTP/1.1 even when the client offers h2", listener(config.ProtocolsHttp1, pfx), "https", tlsClient, "HTTP/1.1 true"},
		{"TLS Http2: h2", listener(config.ProtocolsHttp2, pfx), "https", tlsClient, "HTTP/2.0 true"},
		{"cleartext Http2: h2c with prior knowledge", listener(config.ProtocolsHttp2, nil), "http", h2c, "HTTP/2.0 false"},
		{"cleartext Http2: no HTTP/1.1", listener(config.ProtocolsHttp2, nil), "http", h1, ""},
		{"cleartext Http1AndHttp2: HTTP/1.1", listener(config.ProtocolsHttp1AndHttp2, nil), "http", h1, "HTTP/1.1 false"},
		{"cleartext Http1AndHttp2: no h2c", listener(config.ProtocolsHttp1AndHttp2, nil), "http", h2c, ""},
	}
	for _, c := range cases {
		t.Run(c.desc, func(t *testing.T) {
			s := startServer(t, &config.Config{Listeners: []config.Listener{c.l}}, http.HandlerFunc(protoHandler))
			client := c.client()
			defer client.CloseIdleConnections()
			resp, err := client.Get(c.scheme + "://" + s.Addrs()[0].String() + "/")
			if c.want == "" {
				if err == nil {
					resp.Body.Close()
					if resp.StatusCode < 400 {
						t.Fatalf("request served: %d", resp.StatusCode)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			if string(body) != c.want {
				t.Fatalf("got %q, want %q", body, c.want)
			}
		})
	}
}

func TestListenerSslProtocols(t *testing.T) {
	path, pool := writePFX(t, "")
	l := config.Listener{Address: "127.0.0.1:0", Certificate: &config.Certificate{Path: path}}
	l.SslProtocols = config.TLSVersions{Min: tls.VersionTLS13, Max: tls.VersionTLS13, Set: true}
	s := startServer(t, &config.Config{Listeners: []config.Listener{l}}, http.HandlerFunc(okHandler))
	addr := s.Addrs()[0].String()
	if _, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: pool, MaxVersion: tls.VersionTLS12}); err == nil {
		t.Fatal("a TLS 1.2 client got in with SslProtocols Tls13")
	}
	conn, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: pool})
	if err != nil {
		t.Fatal(err)
	}
	conn.Close()
}

func TestMaxConcurrentConnections(t *testing.T) {
	cfg := &config.Config{
		Listeners: []config.Listener{{Address: "127.0.0.1:0"}, {Address: "127.0.0.1:0"}},
		Limits:    config.Limits{MaxConcurrentConnections: 1},
	}
	s := startServer(t, cfg, http.HandlerFunc(okHandler))
	request := func(conn net.Conn) error {
		_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := io.WriteString(conn, "GET / HTTP/1.1\r\nHost: h\r\n\r\n"); err != nil {
			return err
		}
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			return err
		}
		resp.Body.Close()
		return nil
	}
	first, err := net.Dial("tcp", s.Addrs()[0].String())
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	if err := request(first); err != nil {
		t.Fatalf("first connection: %v", err)
	}
	// The limit counts over all listeners: the second listener is full too.
	second, err := net.Dial("tcp", s.Addrs()[1].String())
	if err != nil {
		t.Fatal(err)
	}
	defer second.Close()
	if err := request(second); err == nil {
		t.Fatal("a second connection was served with MaxConcurrentConnections 1")
	}
	first.Close()
	// Once the first is closed, a new connection gets in.
	testutil.Eventually(t, 5*time.Second, "condition", func() bool {
		c, err := net.Dial("tcp", s.Addrs()[1].String())
		if err != nil {
			return false
		}
		defer c.Close()
		return request(c) == nil
	})
}

func TestSniPicksSettingsByServerName(t *testing.T) {
	listenerPFX, _ := writePFX(t, "")
	aPFX, _ := writePFX(t, "")
	bPFX, _ := writePFX(t, "")
	leafOf := func(path string) []byte {
		c, err := config.LoadCertificate(&config.Certificate{Path: path})
		if err != nil {
			t.Fatal(err)
		}
		return c.Leaf.Raw
	}
	l := config.Listener{Address: "127.0.0.1:0", Certificate: &config.Certificate{Path: listenerPFX}}
	l.Protocols = config.ProtocolsHttp1AndHttp2
	rule := func(pattern, protocols, cert string) config.SniRule {
		r := config.SniRule{Pattern: pattern}
		r.Protocols = protocols
		if cert != "" {
			r.Certificate = &config.Certificate{Path: cert}
		}
		return r
	}
	l.Sni = []config.SniRule{rule("*", config.ProtocolsHttp1AndHttp2, ""), rule("*.b.example", config.ProtocolsHttp1AndHttp2, bPFX), rule("a.example", config.ProtocolsHttp1, aPFX)}
	noCatchAll := l
	noCatchAll.Sni = l.Sni[1:]
	s := startServer(t, &config.Config{Listeners: []config.Listener{l, noCatchAll}}, http.HandlerFunc(okHandler))
	cases := []struct {
		desc, addr, name string
		leaf             []byte // nil: the handshake must fail
		alpn             string
	}{
		{"exact name: its own certificate and protocols", s.Addrs()[0].String(), "A.example", leafOf(aPFX), "http/1.1"},
		{"wildcard, several labels deep", s.Addrs()[0].String(), "x.y.b.example", leafOf(bPFX), "h2"},
		{"the wildcard does not match its apex: *", s.Addrs()[0].String(), "b.example", leafOf(listenerPFX), "h2"},
		{"no server name: *", s.Addrs()[0].String(), "", leafOf(listenerPFX), "h2"},
		{"no match and no *: refused", s.Addrs()[1].String(), "c.example", nil, ""},
	}
	for _, c := range cases {
		t.Run(c.desc, func(t *testing.T) {
			conn, err := tls.Dial("tcp", c.addr, &tls.Config{ServerName: c.name, InsecureSkipVerify: true, NextProtos: []string{"h2", "http/1.1"}}) //nolint:gosec // the test checks which certificate is served
			if c.leaf == nil {
				if err == nil {
					conn.Close()
					t.Fatal("handshake succeeded")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			st := conn.ConnectionState()
			if !bytes.Equal(st.PeerCertificates[0].Raw, c.leaf) || st.NegotiatedProtocol != c.alpn {
				t.Fatalf("wrong certificate or ALPN %q", st.NegotiatedProtocol)
			}
		})
	}
}

func TestSniCertificatesRotateOnReload(t *testing.T) {
	main, _ := writePFX(t, "")
	own, _ := writePFX(t, "")
	l := config.Listener{Address: "127.0.0.1:0", Certificate: &config.Certificate{Path: main}}
	r := config.SniRule{Pattern: "a.example", Certificate: &config.Certificate{Path: own}}
	l.Sni = []config.SniRule{r}
	cfg := &config.Config{Listeners: []config.Listener{l}}
	s := startServer(t, cfg, http.HandlerFunc(okHandler))
	served := func() []byte {
		conn, err := tls.Dial("tcp", s.Addrs()[0].String(), &tls.Config{ServerName: "a.example", InsecureSkipVerify: true}) //nolint:gosec // the test checks which certificate is served
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		return conn.ConnectionState().PeerCertificates[0].Raw
	}
	before := served()
	next, _ := writePFX(t, "")
	data, err := os.ReadFile(next)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(own, data, 0o600); err != nil { // rewritten in place, as cert-manager does
		t.Fatal(err)
	}
	apply, err := s.PrepareCertificates(cfg)
	if err != nil {
		t.Fatal(err)
	}
	apply()
	if bytes.Equal(served(), before) {
		t.Fatal("the Sni entry's certificate was not rotated")
	}
}

func TestLocalhostBindsBothLoopbacks(t *testing.T) {
	probe, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := probe.Addr().(*net.TCPAddr).Port
	probe.Close()
	want := []string{fmt.Sprintf("127.0.0.1:%d", port)}
	if v6, err := net.Listen("tcp", "[::1]:0"); err == nil {
		v6.Close()
		want = append(want, fmt.Sprintf("[::1]:%d", port))
	} // else: no IPv6 loopback here; Kestrel, too, serves on the one it has
	s := startServer(t, &config.Config{Listeners: []config.Listener{{Address: fmt.Sprintf("localhost:%d", port)}}}, http.HandlerFunc(okHandler))
	var got []string
	for _, a := range s.Addrs() {
		got = append(got, a.String())
	}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("bound %v, want %v", got, want)
	}
	for _, a := range got {
		resp, err := testutil.RawRequest(t, a, "GET / HTTP/1.1\r\nHost: localhost\r\n\r\n")
		if err != nil {
			t.Fatalf("%s: %v", a, err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("%s: status %d", a, resp.StatusCode)
		}
	}
}
