package proxy

import (
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tether-proxy/tether/proxy/internal/monotime"
)

// This file keeps clients from turning their own faults into backend
// faults: a failing request body is blamed on the client, never on the
// destination (which passive health would then exclude). Requests tether
// cannot forward faithfully are refused before routing (package hygiene).

// Client body failures, recorded by clientBody.
const (
	bodyOK int32 = iota
	bodyFailed
	bodyTimedOut
	// bodyTooSlow: slower than Limits.MinRequestBodyDataRate (rate.go).
	bodyTooSlow
)

// clientBody wraps the client's request body on its way to the backend: it
// records whether reading it failed (a malformed chunked body, a short
// HTTP/2 body) and extends an idle deadline on the client connection with
// every read, so a stalled upload cannot pin a backend connection for
// longer than the cluster's ActivityTimeout. It is allocated per request,
// apart from the pooled request state, because the transport may still read
// the body after the handler returned.
type clientBody struct {
	rc    io.ReadCloser
	ctl   *http.ResponseController
	idle  time.Duration
	state atomic.Int32

	// mu orders deadline changes against the handler's return: the
	// transport may still read after it, and a deadline set then would land
	// on the connection's next request.
	mu   sync.Mutex
	done bool
	// uploaded: the body reached EOF, so no deadline is needed any more.
	uploaded bool
	// armed is when the deadline was last pushed (UnixNano).
	armed atomic.Int64
	// h1: the request came over HTTP/1.x; eof: its body was read to the end.
	h1  bool
	eof atomic.Bool

	// rate is Limits.MinRequestBodyDataRate (none for an exempt request);
	// bytes read so far, the time spent in reads that have returned
	// (readNanos) and the start of the read in progress (readStart, 0
	// between reads), in monotime, for the heartbeat (rate.go).
	rate      dataRate
	bytes     atomic.Int64
	readNanos atomic.Int64
	readStart atomic.Int64
}

// mustClose reports whether the response to this request must close the
// connection: an HTTP/1 upload not read to its end when the response
// starts. net/http (golang/go#68560) would otherwise read the rest after
// the handler returned and, in full-duplex mode, start its background read
// too late, then panic reading the next request on the connection. Closing
// is also what net/http does without full duplex when it cannot swallow the
// rest, and what a client that is still uploading expects.
func (b *clientBody) mustClose() bool { return b.h1 && !b.eof.Load() }

// touch is activity in either direction (a response write, too): like
// YARP's ActivityTimeout, a full-duplex stream whose client pauses its
// upload while the response flows is not idle.
func (b *clientBody) touch() {
	now := time.Now()
	if now.UnixNano()-b.armed.Load() > int64(b.idle/8) {
		b.setDeadline(now.Add(b.idle))
	}
}

func (b *clientBody) Read(p []byte) (int, error) {
	if b.state.Load() == bodyTooSlow {
		return 0, errBodyTooSlow
	}
	timed := b.rate.on()
	if timed {
		b.readStart.Store(monotime.Now())
	}
	b.touch()
	n, err := b.rc.Read(p)
	if timed {
		b.bytes.Add(int64(n))
		end := monotime.Now()
		b.readNanos.Add(end - b.readStart.Swap(0))
	}
	if err == io.EOF {
		b.eof.Store(true)
		// Uploaded: a long response must not be cut by an upload deadline.
		b.setDeadline(time.Time{})
	}
	if err != nil && err != io.EOF {
		var mbe *http.MaxBytesError
		switch {
		case errors.As(err, &mbe):
			// classify answers 413 from the error itself.
		case errors.Is(err, os.ErrDeadlineExceeded):
			b.state.CompareAndSwap(bodyOK, bodyTimedOut) // or it was too slow
		default:
			b.state.CompareAndSwap(bodyOK, bodyFailed)
		}
	}
	return n, err
}

// errBodyTooSlow is a read of a body already found too slow.
var errBodyTooSlow = errors.New("request body slower than the minimum data rate")

func (b *clientBody) setDeadline(t time.Time) {
	if b.idle <= 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.done || b.uploaded {
		return
	}
	if t.IsZero() {
		b.uploaded = true
	}
	b.armed.Store(time.Now().UnixNano())
	_ = b.ctl.SetReadDeadline(t)
}

// finish is called as the handler returns: later reads (the transport may
// still be writing the body) leave the connection's deadline alone. A
// deadline already set stays, so net/http's discarding of an unread body
// after the handler cannot hang on a stalled client; net/http sets its own
// deadlines for the connection's next request.
func (b *clientBody) finish() {
	b.mu.Lock()
	b.done = true
	b.mu.Unlock()
}

func (b *clientBody) Close() error { return b.rc.Close() }

// idleConn is a backend connection with an idle read timeout: each read
// extends the deadline, so a backend that stops sending in the middle of a
// response is cut after the cluster's ActivityTimeout (YARP's meaning of it)
// instead of pinning the client and the connection forever.
type idleConn struct {
	net.Conn
	idle time.Duration
	// armed is when the deadline was last pushed (arm's clock): pushing it on
	// every read would cost a timer update per read.
	armed atomic.Int64
}

func (c *idleConn) Read(p []byte) (int, error) {
	c.arm()
	return c.Conn.Read(p)
}

// Write counts as activity too: a pooled connection picked for a new
// request gets a fresh idle window for its answer, even though the
// transport's read on it started long before.
func (c *idleConn) Write(p []byte) (int, error) {
	c.arm()
	return c.Conn.Write(p)
}

// WriteNow is Write with the caller's clock reading (lean.NowWriter).
func (c *idleConn) WriteNow(p []byte, now int64) (int, error) {
	c.armAt(now)
	return c.Conn.Write(p)
}

func (c *idleConn) arm() { c.armAt(monotime.Now()) }

// armAt pushes the read deadline to now+idle, at most every idle/8.
func (c *idleConn) armAt(now int64) {
	if now-c.armed.Load() > int64(c.idle/8) {
		c.armed.Store(now)
		_ = c.Conn.SetReadDeadline(time.Now().Add(c.idle))
	}
}

// NetConn is the connection underneath (the lean path reaches its socket
// through it).
func (c *idleConn) NetConn() net.Conn { return c.Conn }

// SetReadDeadline and SetDeadline let the transport and TLS set their own
// deadlines; the next read re-arms the idle deadline.
func (c *idleConn) SetReadDeadline(t time.Time) error {
	c.armed.Store(0)
	return c.Conn.SetReadDeadline(t)
}

func (c *idleConn) SetDeadline(t time.Time) error {
	c.armed.Store(0)
	return c.Conn.SetDeadline(t)
}
