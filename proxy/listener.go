package proxy

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/tether-proxy/tether/proxy/config"
	"github.com/tether-proxy/tether/proxy/internal/sockio"
)

// Listener settings from Kestrel's endpoint configuration (config.Kestrel):
// protocols, TLS versions, client certificates, the self-signed stand-in
// for ASP.NET's development certificate, and MaxConcurrentConnections.

// httpProtocols is what a listener serves, as Kestrel's HttpProtocols: over
// TLS the client picks by ALPN; in cleartext Http2 means h2c with prior
// knowledge and Http1AndHttp2 means HTTP/1.1 (no h2c upgrades).
func httpProtocols(l config.Listener, tlsOn bool) (*http.Protocols, []string) {
	p := new(http.Protocols)
	switch l.Protocols {
	case config.ProtocolsHttp1:
		p.SetHTTP1(true)
		return p, []string{"http/1.1"}
	case config.ProtocolsHttp2:
		if tlsOn {
			p.SetHTTP2(true)
		} else {
			p.SetUnencryptedHTTP2(true)
		}
		return p, []string{"h2"}
	default:
		p.SetHTTP1(true)
		if tlsOn {
			p.SetHTTP2(true)
		}
		return p, []string{"h2", "http/1.1"}
	}
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

// connLimit counts open client connections over all listeners
// (Limits.MaxConcurrentConnections, Kestrel's server-wide limit).
type connLimit struct {
	max  int64
	open atomic.Int64
}

// limitListener closes, at once, connections accepted beyond the limit.
type limitListener struct {
	net.Listener
	lim *connLimit
}

func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if l.lim.open.Add(1) > l.lim.max {
			l.lim.open.Add(-1)
			_ = c.Close()
			continue
		}
		return &limitConn{Conn: c, lim: l.lim}, nil
	}
}

type limitConn struct {
	net.Conn
	lim  *connLimit
	once sync.Once
}

// NetConn is the connection underneath (the own HTTP/1.1 loop reaches
// its socket through it).
func (c *limitConn) NetConn() net.Conn { return c.Conn }

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.lim.open.Add(-1) })
	return err
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

// listenAll binds addr. "localhost:port" binds both loopbacks, as Kestrel
// does: one that cannot be bound for another reason than being in use
// (no IPv6 on the host) is skipped with a warning, as long as the other is
// bound. "localhost:0" is one socket: two dynamic ports would differ.
func listenAll(addr string, logger *slog.Logger) ([]net.Listener, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil || !strings.EqualFold(host, "localhost") || port == "0" {
		ln, err := sockio.ListenConfig.Listen(context.Background(), "tcp", addr)
		if err != nil {
			return nil, fmt.Errorf("listen on %s: %w", addr, err)
		}
		return []net.Listener{ln}, nil
	}
	var lns []net.Listener
	var skipped error
	for _, a := range []string{net.JoinHostPort("127.0.0.1", port), net.JoinHostPort("::1", port)} {
		ln, err := sockio.ListenConfig.Listen(context.Background(), "tcp", a)
		switch {
		case err == nil:
			lns = append(lns, ln)
		case errors.Is(err, syscall.EADDRINUSE):
			for _, l := range lns {
				_ = l.Close()
			}
			return nil, fmt.Errorf("listen on %s (%s): %w", addr, a, err)
		default:
			skipped = err
			logger.Warn("localhost: one loopback address cannot be bound; serving on the other", "addr", a, "err", err)
		}
	}
	if len(lns) == 0 {
		return nil, fmt.Errorf("listen on %s: %w", addr, skipped)
	}
	return lns, nil
}

// firstBytesListener bounds, on an HTTPS listener, the wait for a client's
// first request after the TLS handshake by the header timeout. net/http
// bounds the handshake, clears that deadline and, for HTTP/1.1, sets the
// header timeout itself; for HTTP/2 it hands the connection to its
// HTTP/2 server, which waits a fixed 10 s for the client's preface. A
// connection that shakes hands and sends nothing would be held that long.
type firstBytesListener struct {
	net.Listener
	wait time.Duration
}

func (l firstBytesListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &firstBytesConn{Conn: c, wait: l.wait}, nil
}

// firstBytesConn: the first clearing of the read deadline (the end of the
// handshake) sets it to now+wait instead. The bound ends when the server
// sets a deadline of its own (HTTP/1.1's header timeout) or reports the
// connection active (firstBytesSeen: HTTP/2's preface was read). It is not
// ended by the bytes read from the socket: the TLS layer may read the
// preface, and a whole request, along with the handshake.
type firstBytesConn struct {
	net.Conn
	wait  time.Duration
	mu    sync.Mutex
	state uint8 // fbHandshake, fbWaiting, fbDone
}

const (
	fbHandshake = iota
	fbWaiting
	fbDone
)

func (c *firstBytesConn) SetReadDeadline(t time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.state == fbHandshake && t.IsZero():
		c.state = fbWaiting
		return c.Conn.SetReadDeadline(time.Now().Add(c.wait))
	case c.state == fbWaiting:
		c.state = fbDone // the server's own deadline from here
	}
	return c.Conn.SetReadDeadline(t)
}

func (c *firstBytesConn) SetDeadline(t time.Time) error {
	if err := c.SetReadDeadline(t); err != nil {
		return err
	}
	return c.Conn.SetWriteDeadline(t)
}

// seen ends the bound: the server has read the start of a request.
func (c *firstBytesConn) seen() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.state == fbWaiting {
		c.state = fbDone
		_ = c.Conn.SetReadDeadline(time.Time{})
	}
}

// NetConn is the connection underneath.
func (c *firstBytesConn) NetConn() net.Conn { return c.Conn }

// firstBytesSeen is an http.Server's ConnState hook for firstBytesConn:
// a connection turns active once the server has read the start of a
// request (HTTP/2: the preface).
func firstBytesSeen(nc net.Conn, st http.ConnState) {
	if st != http.StateActive {
		return
	}
	if tc, ok := nc.(*tls.Conn); ok {
		if fc, ok := tc.NetConn().(*firstBytesConn); ok {
			fc.seen()
		}
	}
}
