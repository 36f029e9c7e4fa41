package frontdoor

import (
	"crypto/tls"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/tether-proxy/tether/proxy/config"
)

// fakeAcme is an AcmeSource of function fields.
type fakeAcme struct {
	cert func(name string) *tls.Certificate
	http func(token string) (string, bool)
	alpn func(name string) (*tls.Certificate, bool)
}

func (f fakeAcme) AcmeCertificate(name string) *tls.Certificate           { return f.cert(name) }
func (f fakeAcme) AcmeHTTPChallenge(token string) (string, bool)          { return f.http(token) }
func (f fakeAcme) AcmeTLSALPNChallenge(n string) (*tls.Certificate, bool) { return f.alpn(n) }

var _ AcmeSource = fakeAcme{}

func TestAcmeListenerServesTheReplicatedCertificateAndAnswersChallenges(t *testing.T) {
	served, err := selfSigned()
	if err != nil {
		t.Fatal(err)
	}
	challengeCert, err := selfSigned()
	if err != nil {
		t.Fatal(err)
	}
	acme := &config.Acme{Directory: "https://ca.test/dir", Domains: []string{"b.example.com", "a.example.com"}}
	cfg := &config.Config{Listeners: []config.Listener{
		{Address: "127.0.0.1:0", Acme: acme},
		{Address: "127.0.0.1:0"},
	}}

	t.Run("without an ACME source the listener is refused, naming it", func(t *testing.T) {
		s, err := New(cfg, http.HandlerFunc(okHandler), nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Start(); err == nil || !strings.Contains(err.Error(), "Listeners[0].Acme") {
			t.Fatalf("Start: %v, want a refusal naming Listeners[0].Acme", err)
		}
	})

	var have atomic.Bool
	s, err := New(cfg, http.HandlerFunc(okHandler), nil)
	if err != nil {
		t.Fatal(err)
	}
	s.UseAcme(fakeAcme{
		cert: func(name string) *tls.Certificate {
			if name != "https://ca.test/dir a.example.com,b.example.com" || !have.Load() {
				return nil
			}
			return served
		},
		http: func(token string) (string, bool) { return token + ".thumb", token == "tok" },
		alpn: func(n string) (*tls.Certificate, bool) { return challengeCert, n == "a.example.com" },
	})
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Shutdown(t.Context()) })
	tlsAddr, plainAddr := s.Addrs()[0].String(), s.Addrs()[1].String()

	dial := func(protos []string, name string) (*tls.Conn, error) {
		return tls.Dial("tcp", tlsAddr, &tls.Config{InsecureSkipVerify: true, NextProtos: protos, ServerName: name}) //nolint:gosec // the test compares certificates itself
	}
	if _, err := dial(nil, "a.example.com"); err == nil {
		t.Fatal("a handshake succeeded before any certificate was obtained")
	}
	have.Store(true)
	for _, tc := range []struct {
		desc   string
		protos []string
		name   string
		want   *tls.Certificate
		proto  string
	}{
		{"a client gets the obtained certificate", []string{"h2", "http/1.1"}, "a.example.com", served, "h2"},
		{"a TLS-ALPN-01 validation gets the challenge certificate", []string{"acme-tls/1"}, "a.example.com", challengeCert, "acme-tls/1"},
		{"a TLS-ALPN-01 validation for a name without a challenge fails", []string{"acme-tls/1"}, "c.example.com", nil, ""},
	} {
		c, err := dial(tc.protos, tc.name)
		if tc.want == nil {
			if err == nil {
				c.Close()
				t.Errorf("%s: handshake succeeded", tc.desc)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", tc.desc, err)
			continue
		}
		st := c.ConnectionState()
		c.Close()
		if !st.PeerCertificates[0].Equal(tc.want.Leaf) || st.NegotiatedProtocol != tc.proto {
			t.Errorf("%s: got another certificate or protocol %q", tc.desc, st.NegotiatedProtocol)
		}
	}

	for _, tc := range []struct {
		desc, path, want string
	}{
		{"HTTP-01 is answered on the cleartext listener", "/.well-known/acme-challenge/tok", "tok.thumb"},
		{"an unknown token goes to the application", "/.well-known/acme-challenge/other", "ok"},
		{"other paths go to the application", "/x", "ok"},
	} {
		resp, err := http.Get("http://" + plainAddr + tc.path)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(b) != tc.want {
			t.Errorf("%s: %q, want %q", tc.desc, b, tc.want)
		}
	}
}
