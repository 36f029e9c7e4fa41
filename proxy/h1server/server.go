package h1server

import (
	"context"
	"crypto/tls"
	"errors"
	"log"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/tether-proxy/tether/proxy/internal/sockio"
)

// Server is tether's own HTTP/1.1 server loop for cleartext listeners,
// in front of net/http's: it reads and answers the plain requests itself
// (a GET in HTTP/1.1 with no body, no upgrade, no expectation, its whole
// head within the connection's 4 KiB buffer, see parseRequestHead) and
// hands the connection, with every byte it has read and not consumed, to
// the listener's http.Server at the first request it does not take, for
// good. net/http's server costs per request a goroutine and a read for
// its background watch, a clone of the response header, a sorted copy of
// the response fields and a line-by-line copy of the request head; this
// loop has none of them, and holds no buffers while a connection waits (nor,
// for a connection of fewer than waitAfter+1 requests, a goroutine on
// Linux, or more than a 2 KiB goroutine stack elsewhere: serve parks it).
// What it does answer follows net/http's rules for the same
// request (the tests hold the two side by side): the same Request
// fields and context values, the same status line and fields (Date,
// Content-Length, chunking, sniffed Content-Type, Connection: close),
// trailers, 1xx, flushes, the per-request context cancelled when the
// client goes away, panics recovered as net/http does, the listener's
// header and idle timeouts, and graceful shutdown.
//
// One difference a handler must keep to: a connection's requests reuse
// the request's header map and URL (headScratch), so the handler does
// not hold on to r.Header or r.URL once it has returned, as tether's
// proxy never does (its strings are the request's own and may be kept).
type Server struct {
	srv     *http.Server
	headers time.Duration // ReadHeaderTimeout
	idle    time.Duration // IdleTimeout
	watch   time.Duration // watchDelay (a test's longer one)
	// parkAfter: a connection idle this long on its second descriptor is
	// parked (sweep); sweepOnce starts the sweep.
	parkAfter time.Duration
	sweepOnce sync.Once
	// waitFiles counts the connections' second descriptors (wait.go),
	// at most waitCap.
	waitFiles atomic.Int64
	waitCap   int64
	// parked counts the connections parked (h1Conn.park), on the poller
	// or on a goroutine; bufsHeld, the connections holding their read and
	// write buffers (takeBufs to dropBufs).
	parked   atomic.Int64
	bufsHeld atomic.Int64
	// handoff feeds the connections it gives up to srv.Serve.
	handoff *handoffListener
	ctx     context.Context // every request's context values

	closing atomic.Bool
	// work hands an accepted connection to an idle worker; quit, closed
	// at shutdown, ends the idle workers.
	work        chan *h1Conn
	quit        chan struct{}
	quitOnce    sync.Once
	idleWorkers atomic.Int32
	mu          sync.Mutex
	conns       map[*h1Conn]struct{}
	lns         []net.Listener
	done        chan struct{} // closed when conns empties during shutdown
}

// watchDelay is how long a request runs before its client connection is
// watched for going away (net/http watches at once; a request answered
// sooner would only have paid for the watch).
const watchDelay = 5 * time.Millisecond

func New(srv *http.Server) *Server {
	s := &Server{srv: srv, headers: srv.ReadHeaderTimeout, idle: srv.IdleTimeout, watch: watchDelay, parkAfter: parkAfter,
		waitCap: waitFileCap(), conns: map[*h1Conn]struct{}{}, work: make(chan *h1Conn), quit: make(chan struct{})}
	if s.idle <= 0 {
		s.idle = srv.ReadTimeout // as net/http's idleTimeout
	}
	s.handoff = &handoffListener{ch: make(chan net.Conn), closed: make(chan struct{})}
	s.ctx = context.WithValue(context.Background(), http.ServerContextKey, srv)
	return s
}

// ServeHandoff serves, on the http.Server given to New, the connections
// the loop hands over (with the bytes it read); it returns when that
// server is shut down or closed.
func (s *Server) ServeHandoff() error { return s.srv.Serve(s.handoff) }

// Serve accepts on ln until it is closed, as http.Server.Serve does.
func (s *Server) Serve(ln net.Listener) error { return s.serve(ln, nil) }

// ServeTLS accepts on ln as Serve does, for an HTTPS listener with tc (its
// certificates, ALPN protocols and SNI rules), as http.Server.ServeTLS
// would: each connection's handshake runs on its worker within the header
// timeout; one that negotiates another protocol than HTTP/1.1 by ALPN (h2)
// goes to the http.Server as the *tls.Conn it is, and HTTP/1.1 is served
// by the loop over the TLS connection (handed over, at its first request
// the loop does not take, with its TLS state). A TLS connection waits for
// its next request on its goroutine, with its buffers: the park watches the
// socket, and the TLS layer may hold a request it has already read.
func (s *Server) ServeTLS(ln net.Listener, tc *tls.Config) error {
	if tc == nil {
		return errors.New("h1server: ServeTLS without a TLS configuration")
	}
	return s.serve(ln, tc)
}

func (s *Server) serve(ln net.Listener, tc *tls.Config) error {
	s.mu.Lock()
	if s.closing.Load() {
		s.mu.Unlock()
		return http.ErrServerClosed
	}
	s.lns = append(s.lns, ln)
	s.handoff.setAddr(ln.Addr())
	s.mu.Unlock()
	var delay time.Duration
	for {
		rwc, err := ln.Accept()
		if err != nil {
			if s.closing.Load() {
				return http.ErrServerClosed
			}
			if ne, ok := err.(net.Error); ok && ne.Timeout() || errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) {
				delay = min(max(2*delay, 5*time.Millisecond), time.Second)
				s.logf("http: Accept error: %v; retrying in %v", err, delay)
				time.Sleep(delay)
				continue
			}
			return err
		}
		delay = 0
		if tc != nil {
			rwc = tls.Server(rwc, tc)
		}
		c := s.newConn(rwc)
		if c == nil {
			return http.ErrServerClosed
		}
		s.run(c)
	}
}

// maxIdleWorkers bounds the connection goroutines kept waiting for the
// next connection (with the stacks they grew).
const maxIdleWorkers = 64

// run serves c on a goroutine that served a connection before and now
// waits for one, or on a new goroutine. A new goroutine's stack starts
// small and is copied twice on the way down to the backend round trip,
// which cost 2 µs of the 67 µs a new connection per request costs
// (runtime.newstack in the close-1k profile; DESIGN.md, "The server side"); a
// waiting one has that stack already.
func (s *Server) run(c *h1Conn) {
	select {
	case s.work <- c:
	default:
		go s.worker(c)
	}
}

// worker serves c, then the connections run hands it, until it is one
// idle worker too many or the server shuts down.
func (s *Server) worker(c *h1Conn) {
	for {
		c.serve()
		if s.idleWorkers.Add(1) > maxIdleWorkers {
			s.idleWorkers.Add(-1)
			return
		}
		select {
		case c = <-s.work:
		case <-s.quit:
			c = nil
		}
		s.idleWorkers.Add(-1)
		if c == nil {
			return
		}
	}
}

func (s *Server) logf(format string, args ...any) {
	if s.srv.ErrorLog != nil {
		s.srv.ErrorLog.Printf(format, args...)
		return
	}
	log.Printf(format, args...)
}

func (s *Server) newConn(rwc net.Conn) *h1Conn {
	c := &h1Conn{s: s, rwc: rwc, remote: rwc.RemoteAddr().String(), loop: h1Loop{first: true}}
	c.ctx = context.WithValue(s.ctx, http.LocalAddrContextKey, rwc.LocalAddr())
	c.takeBufs()
	c.src.c = c
	if tc, ok := rwc.(*tls.Conn); ok {
		// Its reads are the TLS layer's: no wait on the socket.
		c.tls = tc
	} else if c.raw = sockio.RawConnOf(rwc); c.raw != nil {
		c.await = c.awaitFd
		c.tcp = sockio.TCPOf(rwc)
	}
	c.watch = time.AfterFunc(time.Hour, c.timerFired)
	c.watch.Stop()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing.Load() {
		rwc.Close()
		c.dropBufs()
		return nil
	}
	s.conns[c] = struct{}{}
	return c
}

func (s *Server) forget(c *h1Conn) {
	s.mu.Lock()
	delete(s.conns, c)
	if len(s.conns) == 0 && s.done != nil {
		close(s.done)
		s.done = nil
	}
	s.mu.Unlock()
}

// Shutdown stops accepting, closes idle connections and waits for the
// busy ones to finish their request until ctx ends; then closes them.
// The handed-off connections are http.Server.Shutdown's.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	s.closing.Store(true)
	s.endWorkers()
	for _, ln := range s.lns {
		_ = ln.Close()
	}
	var done chan struct{}
	if len(s.conns) > 0 {
		done = make(chan struct{})
		s.done = done
	}
	for c := range s.conns {
		c.closeIfIdle()
	}
	s.mu.Unlock()
	if done == nil {
		return nil
	}
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		s.close()
		return ctx.Err()
	}
}

// close closes every connection at once.
func (s *Server) close() {
	s.mu.Lock()
	s.closing.Store(true)
	s.endWorkers()
	for _, ln := range s.lns {
		_ = ln.Close()
	}
	for c := range s.conns {
		c.closeOutside()
	}
	s.mu.Unlock()
}

// endWorkers ends the idle workers, and each busy one once its
// connection is done.
func (s *Server) endWorkers() { s.quitOnce.Do(func() { close(s.quit) }) }

// Interface guards.
var (
	_ http.ResponseWriter = (*h1Writer)(nil)
	_ http.Flusher        = (*h1Writer)(nil)
	_ net.Listener        = (*handoffListener)(nil)
)
