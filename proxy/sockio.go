package proxy

import (
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

// sockConn is a TCP connection whose Read and Write are raw read(2) and
// write(2) inside RawConn.Read and RawConn.Write, where net.TCPConn's use
// syscall.Read and syscall.Write. Every connection tether accepts
// (sockListener) or dials (newSockConn in the transports' DialContext) is
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
type sockConn struct {
	*net.TCPConn
	raw  syscall.RawConn
	r, w sockCall
}

// sockCall is one direction's call under way: a mutex keeps Conn's
// promise that methods may be called from several goroutines at once.
type sockCall struct {
	mu    sync.Mutex
	p     []byte
	n     int
	errno syscall.Errno
	fn    func(fd uintptr) bool
}

// newSockConn wraps c when it is a TCP connection; anything else (a
// test's pipe, a Unix socket) is returned as it is.
func newSockConn(c net.Conn) net.Conn {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return c
	}
	raw, err := tc.SyscallConn()
	if err != nil {
		return c
	}
	s := &sockConn{TCPConn: tc, raw: raw}
	s.r.fn, s.w.fn = s.r.read, s.w.write
	return s
}

// SyscallConn is the RawConn s already holds: the embedded TCPConn's
// would build a new one on each call (the own loop and the lean pool each
// ask once per connection, through rawConnOf).
func (s *sockConn) SyscallConn() (syscall.RawConn, error) { return s.raw, nil }

func (s *sockConn) Read(p []byte) (int, error) {
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
func (c *sockCall) do(p []byte, rawCall func(func(uintptr) bool) error) (int, syscall.Errno, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.p, c.n, c.errno = p, 0, 0
	err := rawCall(c.fn)
	c.p = nil
	return c.n, c.errno, err
}

func (c *sockCall) read(fd uintptr) bool {
	n, e := readFd(fd, c.p)
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

// readFd is one read(2) of fd into p (not empty), again after EINTR; a
// socket's never waits (EAGAIN).
func readFd(fd uintptr, p []byte) (int, syscall.Errno) {
	for {
		r, _, e := syscall.RawSyscall(syscall.SYS_READ, fd, uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)))
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
// work of the goroutines ahead of it in the round (docs/BENCHMARKS.md,
// stop 24, has both).
//
// It is on when the process runs on one P (GOMAXPROCS 1 at start: one CPU,
// a CPU set of one, or GOMAXPROCS=1 in the environment; a cgroup's CPU
// quota alone leaves Go at 2 or more), where it was measured. With more Ps
// a yielded goroutine goes through the scheduler's global queue, under its
// one lock, and the other Ps run the round in parallel anyway, so it stays
// off there. SetWriteYield (--write-yield) decides instead. Atomic only so
// that a test may flip it while other connections write.
var writeYield atomic.Bool

func init() {
	writeYield.Store(yieldSetting(WriteYieldAuto, goruntime.GOMAXPROCS(0)))
}

func (s *sockConn) Write(p []byte) (int, error) {
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

func (c *sockCall) write(fd uintptr) bool {
	for c.n < len(c.p) {
		r, _, e := syscall.RawSyscall(syscall.SYS_WRITE, fd, uintptr(unsafe.Pointer(&c.p[c.n])), uintptr(len(c.p)-c.n))
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
func (s *sockConn) opError(op string, err error) error {
	var oe *net.OpError
	if errors.As(err, &oe) {
		err = oe.Err // RawConn's own ("raw-read", "raw-write")
	}
	return &net.OpError{Op: op, Net: "tcp", Source: s.LocalAddr(), Addr: s.RemoteAddr(), Err: err}
}

// sockListener accepts sockConns.
type sockListener struct{ net.Listener }

func (l sockListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return newSockConn(c), nil
}
