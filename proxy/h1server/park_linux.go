package h1server

import (
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/tether-proxy/tether/proxy/internal/monotime"
)

// A parked connection (h1Conn.park) waits on an epoll instance of the
// loop's own rather than on a goroutine: while it is idle it holds no
// goroutine, no stack and no buffer, only its h1Conn and its socket. One
// goroutine per process waits for all of them and hands a connection
// whose bytes (or EOF) came to a worker, as parkWait's goroutine did. It
// waits on Go's poller, for the epoll descriptor to be readable (an
// epoll instance is, while it has events), inside one RawConn.Read that
// never resets that readiness (as wait does, wait.go), and takes the
// events with an epoll_wait that does not block: a wake-up is the
// scheduler's, not a thread's coming back from a blocking system call. The registration is level-triggered and one-shot, so
// bytes or an EOF that came while the last response was written (a
// pipelined request, a half-close) wake the connection as soon as it is
// registered, without parkWait's peek.
//
// The idle deadline is the connection's read deadline as before; nothing
// wakes an epoll wait at a deadline, so the connection's timer (the one
// its client watch uses while a request runs) hands it to a worker then,
// whose read fails on the deadline and closes it. A
// shutdown takes a parked connection back from the poller before it
// closes it (closeOutside), for the same read to end it.
//
// Why not Go's own poller: it wakes a goroutine, which is what a parked
// connection is not to have.

// h1Poller is the process's epoll instance for parked connections.
type h1Poller struct {
	epfd int
	f    *os.File // epfd, registered with Go's poller
	raw  syscall.RawConn
	// mu orders parks and unparks: a registration and its token are
	// added and removed together, so an event, a timer or a shutdown
	// takes a connection back once, and an event from an earlier park
	// (its token gone) is ignored.
	mu     sync.Mutex
	next   uint64
	parked map[uint64]*h1Conn
}

var (
	h1PollOnce sync.Once
	// h1Poll is nil when epoll is not to be had (parkWait then). Atomic:
	// a close from another goroutine reads it without the Once.
	h1Poll atomic.Pointer[h1Poller]
)

func h1PollerOf() *h1Poller {
	h1PollOnce.Do(func() {
		fd, err := syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
		if err != nil {
			return
		}
		// Non-blocking, so that os.NewFile registers it with Go's poller.
		if err := syscall.SetNonblock(fd, true); err != nil {
			syscall.Close(fd)
			return
		}
		f := os.NewFile(uintptr(fd), "h1-poller")
		raw, err := f.SyscallConn()
		if err != nil {
			f.Close()
			return
		}
		p := &h1Poller{epfd: fd, f: f, raw: raw, parked: map[uint64]*h1Conn{}}
		h1Poll.Store(p)
		go p.loop()
	})
	return h1Poll.Load()
}

// parkPoll parks c on the poller, after prepareWait; false when it cannot
// (no epoll, no idle deadline to end the wait, a socket already closed),
// and the caller parks it on a goroutine.
func (c *h1Conn) parkPoll() bool {
	if c.raw == nil || c.idleUntil == 0 {
		return false
	}
	p := h1PollerOf()
	if p == nil {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.next++
	tok := p.next
	ev := syscall.EpollEvent{Events: syscall.EPOLLIN | syscall.EPOLLRDHUP | epollOneShot, Fd: int32(uint32(tok)), Pad: int32(uint32(tok >> 32))}
	var err error
	if cerr := c.raw.Control(func(fd uintptr) {
		err = syscall.EpollCtl(p.epfd, syscall.EPOLL_CTL_ADD, int(fd), &ev)
	}); cerr != nil || err != nil {
		return false
	}
	p.parked[tok] = c
	c.parkTok, c.parkUntil = tok, c.idleUntil
	c.onPoll.Store(true)
	c.wmu.Lock()
	// The timer is the park's now: the next request sets it for its watch.
	c.tdue = 0
	c.watch.Reset(time.Duration(c.idleUntil - monotime.Now())) // timerFired
	c.wmu.Unlock()
	return true
}

// epollOneShot is EPOLLONESHOT (syscall's constant is an int of another
// sign on some platforms).
const epollOneShot = 1 << 30

// takeLocked takes a connection back from the poller, under mu: the one
// parked under tok, or c under whatever token it is (tok 0); nil when
// there is none (another took it first, or the park is over). The caller
// then owns it and hands it to a worker (h1Conn.resume).
func (p *h1Poller) takeLocked(tok uint64, c *h1Conn) *h1Conn {
	if c != nil {
		tok = c.parkTok
	}
	pc := p.parked[tok]
	if tok == 0 || pc == nil || c != nil && pc != c {
		return nil
	}
	delete(p.parked, tok)
	pc.parkTok = 0
	pc.onPoll.Store(false)
	// Before any close of the connection's (closeOutside takes it back
	// first), so the descriptor is still its own.
	_ = pc.raw.Control(func(fd uintptr) {
		_ = syscall.EpollCtl(p.epfd, syscall.EPOLL_CTL_DEL, int(fd), nil)
	})
	pc.watch.Stop()
	return pc
}

// loop hands each connection whose socket is readable to a worker. Its
// callback returns false, for Go's poller to wait again without a reset,
// whenever epoll_wait finds nothing; the Read never ends (the descriptor
// is never closed).
func (p *h1Poller) loop() {
	evs := make([]syscall.EpollEvent, 128)
	for {
		_ = p.raw.Read(func(fd uintptr) bool {
			for {
				n, err := syscall.EpollWait(int(fd), evs, 0)
				if err == syscall.EINTR {
					continue
				}
				if n <= 0 {
					return false
				}
				p.dispatch(evs[:n])
			}
		})
	}
}

// dispatch hands each connection an event is for to a worker.
func (p *h1Poller) dispatch(evs []syscall.EpollEvent) {
	for _, ev := range evs {
		tok := uint64(uint32(ev.Fd)) | uint64(uint32(ev.Pad))<<32
		p.mu.Lock()
		c := p.takeLocked(tok, nil)
		p.mu.Unlock()
		if c != nil {
			c.resume()
		}
	}
}

// parkExpired ends c's park at its idle deadline (timerFired): a
// worker's read of c then fails on it. A firing of an earlier park's, or
// of an earlier request's watch, finds the present deadline not yet due.
func (c *h1Conn) parkExpired() {
	p := h1Poll.Load()
	p.mu.Lock()
	var pc *h1Conn
	if c.parkTok != 0 && monotime.Now() >= c.parkUntil {
		pc = p.takeLocked(0, c)
	}
	p.mu.Unlock()
	if pc != nil {
		pc.resume()
	}
}

// unparkOutside takes c back from the poller for a close from another
// goroutine (closeOutside): true when it was parked there, and the
// caller hands it to a worker (resume) after the close.
func (c *h1Conn) unparkOutside() bool {
	p := h1Poll.Load()
	if p == nil {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.takeLocked(0, c) != nil
}
