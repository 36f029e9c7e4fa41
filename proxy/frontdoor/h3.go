package frontdoor

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"

	"github.com/tether-proxy/tether/proxy/config"
)

// HTTP/3 on a listener whose Protocols name it: a UDP socket on the
// listener's port beside its TCP socket (or alone, for Http3), served by
// quic-go's http3 server with the listener's TLS configuration, so the
// certificates, Sni selection, reloads, ACME certificates and session
// ticket keys are the TCP ones.

// altSvcMaxAge is how long a client may remember the Alt-Svc
// advertisement: 24 hours, RFC 7838's default made explicit. Every HTTPS
// answer over TCP renews it, and a client that finds no QUIC listener
// falls back to TCP, so a longer age only prolongs failed attempts after
// HTTP/3 is switched off (or UDP blocked in front of the node).
const altSvcMaxAge = 86400

// Address validation (QUIC Retry, RFC 9000 8.1.2) turns on for new
// connections while a listener's new handshakes pass retryThreshold per
// second: a Retry costs every client a round trip, and it is what keeps
// a flood of spoofed Initial packets from making the node send three
// times their size to the victim and hold handshake state for each.
const retryThreshold = 1000

// h3Server is a listener's HTTP/3 server and its UDP sockets.
type h3Server struct {
	srv       *http3.Server
	allow0RTT bool
	lim       *connLimit // the server's connection cap, nil: none
	retry     retryGate
	keys      quicKeys // UseQUICKeys
	// headers is Limits.RequestHeadersTimeout: the wait for a
	// connection's first request (headWait).
	headers time.Duration
	// altSvc is the Alt-Svc value TCP answers carry, set once the port
	// is bound.
	altSvc atomic.Pointer[string]

	mu  sync.Mutex
	trs []*quic.Transport
	pcs []net.PacketConn
}

// quicConnKey carries a request's QUIC connection in its context.
type quicConnKey struct{}

func newH3Server(l config.Listener, handler http.Handler, maxHeader int, idle, headers time.Duration, lim *connLimit, logger *slog.Logger) *h3Server {
	h := &h3Server{allow0RTT: l.AllowZeroRtt, lim: lim, headers: headers}
	if h.allow0RTT {
		handler = earlyData(handler)
	}
	if headers > 0 {
		handler = firstRequest(handler)
	}
	h.srv = &http3.Server{
		Handler:        handler,
		MaxHeaderBytes: maxHeader,
		IdleTimeout:    idle,
		Logger:         logger,
		QUICConfig:     &quic.Config{Allow0RTT: h.allow0RTT},
		ConnContext: func(ctx context.Context, c *quic.Conn) context.Context {
			if w, ok := ctx.Value(headWaitKey{}).(*headWait); ok {
				w.accepted(c)
			}
			return context.WithValue(ctx, quicConnKey{}, c)
		},
	}
	return h
}

// Limits.RequestHeadersTimeout over QUIC bounds the wait for a
// connection's first request: from its first packet, through the
// handshake, to the first request whose head is complete (its handler
// starts). quic-go's http3 server reads each stream's HEADERS frame
// itself, without a deadline and without a hook before the handler, so a
// request head that stalls on a connection that has already served one is
// bounded only by the connection's idle timeout (QUIC's, which the
// client's packets renew); the first request's is bounded here, which is
// what keeps a client from holding connections (and the connection cap)
// without ever asking anything.

// headWait is a connection's wait for its first request.
type headWait struct {
	timer     *time.Timer
	requested atomic.Bool
	expired   atomic.Bool
	conn      atomic.Pointer[quic.Conn]
}

type headWaitKey struct{}

func (w *headWait) expire() {
	if w.requested.Load() {
		return
	}
	w.expired.Store(true)
	if c := w.conn.Load(); c != nil {
		closeHeadTimeout(c)
	}
}

// accepted notes the connection once the http3 server takes it; one whose
// wait has ended already is closed.
func (w *headWait) accepted(c *quic.Conn) {
	w.conn.Store(c)
	if w.expired.Load() && !w.requested.Load() {
		closeHeadTimeout(c)
	}
}

func closeHeadTimeout(c *quic.Conn) {
	_ = c.CloseWithError(quic.ApplicationErrorCode(http3.ErrCodeNoError), "request headers timeout")
}

// firstRequest ends the wait of a request's connection for its first
// request.
func firstRequest(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if hw, ok := r.Context().Value(headWaitKey{}).(*headWait); ok && !hw.requested.Load() && hw.requested.CompareAndSwap(false, true) {
			hw.timer.Stop()
		}
		next.ServeHTTP(w, r)
	})
}

// earlyData serves GET, HEAD and OPTIONS sent in TLS early data (0-RTT)
// and answers the other methods 425 Too Early (RFC 8470): early data can
// be replayed by anyone who captured it. A request is early when its
// connection's handshake has not completed as the handler starts; once it
// has, the client has proven it holds the keys, and a replay never gets
// that far. Requests served from early data carry "Early-Data: 1" to the
// backend, as RFC 8470 asks of an intermediary.
func earlyData(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if c, ok := r.Context().Value(quicConnKey{}).(*quic.Conn); ok && !handshakeDone(c) {
			switch r.Method {
			case http.MethodGet, http.MethodHead, http.MethodOptions:
				r.Header.Set("Early-Data", "1")
			default:
				http.Error(w, "too early", http.StatusTooEarly)
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

func handshakeDone(c *quic.Conn) bool {
	select {
	case <-c.HandshakeComplete():
		return true
	default:
		return false
	}
}

// altSvcHandler adds the Alt-Svc advertisement of h to every answer of next.
func (h *h3Server) altSvcHandler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if v := h.altSvc.Load(); v != nil {
			hd := w.Header()
			hd["Alt-Svc"] = append(hd["Alt-Svc"], *v)
		}
		next.ServeHTTP(w, r)
	})
}

// setPort records the UDP port the listener serves HTTP/3 on.
func (h *h3Server) setPort(port int) {
	v := fmt.Sprintf(`h3=":%d"; ma=%d`, port, altSvcMaxAge)
	h.altSvc.Store(&v)
}

// listenUDP binds the UDP sockets beside TCP sockets bound to tcpAddrs
// (the same address and port). A socket that cannot bind is an error
// naming addr, the configured address.
func listenUDP(addr string, tcpAddrs []net.Addr) ([]net.PacketConn, error) {
	var pcs []net.PacketConn
	for _, a := range tcpAddrs {
		ta, _ := a.(*net.TCPAddr)
		if ta == nil {
			continue
		}
		ua := &net.UDPAddr{IP: ta.IP, Port: ta.Port, Zone: ta.Zone}
		if ta.IP.IsUnspecified() {
			ua.IP = nil // both families, as the TCP socket on a wildcard
		}
		pc, err := net.ListenUDP("udp", ua)
		if err != nil {
			closeAll(pcs)
			return nil, fmt.Errorf("listen on %s (UDP, for HTTP/3): %w", addr, err)
		}
		pcs = append(pcs, pc)
	}
	return pcs, nil
}

// listenUDPOnly binds addr for a listener that serves HTTP/3 alone; as for
// TCP, "localhost:port" is both loopbacks.
func listenUDPOnly(addr string) ([]net.PacketConn, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("listen on %s (UDP, for HTTP/3): %w", addr, err)
	}
	addrs := []string{addr}
	if strings.EqualFold(host, "localhost") && port != "0" {
		addrs = []string{net.JoinHostPort("127.0.0.1", port), net.JoinHostPort("::1", port)}
	}
	var pcs []net.PacketConn
	for i, a := range addrs {
		pc, err := net.ListenPacket("udp", a)
		if err != nil {
			if i > 0 && !errors.Is(err, syscall.EADDRINUSE) && len(pcs) > 0 {
				continue // no IPv6 here: serve the other loopback, as TCP does
			}
			closeAll(pcs)
			return nil, fmt.Errorf("listen on %s (UDP, for HTTP/3): %w", addr, err)
		}
		pcs = append(pcs, pc)
	}
	return pcs, nil
}

func closeAll(pcs []net.PacketConn) {
	for _, pc := range pcs {
		_ = pc.Close()
	}
}

// dynamicPort says whether addr asks for a port the system picks: the UDP
// port must then be the one TCP got, which another socket may hold, so
// binding the pair is tried again with another port.
func dynamicPort(addr string) bool {
	_, port, err := net.SplitHostPort(addr)
	return err == nil && (port == "0" || port == "")
}

// udpPort is the port of pcs (all share one).
func udpPort(pcs []net.PacketConn) int {
	for _, pc := range pcs {
		if ua, ok := pc.LocalAddr().(*net.UDPAddr); ok {
			return ua.Port
		}
	}
	return 0
}

// serve serves HTTP/3 on pc with the TLS configuration tc until Shutdown.
func (h *h3Server) serve(pc net.PacketConn, tc *tls.Config) error {
	tr := &quic.Transport{
		Conn:                pc,
		VerifySourceAddress: h.retry.verify,
		ConnContext:         h.connContext,
		TokenGeneratorKey:   h.keys.token,
		StatelessResetKey:   h.keys.reset,
	}
	qc := h.srv.QUICConfig.Clone()
	ln, err := tr.ListenEarly(tc, qc)
	if err != nil {
		_ = tr.Close()
		return err
	}
	h.mu.Lock()
	h.trs = append(h.trs, tr)
	h.mu.Unlock()
	err = h.srv.ServeListener(ln)
	_ = ln.Close()
	return err
}

// connContext counts a QUIC connection against the server's connection
// cap (Limits.MaxConcurrentConnections) for as long as it lives, and
// refuses one beyond it, as limitListener does for TCP; and it starts the
// connection's wait for its first request (headWait).
func (h *h3Server) connContext(ctx context.Context, _ *quic.ClientInfo) (context.Context, error) {
	if h.lim != nil {
		if h.lim.open.Add(1) > h.lim.max {
			h.lim.open.Add(-1)
			return nil, errConnLimit
		}
		context.AfterFunc(ctx, func() { h.lim.open.Add(-1) })
	}
	if h.headers > 0 {
		w := &headWait{}
		w.timer = time.AfterFunc(h.headers, w.expire)
		context.AfterFunc(ctx, func() { w.timer.Stop() })
		ctx = context.WithValue(ctx, headWaitKey{}, w)
	}
	return ctx, nil
}

var errConnLimit = errors.New("connection limit reached")

// shutdown stops the server gracefully (GOAWAY, then waiting for the
// requests in flight until ctx ends), then closes its sockets.
func (h *h3Server) shutdown(ctx context.Context) error {
	err := h.srv.Shutdown(ctx)
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		err = nil // Close ended what was left, as http.Server's callers do
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, tr := range h.trs {
		_ = tr.Close()
	}
	closeAll(h.pcs)
	h.trs, h.pcs = nil, nil
	return err
}

// quicTLS is the TLS configuration HTTP/3 serves: the listener's, ALPN h3
// (in every configuration its GetConfigForClient picks too), with the
// HTTP/3 settings bound into its session tickets (bindSettings). It is
// built as the listener starts, after UseTicketKeys and UseAcme have set
// the listener's configuration up.
func (h *h3Server) quicTLS(tc *tls.Config) *tls.Config {
	return bindSettings(http3.ConfigureTLSConfig(tc), int64(h.srv.MaxHeaderBytes))
}

// settingsTicketPrefix marks the session ticket entry that records the
// HTTP/3 settings a ticket's connection was served with.
const settingsTicketPrefix = "tether h3 settings v1 "

// bindSettings records the HTTP/3 settings of the listener (its
// SETTINGS_MAX_FIELD_SECTION_SIZE, Limits.MaxRequestHeadersTotalSize) in
// the session tickets c issues, and refuses 0-RTT to a ticket issued
// under a larger limit or none recorded: a client in 0-RTT sends with the
// settings it remembers (RFC 9114 7.2.4.2), so a limit lowered since (by
// a restart, or on another node sharing the ticket keys) would answer its
// early requests 431. Refused, the client resumes the session all the
// same and sends its requests after the handshake, having learned the
// new settings. quic-go's http3.Server binds its settings so only on a
// socket it opens itself; tether's transports are its own.
func bindSettings(c *tls.Config, maxHeader int64) *tls.Config {
	entry := []byte(settingsTicketPrefix + strconv.FormatInt(maxHeader, 10))
	wrap, unwrap := c.WrapSession, c.UnwrapSession
	if wrap == nil {
		wrap = c.EncryptTicket
	}
	if unwrap == nil {
		unwrap = c.DecryptTicket
	}
	c.WrapSession = func(cs tls.ConnectionState, ss *tls.SessionState) ([]byte, error) {
		ss.Extra = append(ss.Extra, slices.Clone(entry))
		return wrap(cs, ss)
	}
	c.UnwrapSession = func(identity []byte, cs tls.ConnectionState) (*tls.SessionState, error) {
		ss, err := unwrap(identity, cs)
		if err != nil || ss == nil || !ss.EarlyData {
			return ss, err
		}
		if old, ok := ticketMaxHeader(ss.Extra); !ok || old > maxHeader {
			ss.EarlyData = false
		}
		return ss, nil
	}
	if gfc := c.GetConfigForClient; gfc != nil {
		c.GetConfigForClient = func(hello *tls.ClientHelloInfo) (*tls.Config, error) {
			conf, err := gfc(hello)
			if conf == nil || err != nil {
				return conf, err
			}
			// http3's GetConfigForClient returns a new clone each time.
			return bindSettings(conf, maxHeader), nil
		}
	}
	return c
}

// ticketMaxHeader is the header limit a ticket's extra entries record.
func ticketMaxHeader(extra [][]byte) (int64, bool) {
	for _, e := range extra {
		if v, ok := bytes.CutPrefix(e, []byte(settingsTicketPrefix)); ok {
			n, err := strconv.ParseInt(string(v), 10, 64)
			return n, err == nil
		}
	}
	return 0, false
}

// retryGate asks new connections for address validation while the rate
// of new handshakes is above retryThreshold a second (counted per whole
// second).
type retryGate struct {
	threshold int64 // 0: retryThreshold; negative: always (tests)
	sec       atomic.Int64
	n         atomic.Int64
}

func (g *retryGate) verify(net.Addr) bool {
	if g.threshold < 0 {
		return true
	}
	now := time.Now().Unix()
	if s := g.sec.Load(); s != now && g.sec.CompareAndSwap(s, now) {
		g.n.Store(0)
	}
	limit := g.threshold
	if limit <= 0 {
		limit = retryThreshold
	}
	return g.n.Add(1) > limit
}
