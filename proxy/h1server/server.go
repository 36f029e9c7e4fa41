package h1server

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/textproto"
	"net/url"
	"os"
	goruntime "runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/tether-proxy/tether/proxy/internal/cancelhook"
	"github.com/tether-proxy/tether/proxy/internal/h1wire"
	"github.com/tether-proxy/tether/proxy/internal/monotime"
	"github.com/tether-proxy/tether/proxy/internal/sockio"
	"golang.org/x/net/http/httpguts"
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

const h1BufSize = 4 << 10

// Connection states for shutdown.
const (
	h1Idle int32 = iota
	h1Active
	h1Closed
)

// h1Conn is one client connection served by Server.
type h1Conn struct {
	s   *Server
	rwc net.Conn
	// tls is rwc on an HTTPS listener, nil otherwise; tlsState, its
	// state once the handshake is done (every request's Request.TLS).
	tls      *tls.Conn
	tlsState *tls.ConnectionState
	remote   string
	ctx      context.Context
	br       *bufio.Reader
	bw       *bufio.Writer
	src      h1Source
	hook     cancelhook.Hook // the lean transport's close-on-cancel
	state    atomic.Int32
	// raw, await, waited, peekBuf: peekWait's wait for the next request.
	raw     syscall.RawConn
	await   func(fd uintptr) bool
	waited  bool
	peekBuf [1]byte
	// tcp, wf, wraw, readNow, nowFd: wait's, on a second descriptor of
	// the socket (wait.go).
	tcp     *net.TCPConn
	wf      atomic.Pointer[os.File]
	wraw    syscall.RawConn
	readNow bool
	nowFd   uintptr

	// The client watch (watchClient): armed by a request that runs past
	// watchDelay, it reads from the connection so that the client's going
	// away cancels the request, as net/http's background read does. Its
	// timer also ends a park on the poller at the idle deadline
	// (timerFired): the two never run at once.
	watch   *time.Timer
	wmu     sync.Mutex
	wstate  int // watchOff, watchArmed, watchReading
	wdone   chan struct{}
	rctx    *cancelhook.Ctx // the running request's
	stash   [1]byte
	stashed bool
	// deadline: prepareWait set the idle read deadline for the next head;
	// idleUntil: when that deadline is (monotime.Now), 0 once another was set.
	deadline  bool
	idleUntil int64
	// rq is what only a request needs (h1Req), kept from one request to
	// the next and given back while the connection is parked or gone.
	rq   *h1Req
	loop h1Loop // serve's state, kept while the connection is parked
	// waitSince is when the connection's latest wait began (monotime.Now);
	// parkAsked: the sweep ended its wait on the second descriptor, to
	// park it (Server.sweep).
	waitSince atomic.Int64
	parkAsked atomic.Bool
	// parkTok: the poller's token while the connection is parked there,
	// 0 otherwise; parkUntil: that park's idle deadline (monotime.Now), when
	// the watch timer ends it (park_linux.go). Both under the poller's
	// mutex; onPoll is whether parkTok is set, for the timer.
	parkTok   uint64
	parkUntil int64
	onPoll    atomic.Bool
}

const (
	watchOff = iota
	watchArmed
	watchReading
)

// h1Source is the bufio.Reader's source: a byte the client watch read
// first, then the connection.
type h1Source struct{ c *h1Conn }

func (s *h1Source) Read(p []byte) (int, error) {
	c := s.c
	if c.stashed && len(p) > 0 {
		c.stashed = false
		p[0] = c.stash[0]
		return 1, nil
	}
	if c.readNow {
		c.readNow = false
		return sockio.ReadNow(c.nowFd, p)
	}
	return c.rwc.Read(p)
}

func (c *h1Conn) closeIfIdle() {
	if c.state.CompareAndSwap(h1Idle, h1Closed) {
		c.closeOutside()
	}
}

func (c *h1Conn) serve() {
	st := &c.loop
	parked := false
	defer func() {
		if parked {
			return // the connection is parked: another goroutine's now
		}
		if v := recover(); v != nil {
			// A fault of the loop's own (the handler's are recovered in
			// serveRequest) ends this connection, not the process, as
			// net/http's conn.serve does.
			buf := make([]byte, 64<<10)
			buf = buf[:goruntime.Stack(buf, false)]
			c.s.logf("http: panic serving %v: %v\n%s", c.remote, v, buf)
			st.handedOff = false
			c.bw = nil // what is buffered may be a broken head: not sent
		}
		c.watch.Stop()
		c.s.forget(c)
		c.closeWait() // before the connection: its socket closes with the last descriptor
		if !st.handedOff {
			if c.bw != nil {
				_ = c.bw.Flush() // as net/http's close: what is buffered goes out
			}
			_ = c.rwc.Close()
		}
		c.dropBufs()
		c.releaseReq()
	}()
	if c.tls != nil && c.tlsState == nil && !c.handshake(st) {
		return
	}
	for {
		switch c.step(st) {
		case stepDone:
			return
		case stepWait:
			if st.served >= waitAfter {
				if c.wait(st) {
					return
				}
				if !c.parkAsked.Swap(false) {
					continue
				}
				// Idle for parkAfter on its second descriptor, which
				// wait closed: parked as well, and given a new one
				// after its next request.
				c.wraw = nil
			}
			// A connection that has made few requests (or has waited
			// long) waits on a goroutine of its own with the smallest
			// stack, and this one, its stack grown by the request path,
			// serves other connections.
			c.prepareWait()
			c.giveBack()
			parked = true
			c.park()
			return
		}
	}
}

// giveBack lets go, before the connection parks, what only a request
// needs: its h1Req (with the response header map) and the request field
// map go to their pools and the last request's head (the string its
// fields were cut from) to the collector. The next request takes them
// from the pools (request, h1wire.Fields.Get).
func (c *h1Conn) giveBack() {
	c.releaseReq()
	c.hook.End()
	c.wmu.Lock()
	c.rctx = nil
	c.wmu.Unlock()
}

// h1Req is what a connection needs only while it serves a request: the
// request it parses each head into, the head's containers (headScratch),
// the response writer with its header map, and the response fields'
// scratch (writeFields). A connection takes one from h1Reqs for its first
// request and keeps it for the next ones; it gives it back when it parks
// (giveBack) or ends, so that an idle connection does not hold these
// 0.7 KiB (and the header map's KiB and more).
type h1Req struct {
	req     http.Request
	scratch headScratch
	w       h1Writer
	keys    []headerKV
}

var h1Reqs = sync.Pool{New: func() any { return new(h1Req) }}

// request is the connection's h1Req, from the pool when it has none.
func (c *h1Conn) request() *h1Req {
	if c.rq == nil {
		c.rq = h1Reqs.Get().(*h1Req)
		c.rq.w.c = c
	}
	return c.rq
}

// releaseReq gives the connection's h1Req back to the pool, emptied: the
// last request's head (the string its fields were cut from) goes to the
// collector, the header map to its pool (h1wire.Fields.Park).
func (c *h1Conn) releaseReq() {
	rq := c.rq
	if rq == nil {
		return
	}
	c.rq = nil
	rq.scratch.fields.Park()
	rq.scratch.url = url.URL{}
	rq.req = http.Request{}
	rq.w.c = nil
	clear(rq.w.trailers[:cap(rq.w.trailers)])
	clear(rq.keys[:cap(rq.keys)])
	rq.keys = rq.keys[:0]
	h1Reqs.Put(rq)
}

// park waits for the connection's next bytes off the worker that served
// it, which goes on to other connections: on the poller, without a
// goroutine (park_linux.go), or else on a goroutine of its own
// (parkWait). When the wait ends (bytes, an EOF, the idle deadline, a
// shutdown), the connection goes back to a worker (resume), whose serve
// resumes from c.loop and reads the next head or its failure.
func (c *h1Conn) park() {
	c.s.parked.Add(1)
	if !c.parkPoll() {
		go c.parkWait()
	}
}

// parkWait is peekWait on a goroutine that does nothing else, so its
// stack stays at the runtime's minimum (2 KiB) however long the
// connection is idle.
func (c *h1Conn) parkWait() {
	c.waited = false
	_ = c.raw.Read(c.await) // an error (the deadline, a close) is the next read's
	c.resume()
}

// resume gives a parked connection its buffers and a worker.
func (c *h1Conn) resume() {
	c.s.parked.Add(-1)
	c.takeBufs()
	c.s.run(c)
}

// h1Loop is what serve's steps share: the connection's, as a parked
// connection's serve resumes on another goroutine.
type h1Loop struct {
	first     bool // no request read yet
	handedOff bool // the connection is the http.Server's now
	served    int  // requests answered
}

// Results of step.
const (
	stepNext = iota // a pipelined request is buffered: read it
	stepWait        // wait for the next request's bytes
	stepDone        // close the connection (or it was handed off)
)

// step reads a request head, serves the request and sends its response.
func (c *h1Conn) step(st *h1Loop) int {
	if !c.deadline {
		d := c.s.idle
		if st.first || c.br.Buffered() > 0 || c.stashed {
			d = c.s.headers
		}
		if d > 0 {
			c.setReadDeadline(time.Now().Add(d))
		}
	}
	c.deadline = false
	head, status := c.readHead(st.first)
	st.first = false
	switch status {
	case headGone:
		return stepDone
	case headOther:
		st.handedOff = c.handOff()
		return stepDone
	case headNone:
		return stepWait
	}
	rq := c.request()
	if !parseRequestHeadInto(head, &rq.req, &rq.scratch) {
		st.handedOff = c.handOff()
		return stepDone
	}
	if !c.state.CompareAndSwap(h1Idle, h1Active) {
		return stepDone // shut down while the head came in
	}
	_, _ = c.br.Discard(len(head))
	rq.req.RemoteAddr = c.remote
	rq.req.TLS = c.tlsState
	if !c.serveRequest(&rq.req) {
		return stepDone
	}
	if err := c.bw.Flush(); err != nil || !c.idleAgain() {
		return stepDone
	}
	st.served++
	if c.raw == nil || c.br.Buffered() > 0 || c.stashed {
		return stepNext // a pipelined request, or not a socket: a plain read waits
	}
	return stepWait
}

// Results of readHead.
const (
	headOK    = iota
	headGone  // the connection ended or timed out: close it
	headOther // not for this loop: hand the connection over
	headNone  // the wait's first read found nothing (a wake-up for bytes already read)
)

// readHead waits for a whole request head in the buffer and returns it,
// unconsumed.
func (c *h1Conn) readHead(first bool) ([]byte, int) {
	want := 1
	for {
		buf, err := c.br.Peek(want)
		if len(buf) > 0 {
			buf, _ = c.br.Peek(c.br.Buffered())
			if i := h1wire.HeadEnd(buf); i >= 0 {
				return buf[:i], headOK
			}
			if first && len(buf) >= 3 && string(buf[:3]) != "GET" {
				return nil, headOther // not even a GET (an h2c preface, say)
			}
		}
		if err != nil {
			if err == sockio.ErrNotYet && c.br.Buffered() == 0 {
				return nil, headNone
			}
			var ne net.Error
			if c.br.Buffered() == 0 || errors.As(err, &ne) && ne.Timeout() {
				return nil, headGone // as net/http: closed or timed out, no answer
			}
			return nil, headOther // a head cut short: net/http answers it
		}
		if c.br.Buffered() >= c.br.Size() {
			return nil, headOther // larger than the buffer
		}
		if want == 1 && c.s.headers > 0 {
			// A head in pieces: from its first byte it has the header
			// timeout, not what is left of the idle one.
			c.setReadDeadline(time.Now().Add(c.s.headers))
		}
		want = c.br.Buffered() + 1
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

// serveRequest runs the handler for req and finishes its response in the
// connection's buffer; false when the connection is to be closed.
func (c *h1Conn) serveRequest(r *http.Request) (keep bool) {
	ctx := cancelhook.NewCtx(c.ctx, &c.hook)
	c.hook.Begin(ctx)
	// r is the connection's own request (c.rq), refilled for the next
	// one as its header map is; the copy WithContext makes stays on the
	// stack.
	*r = *r.WithContext(ctx)
	req := r
	w := &c.rq.w
	w.reset(req)
	// A byte the watch read while an earlier request ran, and no read has
	// taken yet, means the client is still there, and the stash has room
	// for no other: no watch then (as net/http's background read, which
	// does not start while it holds a byte). A second watch's byte would
	// take the place of the first, and the next request would lose it.
	watch := !c.stashed
	c.wmu.Lock()
	c.rctx, c.wstate = ctx, watchOff
	if watch {
		c.wstate = watchArmed
	}
	c.wmu.Unlock()
	if watch {
		c.watch.Reset(c.s.watch)
	}
	defer func() {
		c.endWatch()
		ctx.Cancel(context.Canceled)
		if v := recover(); v != nil {
			if v != http.ErrAbortHandler {
				const size = 64 << 10
				buf := make([]byte, size)
				buf = buf[:goruntime.Stack(buf, false)]
				c.s.logf("http: panic serving %v: %v\n%s", c.remote, v, buf)
			}
			// What net/http would still hold in its response buffer is
			// dropped, not sent: the connection closes on a cut response.
			c.bw.Reset(c.rwc)
			keep = false
		}
		clear(w.header)
		w.req, w.snap = nil, nil
		w.release()
	}()
	c.s.srv.Handler.ServeHTTP(w, req)
	w.finish()
	if w.closeAfter || w.werr != nil || c.s.closing.Load() {
		return false
	}
	if w.contentLength != -1 && w.bodyAllowed() && w.contentLength != w.written {
		return false // did not write what it announced
	}
	return true
}

// peekWait waits for the next request's bytes without holding the
// connection's buffers.
//
// The wait is RawConn.Read with a callback that peeks (MSG_PEEK,
// MSG_DONTWAIT) before it lets the poller wait: RawConn.Read resets the
// readiness state before its callback runs, so bytes or an EOF the client
// sent while the handler ran (a pipelined request, a half-close) would
// otherwise never wake it. The lean backend path can write inside that
// callback and skip the peek (leanConn.flushAwait) because a backend's
// answer cannot come before its request; a client's next request can. The
// peek takes the place of the read that finds nothing before each park.
// A connection that keeps coming back waits on a second descriptor
// instead, without the peek (wait, wait.go).
func (c *h1Conn) peekWait() {
	c.prepareWait()
	c.waitPeek()
}

// waitPeek is peekWait's wait, after prepareWait.
func (c *h1Conn) waitPeek() {
	c.waited = false
	_ = c.raw.Read(c.await) // an error (the deadline, a close) is the next read's
	c.takeBufs()
}

// prepareWait arms the idle deadline and gives back the buffers, which are
// empty while the connection waits: idle ones need not hold 8 KiB each
// (net/http's keep theirs).
func (c *h1Conn) prepareWait() {
	if c.s.idle > 0 {
		c.armIdle()
		c.deadline = true
	}
	c.dropBufs()
}

// armIdle sets the idle deadline of the wait for the next request.
// Pushing it per request cost a timer update each (1.2 % of the CPU under
// load), so it moves only when it is less than the idle timeout away, and
// then to the idle timeout plus a slack (an eighth of it, at most a
// second, as Kestrel's heartbeat looks at its KeepAliveTimeout once a
// second): an idle connection closes between the timeout and that much
// later.
func (c *h1Conn) armIdle() {
	now := monotime.Now()
	c.waitSince.Store(now)
	if c.idleUntil-now >= int64(c.s.idle) {
		return
	}
	d := c.s.idle + min(c.s.idle/8, time.Second)
	c.idleUntil = now + int64(d)
	t := time.Now().Add(d)
	_ = c.rwc.SetReadDeadline(t)
	if wf := c.wf.Load(); wf != nil {
		_ = wf.SetReadDeadline(t) // the wait's own
	}
}

// setReadDeadline is every other read deadline of the connection's: the
// idle one has to be set again after it.
func (c *h1Conn) setReadDeadline(t time.Time) {
	c.idleUntil = 0
	_ = c.rwc.SetReadDeadline(t)
}

// idleAgain marks the connection idle once its response is out, so a
// shutdown may close it; false when the server is shutting down.
func (c *h1Conn) idleAgain() bool {
	c.state.Store(h1Idle)
	return !c.s.closing.Load()
}

// awaitFd is c.await: ready when the peek finds bytes, an EOF or an
// error; else wait once for the poller.
func (c *h1Conn) awaitFd(fd uintptr) bool {
	if c.waited {
		return true
	}
	if sockio.NothingToRead(fd, c.peekBuf[:]) {
		c.waited = true
		return false
	}
	return true
}

var (
	h1Readers = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, h1BufSize) }}
	h1Writers = sync.Pool{New: func() any { return bufio.NewWriterSize(nil, h1BufSize) }}
)

// takeBufs gives the connection its read and write buffers.
func (c *h1Conn) takeBufs() {
	if c.br == nil && c.bw == nil {
		c.s.bufsHeld.Add(1)
	}
	if c.br == nil {
		c.br = h1Readers.Get().(*bufio.Reader)
		c.br.Reset(&c.src)
	}
	if c.bw == nil {
		c.bw = h1Writers.Get().(*bufio.Writer)
		c.bw.Reset(c.rwc)
	}
}

// dropBufs returns the empty buffers to their pools while the
// connection waits for its next request.
func (c *h1Conn) dropBufs() {
	if c.br != nil || c.bw != nil {
		c.s.bufsHeld.Add(-1)
	}
	if c.br != nil {
		c.br.Reset(nil)
		h1Readers.Put(c.br)
	}
	if c.bw != nil {
		c.bw.Reset(nil)
		h1Writers.Put(c.bw)
	}
	c.br, c.bw = nil, nil
}

// timerFired is the watch timer's: the idle deadline of a connection
// parked on the poller, else the client watch. A firing that was due
// before the timer was set again finds the park's deadline not yet come,
// or the watch not armed (watchClient), and does nothing; one that comes
// while a request's watch is armed starts the watch early, which only
// costs it its read.
func (c *h1Conn) timerFired() {
	if c.onPoll.Load() {
		c.parkExpired()
		return
	}
	c.watchClient()
}

// watchClient runs on the watch timer: it reads from the client so that
// its going away (EOF, a reset) cancels the request. A byte that arrives
// (a pipelined request) is kept for the next read.
func (c *h1Conn) watchClient() {
	c.wmu.Lock()
	if c.wstate != watchArmed {
		c.wmu.Unlock()
		return
	}
	// The idle deadline set for this request's head would end the watch.
	c.setReadDeadline(time.Time{})
	c.wstate = watchReading
	done := make(chan struct{})
	c.wdone = done
	rctx := c.rctx
	c.wmu.Unlock()
	defer close(done)
	n, err := c.rwc.Read(c.stash[:])
	if n == 1 {
		c.stashed = true
	}
	if err != nil {
		var ne net.Error
		if !errors.As(err, &ne) || !ne.Timeout() {
			rctx.Cancel(context.Canceled)
			c.hook.Fire()
		}
	}
}

// endWatch stops the client watch and, when it is reading, ends the read
// and waits for it.
func (c *h1Conn) endWatch() {
	c.watch.Stop()
	c.wmu.Lock()
	st, done := c.wstate, c.wdone
	c.wstate, c.wdone = watchOff, nil
	c.wmu.Unlock()
	if st != watchReading {
		return
	}
	c.setReadDeadline(aLongTimeAgo)
	<-done
	c.setReadDeadline(time.Time{})
}

var aLongTimeAgo = time.Unix(1, 0)

// parseRequestHead builds the request net/http's server would read from
// head, for the requests Server takes: "GET <origin-form> HTTP/1.1",
// CRLF line ends, token field names, field values of visible ASCII,
// spaces and tabs, no folded line, exactly one valid Host, a Connection
// of only "keep-alive" or "close", and none of the fields that give a
// request a body, an upgrade or an expectation. nil for anything else,
// which net/http then reads from the same bytes. It fills r, which has
// no context yet.
func parseRequestHead(head []byte, r *http.Request) bool {
	return parseRequestHeadInto(head, r, nil)
}

// headScratch is what a connection's requests reuse, one after another:
// the header map, the slots of its values and the URL. A request's
// strings stay its own (one string per head); only these containers are
// refilled, once the handler of the request before has returned.
type headScratch struct {
	fields h1wire.Fields
	url    url.URL
}

// parseRequestHeadInto is parseRequestHead with s's containers, when s is
// not nil.
func parseRequestHeadInto(head []byte, r *http.Request, s *headScratch) bool {
	if !bytes.HasSuffix(head, h1wire.CRLFCRLF) {
		return false // a head ended by a bare LF (headEnd allows it)
	}
	eol := bytes.IndexByte(head, '\n')
	if eol < 1 || head[eol-1] != '\r' {
		return false
	}
	line := head[:eol-1]
	const proto = " HTTP/1.1"
	if len(line) < 4+1+len(proto) || string(line[:4]) != "GET " || string(line[len(line)-len(proto):]) != proto {
		return false
	}
	target := line[4 : len(line)-len(proto)]
	if target[0] != '/' {
		return false
	}
	for _, b := range target {
		if b <= ' ' || b >= 0x7f {
			return false
		}
	}
	all := head[eol+1:]
	n := bytes.Count(all, h1wire.CRLF) - 1
	if n <= 0 {
		return false // no Host
	}
	// One string holds the target and every field (one allocation).
	blk := string(head[4:])
	uri := blk[:len(target)]
	off := eol + 1 - 4 // all[i] is blk[off+i]
	var u *url.URL
	var fs *h1wire.Fields
	if s != nil {
		u, fs = &s.url, &s.fields
	} else {
		u = new(url.URL)
	}
	if !plainRequestURI(uri, u) {
		var err error
		if u, err = url.ParseRequestURI(uri); err != nil {
			return false
		}
	}
	h, vals := fs.Get(n)
	var host string
	hosts := 0
	fr := h1wire.NewFieldReader(all, blk, off)
	for {
		key, value, done, ok := fr.Next(true)
		if !ok {
			return false
		}
		if done {
			break
		}
		switch key {
		case "Content-Length", "Transfer-Encoding", "Upgrade", "Expect", "Http2-Settings", "Trailer":
			return false
		case "Host":
			hosts++
			host = value
			continue
		case "Connection":
			if !strings.EqualFold(value, "keep-alive") && !strings.EqualFold(value, "close") {
				return false
			}
		}
		vals = h1wire.AddField(h, vals, key, value)
	}
	if hosts != 1 || !httpguts.ValidHostHeader(host) {
		return false
	}
	if pv, ok := h["Pragma"]; ok && len(pv) > 0 && pv[0] == "no-cache" {
		if _, ok := h["Cache-Control"]; !ok {
			h["Cache-Control"] = noCache // as net/http's fixPragmaCacheControl
		}
	}
	*r = http.Request{
		Method: http.MethodGet, URL: u, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: h, Body: http.NoBody, Host: host, RequestURI: uri,
		Close: httpguts.HeaderValuesContainsToken(h["Connection"], "close"),
	}
	return true
}

var noCache = []string{"no-cache"}

// plainRequestURI fills u as url.ParseRequestURI would from an
// origin-form target whose path needs no escaping (letters, digits and
// "-._~/$&+,:;=@"), without its allocation; false for any other target,
// which url.ParseRequestURI then reads. The caller has checked that uri
// starts with "/" and holds no control byte, space or non-ASCII byte.
func plainRequestURI(uri string, u *url.URL) bool {
	path, query, hasQuery := strings.Cut(uri, "?")
	for i := 0; i < len(path); i++ {
		if !plainPathByte[path[i]] {
			return false
		}
	}
	*u = url.URL{Path: path, RawQuery: query}
	if hasQuery && query == "" {
		u.ForceQuery = true // "/a?": as url.parse, a lone "?" at the end
	}
	return true
}

var plainPathByte = func() (t [256]bool) {
	for c := 'a'; c <= 'z'; c++ {
		t[c], t[c-'a'+'A'] = true, true
	}
	for c := '0'; c <= '9'; c++ {
		t[c] = true
	}
	for _, c := range "-._~/$&+,:;=@" {
		t[c] = true
	}
	return t
}()

// h1Writer is the http.ResponseWriter of Server's requests, reused by
// the connection. It writes what net/http's response writer writes for
// the same handler calls, for a GET in HTTP/1.1 with keep-alives on.
type h1Writer struct {
	c      *h1Conn
	req    *http.Request
	header http.Header
	// snap is the header as it was at WriteHeader, when the head is
	// written later (net/http's clone); nil when the head went out at
	// WriteHeader already or the handler never touched the header.
	snap          http.Header
	wroteHeader   bool // a final status was set
	committed     bool // the head is in the connection's buffer
	chunking      bool
	handlerDone   bool
	closeAfter    bool
	status        int
	contentLength int64
	written       int64
	trailers      []string
	// pending holds the body written before the head is committed, as
	// net/http's 2 KiB buffer in front of its chunk writer; pbuf is its
	// array, from pendingBufs while a response needs one (a response
	// whose head went out at WriteHeader never does).
	pending []byte
	pbuf    *[bufferBeforeChunking]byte
	werr    error
	scratch [64]byte
	sbuf    [8]byte
}

const bufferBeforeChunking = 2048

func (w *h1Writer) reset(req *http.Request) {
	hdr := w.header
	if hdr == nil || len(hdr) > 64 {
		hdr = make(http.Header, 16)
	}
	*w = h1Writer{c: w.c, req: req, header: hdr, contentLength: -1, trailers: w.trailers[:0]}
}

var pendingBufs = sync.Pool{New: func() any { return new([bufferBeforeChunking]byte) }}

// release returns the pending buffer at the response's end.
func (w *h1Writer) release() {
	if w.pbuf != nil {
		pendingBufs.Put(w.pbuf)
		w.pbuf, w.pending = nil, nil
	}
}

func (w *h1Writer) Header() http.Header {
	if w.snap == nil && w.wroteHeader && !w.committed {
		w.snap = w.header.Clone()
	}
	return w.header
}

func (w *h1Writer) WriteHeader(code int) {
	if w.wroteHeader {
		w.c.s.logf("http: superfluous response.WriteHeader call")
		return
	}
	if code < 100 || code > 999 {
		panic(fmt.Sprintf("invalid WriteHeader code %v", code))
	}
	if code >= 100 && code <= 199 && code != http.StatusSwitchingProtocols {
		bw := w.c.bw
		writeStatus(bw, code, w.sbuf[:])
		writeFields(bw, w.header, excludeNoBody, w.c)
		bw.WriteString("\r\n")
		w.noteErr(bw.Flush())
		return
	}
	w.wroteHeader = true
	w.status = code
	cl := headerGet(w.header, "Content-Length")
	if cl != "" {
		if v, err := strconv.ParseInt(cl, 10, 64); err == nil && v >= 0 {
			w.contentLength = v
		}
	}
	// When nothing written later can change the head (a length, a type
	// or an encoding, no Transfer-Encoding), it goes out now: the same
	// bytes as later, without net/http's clone of the header.
	_, haveType := w.header["Content-Type"]
	if w.contentLength != -1 && headerGet(w.header, "Transfer-Encoding") == "" &&
		(haveType || headerGet(w.header, "Content-Encoding") != "" || !bodyAllowedForStatus(code)) {
		w.commit(nil)
		return
	}
	w.snap = w.header.Clone()
	if cl != "" && w.contentLength == -1 {
		// As net/http: dropped from the handler's map, not from the
		// snapshot taken just before.
		w.c.s.logf("http: invalid Content-Length of %q", cl)
		delete(w.header, "Content-Length")
	}
}

func (w *h1Writer) bodyAllowed() bool { return bodyAllowedForStatus(w.status) }

func (w *h1Writer) Write(p []byte) (int, error) {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	if len(p) == 0 {
		return 0, nil
	}
	if !w.bodyAllowed() {
		return 0, http.ErrBodyNotAllowed
	}
	w.written += int64(len(p))
	if w.contentLength != -1 && w.written > w.contentLength {
		return 0, http.ErrContentLength
	}
	if w.committed && len(w.pending) == 0 && !w.chunking {
		return w.c.bw.Write(p)
	}
	// net/http's bufio.Writer of 2 KiB: what does not fit flushes it.
	if w.pbuf == nil {
		w.pbuf = pendingBufs.Get().(*[bufferBeforeChunking]byte)
		w.pending = w.pbuf[:0]
	}
	n := 0
	for len(p) > cap(w.pending)-len(w.pending) {
		if len(w.pending) == 0 {
			w.out(p)
			return n + len(p), w.werr
		}
		k := copy(w.pending[len(w.pending):cap(w.pending)], p)
		w.pending = w.pending[:len(w.pending)+k]
		n += k
		p = p[k:]
		w.flushPending()
	}
	w.pending = append(w.pending, p...)
	return n + len(p), w.werr
}

// out sends body bytes to the chunk writer: commit first, then a chunk.
func (w *h1Writer) out(p []byte) {
	if !w.committed {
		w.commit(p)
	}
	bw := w.c.bw
	if w.chunking {
		bw.Write(strconv.AppendInt(w.scratch[:0], int64(len(p)), 16))
		bw.WriteString("\r\n")
	}
	_, err := bw.Write(p)
	if w.chunking && err == nil {
		_, err = bw.WriteString("\r\n")
	}
	w.noteErr(err)
}

func (w *h1Writer) flushPending() {
	if len(w.pending) > 0 {
		w.out(w.pending)
		w.pending = w.pending[:0]
	}
}

func (w *h1Writer) noteErr(err error) {
	if err != nil && w.werr == nil {
		w.werr = err
		_ = w.c.rwc.Close()
	}
}

// FlushError sends what was written so far (http.ResponseController).
func (w *h1Writer) FlushError() error {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	w.flushPending()
	if !w.committed {
		w.commit(nil)
	}
	w.noteErr(w.c.bw.Flush())
	return w.werr
}

func (w *h1Writer) Flush() { _ = w.FlushError() }

// SetWriteDeadline sets the connection's write deadline, as net/http's
// response does for http.ResponseController; it may be called from another
// goroutine while the handler runs (a deadline in the past ends a write
// blocked on a client that does not read).
func (w *h1Writer) SetWriteDeadline(t time.Time) error { return w.c.rwc.SetWriteDeadline(t) }

// finish ends the response as net/http's finishRequest does.
func (w *h1Writer) finish() {
	w.handlerDone = true
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	w.flushPending()
	if !w.committed {
		w.commit(nil)
	}
	if w.chunking {
		bw := w.c.bw
		bw.WriteString("0\r\n")
		w.writeTrailers(bw)
		bw.WriteString("\r\n")
	}
}

func (w *h1Writer) writeTrailers(bw *bufio.Writer) {
	var t http.Header
	for k, vv := range w.header {
		if kk, found := strings.CutPrefix(k, http.TrailerPrefix); found {
			if t == nil {
				t = make(http.Header)
			}
			t[kk] = vv
		}
	}
	for _, k := range w.trailers {
		if t == nil {
			t = make(http.Header)
		}
		for _, v := range w.header[k] {
			t.Add(k, v)
		}
	}
	if t != nil {
		writeFields(bw, t, nil, w.c)
	}
}

// commit writes the status line and fields, deciding the framing, as
// net/http's chunkWriter.writeHeader does for a GET in HTTP/1.1; p is the
// first body bytes, sniffed for a Content-Type when none is set. One walk
// of the header map finds the fields the decisions read and the names to
// write (net/http walks it, then looks each of those up, then copies and
// sorts it).
func (w *h1Writer) commit(p []byte) {
	w.committed = true
	header := w.header
	if w.snap != nil {
		header = w.snap
	}
	c := w.c
	rq := c.rq
	keys := rq.keys[:0]
	trailers := false
	var te, ce, conn string
	var haveCL, haveType, haveDate bool
	var declared []string
	for k, vs := range header {
		if strings.HasPrefix(k, http.TrailerPrefix) {
			trailers = true // a trailer, never a field of the head
			continue
		}
		switch k {
		case "Transfer-Encoding":
			te = first(vs)
		case "Content-Length":
			haveCL = true
		case "Content-Type":
			haveType = true
		case "Content-Encoding":
			ce = first(vs)
		case "Connection":
			conn = first(vs)
		case "Date":
			haveDate = true
		case "Trailer":
			declared = vs
		}
		keys = append(keys, headerKV{k, vs})
	}
	for _, v := range declared {
		trailers = true
		for f := range strings.SplitSeq(v, ",") {
			if f = textproto.TrimString(f); f != "" {
				if k := http.CanonicalHeaderKey(f); httpguts.ValidTrailerHeader(k) {
					w.trailers = append(w.trailers, k)
				}
			}
		}
	}
	del := func(k string) {
		if i := slices.IndexFunc(keys, func(f headerKV) bool { return f.k == k }); i >= 0 {
			keys = slices.Delete(keys, i, i+1)
		}
	}
	hasTE := te != ""
	var clen []byte
	code := w.status
	if w.handlerDone && !trailers && !hasTE && bodyAllowedForStatus(code) && !haveCL {
		w.contentLength = int64(len(p))
		clen = strconv.AppendInt(w.scratch[:0], int64(len(p)), 10)
	}
	hasCL := w.contentLength != -1
	closing := c.s.closing.Load()
	if w.req.Close || conn == "close" || closing {
		w.closeAfter = true
	}
	var ctype, connection, tenc string
	if bodyAllowedForStatus(code) {
		if ce == "" && !haveType && !hasTE && len(p) > 0 {
			ctype = http.DetectContentType(p)
		}
	} else {
		del("Content-Length")
		del("Transfer-Encoding")
		if code == http.StatusNotModified {
			del("Content-Type")
		}
	}
	var date []byte
	if !haveDate {
		date = time.Now().UTC().AppendFormat(w.scratch[32:32], http.TimeFormat)
	}
	if hasCL && hasTE && te != "identity" {
		c.s.logf("http: WriteHeader called with both Transfer-Encoding of %q and a Content-Length of %d", te, w.contentLength)
		del("Content-Length")
		hasCL = false
	}
	switch {
	case !bodyAllowedForStatus(code) || code == http.StatusNoContent:
		del("Transfer-Encoding")
	case hasCL:
		del("Transfer-Encoding")
	case hasTE && te == "identity":
		w.chunking = false
		w.closeAfter = true
		del("Transfer-Encoding")
	default:
		w.chunking = true
		tenc = "chunked"
		if hasTE && te == "chunked" {
			del("Transfer-Encoding")
		}
	}
	if w.chunking {
		del("Content-Length")
	}
	switching := code == http.StatusSwitchingProtocols && header.Get("Upgrade") != "" &&
		httpguts.HeaderValuesContainsToken(header["Connection"], "Upgrade")
	if w.closeAfter && (closing || !hasToken(conn, "close")) && !switching {
		del("Connection")
		connection = "close"
	}
	bw := c.bw
	writeStatus(bw, code, w.sbuf[:])
	writeKeys(bw, keys)
	clear(keys)
	rq.keys = keys[:0]
	if date != nil {
		bw.WriteString("Date: ")
		bw.Write(date)
		bw.WriteString("\r\n")
	}
	if clen != nil {
		bw.WriteString("Content-Length: ")
		bw.Write(clen)
		bw.WriteString("\r\n")
	}
	for i, v := range [...]string{ctype, connection, tenc} {
		if v != "" {
			bw.WriteString(extraKeys[i])
			bw.WriteString(v)
			bw.WriteString("\r\n")
		}
	}
	bw.WriteString("\r\n")
}

func first(vs []string) string {
	if len(vs) > 0 {
		return vs[0]
	}
	return ""
}

var extraKeys = [...]string{"Content-Type: ", "Connection: ", "Transfer-Encoding: "}

var excludeNoBody = map[string]bool{"Content-Length": true, "Transfer-Encoding": true}

// headerGet is Header.Get for a canonical key, without canonicalising.
func headerGet(h http.Header, k string) string { return first(h[k]) }

// hasToken is net/http's: whether token appears in v, case-insensitively,
// at a token boundary.
func hasToken(v, token string) bool {
	if len(token) > len(v) || token == "" {
		return false
	}
	if v == token {
		return true
	}
	for sp := 0; sp <= len(v)-len(token); sp++ {
		if b := v[sp]; b != token[0] && b|0x20 != token[0] {
			continue
		}
		if sp > 0 && !isTokenBoundary(v[sp-1]) {
			continue
		}
		if endPos := sp + len(token); endPos != len(v) && !isTokenBoundary(v[endPos]) {
			continue
		}
		if strings.EqualFold(v[sp:sp+len(token)], token) {
			return true
		}
	}
	return false
}

func isTokenBoundary(b byte) bool { return b == ' ' || b == ',' || b == '\t' }

func bodyAllowedForStatus(status int) bool {
	return !(status >= 100 && status <= 199 || status == 204 || status == 304)
}

// writeStatus is net/http's status line for HTTP/1.1.
func writeStatus(bw *bufio.Writer, code int, scratch []byte) {
	bw.WriteString("HTTP/1.1 ")
	if text := http.StatusText(code); text != "" {
		bw.Write(strconv.AppendInt(scratch[:0], int64(code), 10))
		bw.WriteByte(' ')
		bw.WriteString(text)
		bw.WriteString("\r\n")
	} else {
		fmt.Fprintf(bw, "%03d status code %d\r\n", code, code)
	}
}

// writeFields is Header.WriteSubset: sorted by name, invalid names
// dropped, CR and LF in values turned to spaces, values trimmed. The
// sort uses the connection's scratch slice.
func writeFields(bw *bufio.Writer, h http.Header, exclude map[string]bool, c *h1Conn) {
	rq := c.rq
	keys := rq.keys[:0]
	for k, vs := range h {
		if !exclude[k] {
			keys = append(keys, headerKV{k, vs})
		}
	}
	writeKeys(bw, keys)
	clear(keys)
	rq.keys = keys[:0]
}

// headerKV is a field of a header map: its name and values.
type headerKV struct {
	k  string
	vs []string
}

// writeKeys writes the fields, which it sorts by name, as net/http does.
// A value without CR, LF or spaces and tabs at its ends (what the lean
// parser and tether's own fields give) goes out as it is; any other takes
// WriteSubset's steps. Each line is one append to the buffer.
func writeKeys(bw *bufio.Writer, keys []headerKV) {
	sortKeys(keys)
	for _, f := range keys {
		k := f.k
		if !httpguts.ValidHeaderFieldName(k) {
			continue
		}
		for _, v := range f.vs {
			if !plainValue(v) {
				if strings.ContainsAny(v, "\r\n") {
					v = headerNewlineToSpace.Replace(v)
				}
				v = textproto.TrimString(v)
			}
			h1wire.WriteField(bw, k, v)
		}
	}
}

// sortKeys sorts fields by name: an insertion sort for the few fields of
// a usual head, without the comparison function's call per step.
func sortKeys(keys []headerKV) {
	if len(keys) > 12 {
		slices.SortFunc(keys, func(a, b headerKV) int { return strings.Compare(a.k, b.k) })
		return
	}
	for i := 1; i < len(keys); i++ {
		for j := i; j > 0 && keys[j].k < keys[j-1].k; j-- {
			keys[j], keys[j-1] = keys[j-1], keys[j]
		}
	}
}

// plainValue: v has no CR or LF and no space or tab at either end, so
// WriteSubset would write it unchanged.
func plainValue(v string) bool {
	if v == "" {
		return true
	}
	if c := v[0]; c == ' ' || c == '\t' {
		return false
	}
	if c := v[len(v)-1]; c == ' ' || c == '\t' {
		return false
	}
	for i := 0; i < len(v); i++ {
		if c := v[i]; c == '\r' || c == '\n' {
			return false
		}
	}
	return true
}

var headerNewlineToSpace = strings.NewReplacer("\n", " ", "\r", " ")

// Interface guards.
var (
	_ http.ResponseWriter = (*h1Writer)(nil)
	_ http.Flusher        = (*h1Writer)(nil)
	_ net.Listener        = (*handoffListener)(nil)
)
