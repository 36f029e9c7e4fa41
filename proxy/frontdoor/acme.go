package frontdoor

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/tether-proxy/tether/proxy/config"
)

// AcmeSource gives what the cluster obtained from ACME directories, as
// replicated to this node: the certificates listeners with an Acme block
// serve, and the answers to the challenges the CA sends to any node.
type AcmeSource interface {
	// AcmeCertificate is the current certificate for the Acme block named
	// name (config.Acme.Name), nil before the first one is obtained.
	AcmeCertificate(name string) *tls.Certificate
	// AcmeHTTPChallenge is the key authorization to answer at
	// /.well-known/acme-challenge/{token} (HTTP-01).
	AcmeHTTPChallenge(token string) (string, bool)
	// AcmeTLSALPNChallenge is the certificate that answers a TLS-ALPN-01
	// challenge for the DNS name serverName.
	AcmeTLSALPNChallenge(serverName string) (*tls.Certificate, bool)
}

// acmeALPN is the protocol a TLS-ALPN-01 validation offers (RFC 8737).
const acmeALPN = "acme-tls/1"

// acmeChallengePath is where HTTP-01 validations ask (RFC 8555 8.3).
const acmeChallengePath = "/.well-known/acme-challenge/"

// acmeHook holds the AcmeSource that UseAcme installs; listeners built
// before it read it at each handshake or request.
type acmeHook struct {
	src atomic.Pointer[AcmeSource]
}

func (h *acmeHook) source() AcmeSource {
	if p := h.src.Load(); p != nil {
		return *p
	}
	return nil
}

// UseAcme makes listeners with an Acme block serve src's certificates and
// every listener answer ACME challenges from src. Call it before Start;
// Start refuses Acme listeners without it.
func (s *Server) UseAcme(src AcmeSource) { s.acme.src.Store(&src) }

var errNoAcmeCertificate = errors.New("no certificate obtained from the ACME directory yet")

// acmeTLS is the TLS configuration of a listener whose certificate comes
// from ACME: the certificate named by l.Acme, or, for a handshake that
// offers only acme-tls/1, the TLS-ALPN-01 challenge certificate.
func (s *Server) acmeTLS(l config.Listener) *tls.Config {
	name := l.Acme.Name()
	tc := listenerTLS(l, new(atomic.Pointer[tls.Certificate])) // GetCertificate replaced below
	tc.GetCertificate = func(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
		src := s.acme.source()
		if src == nil {
			return nil, errNoAcmeCertificate
		}
		if c := src.AcmeCertificate(name); c != nil {
			return c, nil
		}
		return nil, errNoAcmeCertificate
	}
	challenge := &tls.Config{
		MinVersion: tls.VersionTLS12,
		NextProtos: []string{acmeALPN},
		GetCertificate: func(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
			if src := s.acme.source(); src != nil {
				if c, ok := src.AcmeTLSALPNChallenge(strings.ToLower(hello.ServerName)); ok {
					return c, nil
				}
			}
			return nil, fmt.Errorf("no ACME challenge pending for %q", hello.ServerName)
		},
	}
	tc.GetConfigForClient = func(hello *tls.ClientHelloInfo) (*tls.Config, error) {
		if slices.Equal(hello.SupportedProtos, []string{acmeALPN}) {
			return challenge, nil
		}
		return nil, nil // tc itself
	}
	return tc
}

// acmeChallenge answers r when it is one of our HTTP-01 validations (on a
// cleartext listener, a redirect listener too: the CA follows no redirect
// to a name without a certificate yet) and says whether it did; every
// other request goes on to the listener's handler. Its caller has checked
// that r's path starts with acmeChallengePath (headerLimit).
func (s *Server) acmeChallenge(w http.ResponseWriter, r *http.Request) bool {
	src := s.acme.source()
	if src == nil {
		return false
	}
	token := r.URL.Path[len(acmeChallengePath):]
	ka, ok := src.AcmeHTTPChallenge(token)
	if !ok || (r.Method != http.MethodGet && r.Method != http.MethodHead) {
		return false // not one of ours: the application may answer its own
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	_, _ = w.Write([]byte(ka))
	return true
}

// checkAcme refuses to start Acme listeners that nothing feeds.
func (s *Server) checkAcme() error {
	if s.acme.source() != nil {
		return nil
	}
	for _, l := range s.ls {
		if l.cfg.Acme != nil {
			return fmt.Errorf("%s.Acme: this node has no ACME certificate manager", l.path)
		}
	}
	return nil
}
