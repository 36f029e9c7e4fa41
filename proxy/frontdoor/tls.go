package frontdoor

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"math/big"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/tether-proxy/tether/proxy/config"
)

// An HTTPS listener's TLS settings from Kestrel's endpoint configuration:
// certificates (loaded, self-signed as the stand-in for ASP.NET's
// development certificate, swapped on reload), TLS versions, client
// certificates and SNI selection.

func loadCertificate(path string, c *config.Certificate) (*tls.Certificate, *config.FieldError) {
	if c == nil {
		return nil, nil
	}
	cert, err := config.LoadCertificate(c)
	if err != nil {
		return nil, &config.FieldError{Path: path + ".Certificate", Message: err.Error()}
	}
	return cert, nil
}

// PrepareCertificates loads the certificates cfg names for the HTTPS
// listeners this server already runs (same position and address) and
// returns apply, which swaps them in: new TLS handshakes use them, open
// connections keep theirs. Nothing is swapped when any certificate fails to
// load, so a reload can refuse a bad certificate and keep serving the old.
// Other listener changes need a restart.
func (s *Server) PrepareCertificates(cfg *config.Config) (apply func(), err error) {
	var errs config.Errors
	type swap struct {
		to   *atomic.Pointer[tls.Certificate]
		cert *tls.Certificate
	}
	var swaps []swap
	for i, l := range cfg.Listeners {
		if i >= len(s.ls) || s.ls[i].cert == nil || l.Address != s.ls[i].cfg.Address {
			continue
		}
		ln := s.ls[i]
		if l.Certificate != nil {
			cert, ferr := loadCertificate(listenerPath(i, l), l.Certificate)
			if ferr != nil {
				errs = append(errs, *ferr)
				continue
			}
			swaps = append(swaps, swap{ln.cert, cert})
		}
		// Sni entries' own certificates, while the entries are the same.
		if rules := ln.sni; len(rules) == len(l.Sni) {
			for j, r := range l.Sni {
				if r.Certificate == nil || !rules[j].own || rules[j].pattern != r.Pattern {
					continue
				}
				cert, ferr := loadCertificate(listenerPath(i, l)+".Sni."+r.Pattern, r.Certificate)
				if ferr != nil {
					errs = append(errs, *ferr)
					continue
				}
				swaps = append(swaps, swap{rules[j].cur, cert})
			}
		}
	}
	if len(errs) > 0 {
		return nil, errs
	}
	return func() {
		for _, sw := range swaps {
			sw.to.Store(sw.cert)
		}
	}, nil
}

// listenerTLS is the TLS configuration of an HTTPS listener whose current
// certificate is cur.
func listenerTLS(l config.Listener, cur *atomic.Pointer[tls.Certificate]) *tls.Config {
	_, next := httpProtocols(l, true)
	tc := &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			return cur.Load(), nil
		},
		NextProtos: next,
	}
	if v := l.SslProtocols; v.Set && v.Min != 0 {
		tc.MinVersion, tc.MaxVersion = v.Min, v.Max
	}
	if l.ClientCertificateMode == "AllowCertificate" {
		// Asked for, not verified: Kestrel's AllowCertificate hands it to
		// the application (here the ClientCert transform) as it is.
		tc.ClientAuth = tls.RequestClientCert
	}
	return tc
}

// selfSigned makes the certificate an https listener without one serves:
// for localhost, 127.0.0.1 and ::1, valid for a year, new at every start.
func selfSigned() (*tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: "localhost", Organization: []string{"tether self-signed"}},
		DNSNames:     []string{"localhost"},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(365 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, nil
}

// sniRule is a listener's Sni entry, ready for handshakes.
type sniRule struct {
	pattern string // host name, "*.suffix" or "*"
	// cur is the entry's own certificate, or the listener's.
	cur *atomic.Pointer[tls.Certificate]
	own bool // cur is the entry's own (PrepareCertificates swaps it)
	cfg *tls.Config
}

// sniRules builds l.Sni's rules; listenerCert is the listener's current
// certificate, used by entries without their own. http1/http2 say whether
// any rule or the listener itself may speak that protocol.
func sniRules(path string, l config.Listener, listenerCert *atomic.Pointer[tls.Certificate]) ([]*sniRule, *config.FieldError) {
	var rules []*sniRule
	for _, r := range l.Sni {
		sr := &sniRule{pattern: r.Pattern, cur: listenerCert}
		if r.Certificate != nil {
			cert, ferr := loadCertificate(path+".Sni."+r.Pattern, r.Certificate)
			if ferr != nil {
				return nil, ferr
			}
			sr.cur, sr.own = new(atomic.Pointer[tls.Certificate]), true
			sr.cur.Store(cert)
		}
		var rl config.Listener
		rl.KestrelEndpointDefaults = r.KestrelEndpointDefaults
		sr.cfg = listenerTLS(rl, sr.cur)
		rules = append(rules, sr)
	}
	return rules, nil
}

// withSni makes tc pick each handshake's settings by its server name, as
// Kestrel's SNI selection does: the exact name, else the longest matching
// "*.suffix", else "*"; no match refuses the handshake.
func withSni(tc *tls.Config, rules []*sniRule) {
	tc.GetConfigForClient = func(hello *tls.ClientHelloInfo) (*tls.Config, error) {
		if r := matchSni(rules, hello.ServerName); r != nil {
			return r.cfg, nil
		}
		return nil, errNoSniMatch
	}
}

var errNoSniMatch = errors.New("no Sni entry matches the server name")

func matchSni(rules []*sniRule, name string) *sniRule {
	name = strings.TrimSuffix(strings.ToLower(name), ".")
	var best, any *sniRule
	for _, r := range rules {
		switch {
		case r.pattern == "*":
			any = r
		case strings.HasPrefix(r.pattern, "*."):
			if strings.HasSuffix(name, r.pattern[1:]) && (best == nil || len(r.pattern) > len(best.pattern)) {
				best = r
			}
		case r.pattern == name && name != "":
			return r
		}
	}
	if best != nil {
		return best
	}
	return any
}

// sniProtocols widens p to what any Sni entry may speak over TLS.
func sniProtocols(p *http.Protocols, l config.Listener) {
	for _, r := range l.Sni {
		var rl config.Listener
		rl.KestrelEndpointDefaults = r.KestrelEndpointDefaults
		rp, _ := httpProtocols(rl, true)
		if rp.HTTP1() {
			p.SetHTTP1(true)
		}
		if rp.HTTP2() {
			p.SetHTTP2(true)
		}
	}
}
