package sockio

import (
	"crypto/tls"
	"errors"
	"io"
	"net"
	"os"
	goruntime "runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"
)

// Conn is a TCP connection whose Read and Write are raw recv(2) and
// send(2) inside RawConn.Read and RawConn.Write, where net.TCPConn's use
// syscall.Read and syscall.Write. Every connection tether accepts
// (Listener) or dials (Wrap in the transports' DialContext) is
// one, under whatever wraps it (TLS, the connection cap, the activity
// timeout), so each wrapper keeps its meaning.
//
// Why: syscall.Read and syscall.Write tell the scheduler a system call is
// under way, and when one lasts past a sysmon tick (20 µs; a loopback
// write that wakes its reader on the other core often does) sysmon takes
// the P away and starts another thread to run the other goroutines. On a
// proxy with one core that is a thread switch for nothing: the new thread
// waits for the core the write holds, and the writer, back from the kernel,
// finds its P gone, queues its goroutine globally and sleeps. A
// non-blocking socket's read or write never waits (EAGAIN comes back, and
// the poller waits as net.TCPConn's would), so keeping the P through it
// delays nothing that could run meanwhile on that P.
//
// Deadlines, closes and readiness are RawConn's, so they behave as
// net.TCPConn's; errors are *net.OpError with Op "read" or "write" around
// the same causes (os.SyscallError, os.ErrDeadlineExceeded, net.ErrClosed);
// a deadline that has passed stops a call before its system call, as it
// does net.TCPConn's (RawConn checks it first). What differs is only what
// the race detector sees: syscall.Read and Write mark a happens-before
// edge between a write and a later read in the process, these do not.
type Conn struct {
	*net.TCPConn
	raw  syscall.RawConn
	r, w call
}

// call is one direction's call under way: a mutex keeps Conn's
// promise that methods may be called from several goroutines at once.
type call struct {
	mu    sync.Mutex
	p     []byte
	n     int
	errno syscall.Errno
	fn    func(fd uintptr) bool
}

// Wrap wraps c when it is a TCP connection; anything else (a
// test's pipe, a Unix socket) is returned as it is.
func Wrap(c net.Conn) net.Conn {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return c
	}
	raw, err := tc.SyscallConn()
	if err != nil {
		return c
	}
	s := &Conn{TCPConn: tc, raw: raw}
	s.r.fn, s.w.fn = s.r.read, s.w.write
	return s
}

// NetConn is the TCP connection s reads and writes.
func (s *Conn) NetConn() net.Conn { return s.TCPConn }

// SyscallConn is the RawConn s already holds: the embedded TCPConn's
// would build a new one on each call (the own loop and the lean pool each
// ask once per connection, through rawConnOf).
func (s *Conn) SyscallConn() (syscall.RawConn, error) { return s.raw, nil }

func (s *Conn) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	n, errno, err := s.r.do(p, s.raw.Read)
	switch {
	case err != nil:
		return 0, s.opError("read", err)
	case errno != 0:
		return 0, s.opError("read", os.NewSyscallError("read", errno))
	case n == 0:
		return 0, io.EOF
	}
	return n, nil
}

// do makes one call with p through rawCall (RawConn's Read or Write).
func (c *call) do(p []byte, rawCall func(func(uintptr) bool) error) (int, syscall.Errno, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.p, c.n, c.errno = p, 0, 0
	err := rawCall(c.fn)
	c.p = nil
	return c.n, c.errno, err
}

func (c *call) read(fd uintptr) bool {
	n, e := ReadFd(fd, c.p)
	switch e {
	case 0:
		c.n = n
		return true
	case syscall.EAGAIN:
		return false // the poller waits, then calls again
	}
	c.errno = e
	return true
}

// ReadFd is one recv(2) of fd (a socket) into p (not empty), again after
// EINTR; it never waits (EAGAIN).
//
// recv and send, not read and write: a socket's read(2) and write(2) go
// through the file layer first (the file position's lock, the access
// checks of a file write), which a proxy pays twice per direction per
// request for nothing; recvfrom and sendto go to the socket at once.
func ReadFd(fd uintptr, p []byte) (int, syscall.Errno) {
	for {
		r, _, e := syscall.RawSyscall6(syscall.SYS_RECVFROM, fd, uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)), 0, 0, 0)
		if e != syscall.EINTR {
			return int(r), e
		}
	}
}

// writeYield: a write first yields the P. A write wakes its reader (the
// client, the backend) when the reader sleeps on another CPU, and on a
// virtual machine whose interrupts are not posted each such wake-up is an
// inter-processor interrupt and a VM exit, paid by the writer inside
// write(2); the woken CPU then has one response to handle and sleeps
// again. Writes that leave together wake it once and find it busy after,
// as HAProxy's, whose event loop handles every ready event before it
// sends. The cost is a trip through the scheduler when nothing else is
// runnable, and some latency under a partial load: a write waits for the
// work of the goroutines ahead of it in the round (proxy/DESIGN.md,
// "Sockets and the scheduler").
//
// It is on when the process runs on one P (GOMAXPROCS 1 at start: one CPU,
// a CPU set of one, or GOMAXPROCS=1 in the environment; a cgroup's CPU
// quota alone leaves Go at 2 or more), where it was measured. With more Ps
// a yielded goroutine goes through the scheduler's global queue, under its
// one lock, and the other Ps run the round in parallel anyway, so it stays
// off there. SetWriteYield (proxy.SetWriteYield, --write-yield) decides
// instead. Atomic only so
// that a test may flip it while other connections write.
var writeYield atomic.Bool

func init() {
	writeYield.Store(goruntime.GOMAXPROCS(0) == 1)
}

// SetWriteYield turns the yield before each write on or off for every
// Conn of the process from now on.
func SetWriteYield(on bool) { writeYield.Store(on) }

// WriteYield says whether a write first yields.
func WriteYield() bool { return writeYield.Load() }

func (s *Conn) Write(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	if writeYield.Load() {
		// The goroutines already runnable on this P go first, up to their
		// own writes, so that a scheduling round's writes leave back to
		// back (see writeYield).
		goruntime.Gosched()
	}
	n, errno, err := s.w.do(p, s.raw.Write)
	switch {
	case errno != 0:
		return n, s.opError("write", os.NewSyscallError("write", errno))
	case err != nil:
		return n, s.opError("write", err)
	}
	return n, nil
}

func (c *call) write(fd uintptr) bool {
	for c.n < len(c.p) {
		r, _, e := syscall.RawSyscall6(syscall.SYS_SENDTO, fd, uintptr(unsafe.Pointer(&c.p[c.n])), uintptr(len(c.p)-c.n), sendFlags, 0, 0)
		switch e {
		case 0:
			c.n += int(r)
		case syscall.EINTR:
		case syscall.EAGAIN:
			return false
		default:
			c.errno = e
			return true
		}
	}
	return true
}

// opError is err as net.TCPConn's Read or Write would return it.
func (s *Conn) opError(op string, err error) error {
	var oe *net.OpError
	if errors.As(err, &oe) {
		err = oe.Err // RawConn's own ("raw-read", "raw-write")
	}
	return &net.OpError{Op: op, Net: "tcp", Source: s.LocalAddr(), Addr: s.RemoteAddr(), Err: err}
}

// Listener accepts sockConns.
type Listener struct{ net.Listener }

func (l Listener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return Wrap(c), nil
}

// RawConnOf is the socket under c, through wrappers that name it with a
// NetConn method; nil when there is none (a pipe).
func RawConnOf(c net.Conn) syscall.RawConn {
	for {
		if sc, ok := c.(syscall.Conn); ok {
			if raw, err := sc.SyscallConn(); err == nil {
				return raw
			}
			return nil
		}
		w, ok := c.(interface{ NetConn() net.Conn })
		if !ok {
			return nil
		}
		c = w.NetConn()
	}
}

// NothingToRead peeks at fd without blocking (one recv(MSG_PEEK|
// MSG_DONTWAIT) into buf, one byte): true when nothing is there yet, false
// on bytes, an EOF or an error. It is a raw system call for Conn's
// reason: it cannot block, so the scheduler need not hear of it.
func NothingToRead(fd uintptr, buf []byte) bool {
	_, _, e := syscall.RawSyscall6(syscall.SYS_RECVFROM, fd, uintptr(unsafe.Pointer(&buf[0])), uintptr(len(buf)),
		syscall.MSG_PEEK|syscall.MSG_DONTWAIT, 0, 0)
	return e == syscall.EAGAIN || e == syscall.EWOULDBLOCK
}

// ErrNotYet is ReadNow's answer when no byte is there yet.
var ErrNotYet = errors.New("nothing to read yet")

// ReadNow is one recv(2) of fd that does not wait (ReadFd): ErrNotYet when
// nothing is there, io.EOF at the end, else what was read.
func ReadNow(fd uintptr, p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	n, e := ReadFd(fd, p)
	switch {
	case e == syscall.EAGAIN:
		return 0, ErrNotYet
	case e != 0:
		return 0, &net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", e)}
	case n == 0:
		return 0, io.EOF
	}
	return n, nil
}

// TCPOf is the TCP socket under c, through the wrappers that name it with
// a NetConn method (Conn, a connection cap's); nil when there is none. A
// caller reads the socket directly, so a wrapper whose reads do work of
// their own must not be under it: TLS is refused here (its NetConn is the
// ciphertext), and the own server loop, TCPOf's caller, serves cleartext
// listeners only, whose wrappers only count or bound connections.
func TCPOf(c net.Conn) *net.TCPConn {
	for {
		switch v := c.(type) {
		case *net.TCPConn:
			return v
		case *tls.Conn:
			return nil
		}
		w, ok := c.(interface{ NetConn() net.Conn })
		if !ok {
			return nil
		}
		c = w.NetConn()
	}
}
