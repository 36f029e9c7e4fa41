package upstream

import (
	"crypto/tls"
	"errors"
	"net/http"
)

// Protocol is how a cluster's transport talks to its destinations: YARP's
// HttpRequest.Version and VersionPolicy and HttpClient.SslProtocols, as
// .NET's HttpClient reads them. It is comparable, so a reload that leaves
// it alone keeps the transport.
type Protocol struct {
	// HTTP1, HTTP2 (over TLS, by ALPN) and H2C (cleartext HTTP/2 with prior
	// knowledge, for http:// destinations) are the versions allowed.
	HTTP1, HTTP2, H2C bool
	// MinTLS and MaxTLS bound the TLS versions; 0 keeps the transport's.
	MinTLS, MaxTLS uint16
}

// ProtocolFor compiles canonical config values ("1.1" or "2.0"; the
// policy names RequestVersionOrLower, RequestVersionExact,
// RequestVersionOrHigher):
//
//   - 1.1, OrLower or Exact: HTTP/1.1 only;
//   - 1.1, OrHigher: HTTP/2 by ALPN over TLS, else HTTP/1.1;
//   - 2.0, OrLower (YARP's default): the same;
//   - 2.0, Exact or OrHigher: HTTP/2 only: h2 over TLS (a destination that
//     does not negotiate it fails the request), h2c for http://.
func ProtocolFor(version, policy string, minTLS, maxTLS uint16) Protocol {
	p := Protocol{MinTLS: minTLS, MaxTLS: maxTLS}
	switch {
	case version == "1.1" && policy != "RequestVersionOrHigher":
		p.HTTP1 = true
	case version == "2.0" && (policy == "RequestVersionExact" || policy == "RequestVersionOrHigher"):
		p.HTTP2, p.H2C = true, true
	default:
		p.HTTP1, p.HTTP2 = true, true
	}
	return p
}

// errNotH2 fails a TLS handshake in which a destination that must speak
// HTTP/2 did not choose it by ALPN.
var errNotH2 = errors.New("destination did not negotiate HTTP/2 (HttpRequest.Version 2 with an exact version policy)")

// Apply sets tr's protocols and TLS versions. It runs after the rest of
// the transport's TLS setup, whose tls.Config it changes in place (backend
// TLS dials clone it per connection).
func (p Protocol) Apply(tr *http.Transport) {
	if p == (Protocol{}) {
		return // a zero Protocol (a cluster built in code): leave Go's defaults
	}
	ps := new(http.Protocols)
	ps.SetHTTP1(p.HTTP1)
	ps.SetHTTP2(p.HTTP2)
	ps.SetUnencryptedHTTP2(p.H2C)
	tr.Protocols = ps
	if tr.TLSClientConfig == nil {
		tr.TLSClientConfig = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	tc := tr.TLSClientConfig
	if p.MinTLS != 0 {
		tc.MinVersion, tc.MaxVersion = p.MinTLS, p.MaxTLS
	}
	if p.HTTP2 && !p.HTTP1 {
		prev := tc.VerifyConnection
		tc.VerifyConnection = func(cs tls.ConnectionState) error {
			if prev != nil {
				if err := prev(cs); err != nil {
					return err
				}
			}
			if cs.NegotiatedProtocol != "h2" {
				return errNotH2
			}
			return nil
		}
	}
}
