package h1server

import (
	"context"
	"errors"
	"net"
	"net/http"
	goruntime "runtime"
	"time"

	"github.com/tether-proxy/tether/proxy/internal/cancelhook"
	"github.com/tether-proxy/tether/proxy/internal/h1wire"
	"github.com/tether-proxy/tether/proxy/internal/monotime"
	"github.com/tether-proxy/tether/proxy/internal/sockio"
)

// A connection's loop: serve reads a request head, runs the handler and
// finishes the response, step by step, until the connection waits, parks,
// is handed off or closes.

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
	head, fields, status := c.readHead(st.first)
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
	if !parseRequestHeadInto(head, fields, &rq.req, &rq.scratch) {
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
// unconsumed, with its field lines (h1wire.HeadLines).
func (c *h1Conn) readHead(first bool) ([]byte, int, int) {
	want := 1
	for {
		buf, err := c.br.Peek(want)
		if len(buf) > 0 {
			buf, _ = c.br.Peek(c.br.Buffered())
			if i, n := h1wire.HeadLines(buf); i >= 0 {
				return buf[:i], n, headOK
			}
			if first && len(buf) >= 3 && string(buf[:3]) != "GET" {
				return nil, 0, headOther // not even a GET (an h2c preface, say)
			}
		}
		if err != nil {
			if err == sockio.ErrNotYet && c.br.Buffered() == 0 {
				return nil, 0, headNone
			}
			var ne net.Error
			if c.br.Buffered() == 0 || errors.As(err, &ne) && ne.Timeout() {
				return nil, 0, headGone // as net/http: closed or timed out, no answer
			}
			return nil, 0, headOther // a head cut short: net/http answers it
		}
		if c.br.Buffered() >= c.br.Size() {
			return nil, 0, headOther // larger than the buffer
		}
		if want == 1 && c.s.headers > 0 {
			// A head in pieces: from its first byte it has the header
			// timeout, not what is left of the idle one.
			c.setReadDeadline(time.Now().Add(c.s.headers))
		}
		want = c.br.Buffered() + 1
	}
}

// serveRequest runs the handler for req and finishes its response in the
// connection's buffer; false when the connection is to be closed.
func (c *h1Conn) serveRequest(r *http.Request) (keep bool) {
	ctx := cancelhook.NewCtx(c.ctx, &c.hook)
	ctx.SetParsed(c.rq.scratch.head)
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
	start := time.Now() // the handler's too (cancelhook.Loop)
	now := monotime.Of(start)
	ctx.SetStart(start)
	c.wmu.Lock()
	c.rctx, c.wstate = ctx, watchOff
	if watch {
		c.wstate = watchArmed
		c.wdue = now + int64(c.s.watch)
		if c.tdue == 0 {
			// The timer is idle. Else it is due no later than this
			// watch (an earlier request's) and sets itself again for it
			// (watchClient): no timer update per request.
			c.tdue = c.wdue
			c.watch.Reset(c.s.watch)
		}
	}
	c.wmu.Unlock()
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
		if len(w.header) > h1wire.MaxFields {
			w.header, w.vals = nil, nil // grown by one large head: not kept
		} else {
			clear(w.header)
		}
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
