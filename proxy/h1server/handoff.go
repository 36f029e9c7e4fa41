package h1server

import (
	"crypto/tls"
	"io"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// The hand-off: a connection the loop does not serve goes, with the bytes
// read so far, to the http.Server, which accepts it from handoffListener.

// handoffListener is the http.Server's side of the hand-off: Accept
// returns the connections Server gave up.
type handoffListener struct {
	ch     chan net.Conn
	once   sync.Once
	closed chan struct{}
	addr   atomic.Value // net.Addr
}

func (l *handoffListener) setAddr(a net.Addr) { l.addr.CompareAndSwap(nil, a) }

func (l *handoffListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.ch:
		return c, nil
	case <-l.closed:
		return nil, net.ErrClosed
	}
}

func (l *handoffListener) Close() error {
	l.once.Do(func() { close(l.closed) })
	return nil
}

func (l *handoffListener) Addr() net.Addr {
	if a, ok := l.addr.Load().(net.Addr); ok {
		return a
	}
	return &net.TCPAddr{}
}

// give passes c to the http.Server; false when it is shut down.
func (l *handoffListener) give(c net.Conn) bool {
	select {
	case l.ch <- c:
		return true
	case <-l.closed:
		return false
	}
}

// handOff gives the connection to the http.Server with the bytes read and
// not consumed; false when the server is shut down.
func (c *h1Conn) handOff() bool {
	if !c.state.CompareAndSwap(h1Idle, h1Active) {
		return false
	}
	c.setReadDeadline(time.Time{})
	hc := &handedConn{Conn: c.rwc}
	if n := c.br.Buffered(); n > 0 {
		b, _ := c.br.Peek(n)
		hc.pre = slices.Clone(b)
	}
	if c.stashed { // read by the client watch after the buffered bytes
		hc.pre = append(hc.pre, c.stash[0])
	}
	if c.tls != nil {
		return c.s.handoff.give(&handedTLSConn{hc})
	}
	return c.s.handoff.give(hc)
}

// handedTLSConn is a TLS connection given to net/http after the loop read
// from it: net/http takes Request.TLS from its ConnectionState.
type handedTLSConn struct{ *handedConn }

func (h *handedTLSConn) ConnectionState() tls.ConnectionState {
	return h.Conn.(*tls.Conn).ConnectionState()
}

// handshake runs the TLS handshake of an HTTPS connection as net/http's
// server does (within the header timeout, the same log line and the same
// answer to a client that speaks plain HTTP); false when the connection is
// done with: the handshake failed, or it negotiated another protocol by
// ALPN and is the http.Server's now.
func (c *h1Conn) handshake(st *h1Loop) bool {
	if d := c.s.headers; d > 0 {
		dl := time.Now().Add(d)
		_ = c.rwc.SetReadDeadline(dl)
		_ = c.rwc.SetWriteDeadline(dl)
	}
	if err := c.tls.HandshakeContext(c.ctx); err != nil {
		var reason string
		if re, ok := err.(tls.RecordHeaderError); ok && re.Conn != nil && looksLikeHTTP(re.RecordHeader) {
			io.WriteString(re.Conn, "HTTP/1.0 400 Bad Request\r\n\r\nClient sent an HTTP request to an HTTPS server.\n")
			re.Conn.Close()
			reason = "client sent an HTTP request to an HTTPS server"
		} else {
			reason = err.Error()
		}
		c.s.logf("http: TLS handshake error from %s: %v", c.remote, reason)
		return false
	}
	state := c.tls.ConnectionState()
	if p := state.NegotiatedProtocol; p != "" && p != "http/1.1" {
		// HTTP/2 (or an ACME challenge): net/http's, from its handshake
		// (done: a no-op there) on, deadline included.
		if !c.state.CompareAndSwap(h1Idle, h1Active) {
			return false
		}
		st.handedOff = c.s.handoff.give(c.tls)
		return false
	}
	if c.s.headers > 0 {
		// As net/http: the connection's deadlines cleared, then the
		// first request's header timeout (step).
		_ = c.rwc.SetReadDeadline(time.Time{})
		_ = c.rwc.SetWriteDeadline(time.Time{})
	}
	c.tlsState = &state
	return true
}

// looksLikeHTTP is net/http's tlsRecordHeaderLooksLikeHTTP: a client that
// sent a plain HTTP request to an HTTPS listener.
func looksLikeHTTP(hdr [5]byte) bool {
	switch string(hdr[:]) {
	case "GET /", "HEAD ", "POST ", "PUT /", "OPTIO":
		return true
	}
	return false
}

// handedConn is a connection given to net/http: what was read already
// comes first.
type handedConn struct {
	net.Conn
	pre []byte
}

func (h *handedConn) Read(p []byte) (int, error) {
	if len(h.pre) > 0 {
		n := copy(p, h.pre)
		h.pre = h.pre[n:]
		return n, nil
	}
	return h.Conn.Read(p)
}

// NetConn is the connection underneath (as tls.Conn's).
func (h *handedConn) NetConn() net.Conn { return h.Conn }
