package h1server

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"net"
	"net/http"
	"net/url"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/tether-proxy/tether/proxy/internal/cancelhook"
	"github.com/tether-proxy/tether/proxy/internal/monotime"
	"github.com/tether-proxy/tether/proxy/internal/sockio"
)

// A client connection's state between and during requests: its buffers,
// taken only while it reads or writes, its waits for the next request and
// its park, and the client watch that cancels a request whose client went.

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
	// br and bw are bufs's while the connection holds them (takeBufs).
	br    *bufio.Reader
	bw    *bufio.Writer
	bufs  *h1Bufs
	src   h1Source
	hook  cancelhook.Hook // the lean transport's close-on-cancel
	state atomic.Int32
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
	// (timerFired): the two never run at once. Under wmu: wdue, when the
	// armed request's watch is due (monotime.Now); tdue, when the timer is
	// set to fire for a watch, 0 when it is not (it fired, or a park
	// took it). A request's end leaves the timer set.
	watch   *time.Timer
	wmu     sync.Mutex
	wstate  int // watchOff, watchArmed, watchReading
	wdue    int64
	tdue    int64
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
	rq.scratch.head = ""
	rq.req = http.Request{}
	rq.w.c = nil
	clear(rq.w.trailers[:cap(rq.w.trailers)])
	clear(rq.w.vals) // the last response's head, to the collector
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

// h1Bufs holds a connection's read and write buffers, taken and given
// back together: one pool round trip per wait for both.
type h1Bufs struct {
	br *bufio.Reader
	bw *bufio.Writer
}

var h1BufPool = sync.Pool{New: func() any {
	return &h1Bufs{br: bufio.NewReaderSize(nil, h1BufSize), bw: bufio.NewWriterSize(nil, h1BufSize)}
}}

// takeBufs gives the connection its read and write buffers.
func (c *h1Conn) takeBufs() {
	if c.bufs != nil {
		return
	}
	c.s.bufsHeld.Add(1)
	b := h1BufPool.Get().(*h1Bufs)
	b.br.Reset(&c.src)
	b.bw.Reset(c.rwc)
	c.bufs, c.br, c.bw = b, b.br, b.bw
}

// dropBufs returns the empty buffers to their pool while the connection
// waits for its next request. What a buffer still holds (the writer's,
// after a fault of the loop's, which sets bw to nil so as not to send it)
// is dropped.
func (c *h1Conn) dropBufs() {
	b := c.bufs
	if b == nil {
		return
	}
	c.s.bufsHeld.Add(-1)
	b.br.Reset(nil)
	b.bw.Reset(nil)
	h1BufPool.Put(b)
	c.bufs, c.br, c.bw = nil, nil, nil
}

// timerFired is the watch timer's: the idle deadline of a connection
// parked on the poller, else the client watch. A firing that was due
// before the timer was set again finds the park's deadline not yet come,
// or the watch not armed or not yet due (watchClient), and does nothing
// but set the timer for the armed watch.
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
	c.tdue = 0
	if c.wstate != watchArmed {
		c.wmu.Unlock()
		return // idle until the next request sets it
	}
	if now := monotime.Now(); now < c.wdue {
		// Set for an earlier request's watch: again, for this one's.
		c.tdue = c.wdue
		c.watch.Reset(time.Duration(c.wdue - now))
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

// endWatch disarms the client watch and, when it is reading, ends the
// read and waits for it. The timer stays set: a firing finds no watch
// armed, or the next request's, which it waits for.
func (c *h1Conn) endWatch() {
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
