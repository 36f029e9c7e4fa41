package h1server

import (
	"syscall"
	"time"

	"github.com/tether-proxy/tether/proxy/internal/monotime"
)

// A connection that keeps coming back waits for its next request on a
// second descriptor of its socket (a dup, registered with the poller on
// its own), inside one RawConn.Read that spans all its later requests.
//
// Why: RawConn.Read, and every Read of the connection, resets the
// descriptor's readiness before it looks, so a wait on the connection's
// own descriptor must first look for bytes that came while the handler
// ran (peekWait's MSG_PEEK), and the read that follows the wake-up is a
// second system call: two per request where HAProxy, with epoll of its
// own, makes one. The second descriptor's readiness is reset once, when
// its RawConn.Read begins, and never again while the connection lives:
// bytes or an EOF that arrive while a request is served mark it ready, so
// its wait returns at once (a pipelined request, a half-close), and
// otherwise parks until they come. After the wake-up the head's first
// read is one recv(2) that does not wait (readNow): it finds the bytes,
// or nothing when the readiness was for bytes an earlier read already
// took, and then the callback returns false to wait again, without a
// reset. The connection's own descriptor serves every other read (the
// rest of a head in pieces, the client watch) and every write as before.
//
// What it costs: a dup and a poller registration when the connection has
// answered waitAfter requests, and their undoing at its close, so
// connections that make a few requests never pay for it; a descriptor per
// such connection, at most a quarter of the process's limit (waitCap).
// The socket closes only when both descriptors are closed, so every close
// of the connection's goroutine closes the wait's first (closeWait), and
// another goroutine's close shuts the socket down (closeOutside).
// Connections that are not a TCP socket of their own (a pipe in a test)
// keep peekWait.

// waitAfter is how many requests a connection answers before it gets the
// second descriptor.
const waitAfter = 4

// wait waits for the next request and serves the connection from there;
// true when the connection is done (served to its end, or handed off,
// inside the wait).
func (c *h1Conn) wait(st *h1Loop) (done bool) {
	if !c.openWait() { // serve parks a connection of fewer requests
		c.peekWait()
		return false
	}
	c.prepareWait()
	err := c.wraw.Read(func(fd uintptr) bool {
		for {
			c.takeBufs()
			if c.br.Buffered() == 0 && !c.stashed {
				c.readNow, c.nowFd = true, fd
			}
			r := c.step(st)
			c.readNow = false
			switch r {
			case stepNext:
				continue
			case stepWait:
				c.prepareWait()
				return false // the poller waits, without a reset
			}
			done = true
			return true
		}
	})
	if err != nil && !done {
		// The wait failed (its deadline, a close): the next read, on the
		// connection's own descriptor, tells why, and later waits peek.
		c.closeWait()
		c.takeBufs()
	}
	return done
}

// openWait gives the connection its second descriptor once; false when it
// has none (not a socket of its own, a dup that failed, a shutdown).
func (c *h1Conn) openWait() bool {
	if c.wraw != nil {
		return c.wf.Load() != nil
	}
	if c.tcp == nil {
		return false
	}
	if c.s.waitFiles.Add(1) > c.s.waitCap {
		c.s.waitFiles.Add(-1)
		c.tcp = nil
		return false
	}
	f, err := c.tcp.File()
	var raw syscall.RawConn
	if err == nil {
		if raw, err = f.SyscallConn(); err != nil {
			f.Close()
		}
	}
	if err != nil {
		c.s.waitFiles.Add(-1)
		c.tcp = nil
		return false
	}
	c.wraw = raw
	c.wf.Store(f)
	// A shutdown that looked for the descriptor before it was there
	// (closeOutside) closed the connection only: close this one as well.
	// In the other order, the shutdown finds it.
	if c.state.Load() == h1Closed || c.s.closing.Load() {
		c.closeWait()
		return false
	}
	c.idleUntil = 0 // armIdle sets the new descriptor's deadline too
	c.s.sweepOnce.Do(func() { go c.s.sweep() })
	return true
}

// parkAfter is how long a connection waits on its second descriptor, on
// the goroutine that served it (whose stack the request path grew to
// 8 KiB), before it is parked as a new connection is after each of its
// first requests (h1Conn.park): a long-lived connection that has gone
// quiet gives back its descriptor and the stack.
const parkAfter = 10 * time.Second

// sweep looks, every half of parkAfter until the server shuts down, for
// connections idle on their second descriptor for parkAfter or longer,
// and ends their wait (a deadline in the past on that descriptor) with
// parkAsked set: their goroutine then closes the descriptor and parks
// the connection. A wait the deadline ends just as a request comes parks
// a busy connection, which the request's bytes wake at once.
func (s *Server) sweep() {
	t := time.NewTicker(s.parkAfter / 2)
	defer t.Stop()
	for {
		select {
		case <-s.quit:
			return
		case <-t.C:
		}
		now := monotime.Now()
		s.mu.Lock()
		for c := range s.conns {
			// waitSince is 0 without an idle timeout (armIdle sets it):
			// such connections are not parked.
			since := c.waitSince.Load()
			if c.state.Load() != h1Idle || since == 0 || now-since < int64(s.parkAfter) {
				continue
			}
			if wf := c.wf.Load(); wf != nil && !c.parkAsked.Load() {
				c.parkAsked.Store(true)
				_ = wf.SetReadDeadline(aLongTimeAgo)
			}
		}
		s.mu.Unlock()
	}
}

// closeWait closes the second descriptor, if any: by the connection's
// own goroutine, outside the descriptor's RawConn.Read (a Close waits for
// the Read to end).
func (c *h1Conn) closeWait() {
	if f := c.wf.Swap(nil); f != nil {
		_ = f.Close()
		c.s.waitFiles.Add(-1)
	}
}

// waitFileCap is a quarter of the process's descriptor limit (Go raises
// the soft limit to the hard one at start): the second descriptors never
// take the ones new connections need. Past it, connections peek.
func waitFileCap() int64 {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		return 0
	}
	return int64(min(rl.Cur/4, 1<<40))
}

// closeOutside closes the connection from another goroutine (a
// shutdown). With a second descriptor, closing the connection's own would
// leave the socket open, and the Close of the second would wait for the
// goroutine's RawConn.Read: the socket is shut down instead, which ends
// the connection and wakes the wait (an EOF), and the connection's
// goroutine closes the second descriptor when it sees the end.
//
// A connection parked on the poller is taken back from it first, while
// its descriptor is open, and handed to a worker after the close, whose
// read ends it.
func (c *h1Conn) closeOutside() {
	parked := c.unparkOutside()
	if c.wf.Load() != nil {
		_ = c.tcp.CloseRead()
		_ = c.tcp.CloseWrite()
	}
	_ = c.rwc.Close()
	if parked {
		c.resume()
	}
}
