package frontdoor

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
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
// protocols and MaxConcurrentConnections; binding an address; the bound on
// an HTTPS connection's first request. The TLS settings are in tls.go.

// httpProtocols is what a listener serves, as Kestrel's HttpProtocols: over
// TLS the client picks by ALPN; in cleartext Http2 means h2c with prior
// knowledge and Http1AndHttp2 means HTTP/1.1 (no h2c upgrades).
func httpProtocols(l config.Listener, tlsOn bool) (*http.Protocols, []string) {
	p := new(http.Protocols)
	switch config.ProtocolsTCP(l.Protocols) {
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
