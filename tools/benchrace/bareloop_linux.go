package main

import (
	"bytes"
	"fmt"
	"net/netip"
	"runtime"
	"strconv"
	"syscall"
	"unsafe"
)

// bare-loop is the bare proxy of bare-own on an event loop of its own, as
// HAProxy and nginx are built: one OS thread, one epoll set holding every
// client and backend socket, non-blocking reads and writes as raw system
// calls, no goroutine per connection and no use of Go's poller. It answers
// "how much of the p99 gap is Go's goroutine-per-connection model, and
// how much the host?": it has no feature at all (as bare-own) and copies
// the backend's head as it is. Keep-alive GETs without a body only; a
// pipelined request waits in its connection's buffer for the answer
// before it.

type loopConn struct {
	fd      int
	buf     []byte
	n       int
	backend bool
	peer    *loopConn // a client's backend while a request is out, and back
	closing bool      // the client asked for Connection: close
}

type eventLoop struct {
	epfd    int
	backend syscall.SockaddrInet4
	conns   map[int]*loopConn
	idle    []*loopConn
	req     []byte
}

// listenLoop opens a non-blocking listening socket on 127.0.0.1 (an
// ephemeral port) and returns it with its address.
func listenLoop() (int, string, error) {
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_NONBLOCK|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, "", err
	}
	if err := syscall.SetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_REUSEADDR, 1); err != nil {
		syscall.Close(fd)
		return -1, "", err
	}
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		syscall.Close(fd)
		return -1, "", err
	}
	if err := syscall.Listen(fd, 4096); err != nil {
		syscall.Close(fd)
		return -1, "", err
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		syscall.Close(fd)
		return -1, "", err
	}
	return fd, fmt.Sprintf("127.0.0.1:%d", sa.(*syscall.SockaddrInet4).Port), nil
}

// runLoop serves lfd until an error; it holds its OS thread.
func runLoop(lfd int, backend string) error {
	runtime.LockOSThread()
	ap, err := netip.ParseAddrPort(backend)
	if err != nil || !ap.Addr().Is4() {
		return fmt.Errorf("bare-loop: backend %q is not an IPv4 address and port", backend)
	}
	epfd, err := syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
	if err != nil {
		return err
	}
	l := &eventLoop{epfd: epfd, backend: syscall.SockaddrInet4{Port: int(ap.Port()), Addr: ap.Addr().As4()}, conns: map[int]*loopConn{}}
	if err := l.watch(lfd); err != nil {
		return err
	}
	events := make([]syscall.EpollEvent, 256)
	for {
		n, err := syscall.EpollWait(epfd, events, -1)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return err
		}
		for _, ev := range events[:n] {
			fd := int(ev.Fd)
			if fd == lfd {
				l.accept(lfd)
				continue
			}
			if c := l.conns[fd]; c != nil {
				if c.backend {
					l.onBackend(c)
				} else {
					l.onClient(c)
				}
			}
		}
	}
}

func (l *eventLoop) watch(fd int) error {
	return syscall.EpollCtl(l.epfd, syscall.EPOLL_CTL_ADD, fd, &syscall.EpollEvent{Events: syscall.EPOLLIN, Fd: int32(fd)})
}

func (l *eventLoop) accept(lfd int) {
	for {
		fd, _, err := syscall.Accept4(lfd, syscall.SOCK_NONBLOCK|syscall.SOCK_CLOEXEC)
		if err != nil {
			return // EAGAIN: all taken
		}
		syscall.SetsockoptInt(fd, syscall.IPPROTO_TCP, syscall.TCP_NODELAY, 1)
		if l.watch(fd) != nil {
			syscall.Close(fd)
			continue
		}
		l.conns[fd] = &loopConn{fd: fd, buf: make([]byte, 8<<10)}
	}
}

func (l *eventLoop) close(c *loopConn) {
	syscall.Close(c.fd) // also leaves the epoll set
	delete(l.conns, c.fd)
}

// fill reads what c's socket holds; false when the peer closed or failed.
func fill(c *loopConn) bool {
	for c.n < len(c.buf) {
		r, err := syscall.Read(c.fd, c.buf[c.n:])
		switch {
		case err == syscall.EINTR:
			continue
		case err == syscall.EAGAIN:
			return true
		case err != nil || r == 0:
			return false
		}
		c.n += r
		if c.n < len(c.buf) {
			return true // a short read: the socket is empty
		}
	}
	return true
}

// writeAll writes p, waiting with poll(2) in the rare case of a full
// socket buffer (on loopback with these sizes it does not happen).
func writeAll(fd int, p []byte) error {
	for len(p) > 0 {
		r, err := syscall.Write(fd, p)
		switch err {
		case nil:
			p = p[r:]
		case syscall.EINTR:
		case syscall.EAGAIN:
			pfd := pollFd{fd: int32(fd), events: 0x4} // POLLOUT
			syscall.Syscall(syscall.SYS_POLL, uintptr(unsafe.Pointer(&pfd)), 1, ^uintptr(0))
		default:
			return err
		}
	}
	return nil
}

// pollFd is struct pollfd.
type pollFd struct {
	fd      int32
	events  int16
	revents int16
}

func (l *eventLoop) onClient(c *loopConn) {
	if !fill(c) {
		if c.peer == nil {
			l.close(c)
		} else {
			// Answered, then closed; out of the set meanwhile, so that
			// its EOF does not wake every wait.
			c.closing = true
			syscall.EpollCtl(l.epfd, syscall.EPOLL_CTL_DEL, c.fd, nil)
		}
		return
	}
	l.next(c)
}

// next sends c's first buffered request, if it has a whole one and no
// other is out.
func (l *eventLoop) next(c *loopConn) {
	if c.peer != nil {
		return
	}
	end := bytes.Index(c.buf[:c.n], []byte("\r\n\r\n"))
	if end < 0 {
		if c.n == len(c.buf) {
			l.close(c) // a head larger than the buffer
		}
		return
	}
	req, closing, ok := backendRequest(l.req[:0], c.buf[:end+4])
	if !ok {
		l.close(c)
		return
	}
	l.req = req
	c.closing = c.closing || closing
	c.n = copy(c.buf, c.buf[end+4:c.n])
	b, err := l.backendConn()
	if err == nil {
		err = writeAll(b.fd, l.req)
	}
	if err != nil {
		if b != nil {
			l.close(b)
		}
		writeAll(c.fd, []byte(badGateway))
		l.close(c)
		return
	}
	b.peer, c.peer = c, b
}

// backendConn is the newest idle backend connection, or a new one.
func (l *eventLoop) backendConn() (*loopConn, error) {
	if n := len(l.idle); n > 0 {
		b := l.idle[n-1]
		l.idle = l.idle[:n-1]
		return b, nil
	}
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	// A blocking connect on loopback, then non-blocking from there on.
	if err := syscall.Connect(fd, &l.backend); err != nil {
		syscall.Close(fd)
		return nil, err
	}
	syscall.SetNonblock(fd, true)
	syscall.SetsockoptInt(fd, syscall.IPPROTO_TCP, syscall.TCP_NODELAY, 1)
	if err := l.watch(fd); err != nil {
		syscall.Close(fd)
		return nil, err
	}
	b := &loopConn{fd: fd, buf: make([]byte, bareBuf), backend: true}
	l.conns[fd] = b
	return b, nil
}

func (l *eventLoop) onBackend(b *loopConn) {
	ok := fill(b)
	c := b.peer
	if c == nil { // idle: an EOF or bytes nobody asked for
		l.close(b)
		l.dropIdle(b)
		return
	}
	size, complete := responseSize(b.buf[:b.n])
	if !ok && !complete || size < 0 || b.n > size && complete {
		l.close(b)
		writeAll(c.fd, []byte(badGateway))
		l.close(c)
		return
	}
	if !complete {
		return
	}
	err := writeAll(c.fd, b.buf[:size])
	b.n, b.peer, c.peer = 0, nil, nil
	if ok {
		l.idle = append(l.idle, b)
	} else {
		l.close(b)
	}
	if err != nil || c.closing {
		l.close(c)
		return
	}
	l.next(c)
}

func (l *eventLoop) dropIdle(b *loopConn) {
	for i, x := range l.idle {
		if x == b {
			l.idle = append(l.idle[:i], l.idle[i+1:]...)
			return
		}
	}
}

// backendRequest appends to dst the fixed request every bare proxy sends
// for a client's head (its target, no field of the client's), and says
// whether the client asked for Connection: close; ok is false for a
// request line it cannot read.
func backendRequest(dst, head []byte) (req []byte, closing, ok bool) {
	line, _, _ := bytes.Cut(head, []byte("\r\n"))
	sp1, sp2 := bytes.IndexByte(line, ' '), bytes.LastIndexByte(line, ' ')
	if sp1 < 0 || sp2 <= sp1 {
		return dst, false, false
	}
	closing = indexFold(head, "\r\nconnection: close") >= 0
	return append(append(append(dst, "GET "...), line[sp1+1:sp2]...), " HTTP/1.1\r\nHost: backend\r\nX-Forwarded-For: 127.0.0.1\r\n\r\n"...), closing, true
}

// responseSize is the length of the whole response at the start of p
// (head and Content-Length body) and whether p holds all of it; -1 for a
// head without a Content-Length it can read.
func responseSize(p []byte) (int, bool) {
	end := bytes.Index(p, []byte("\r\n\r\n"))
	if end < 0 {
		return 0, false
	}
	const key = "\r\ncontent-length:"
	i := indexFold(p[:end+2], key)
	if i < 0 {
		return -1, true
	}
	v := p[i+len(key):]
	v = v[:bytes.IndexByte(v, '\r')]
	n, err := strconv.Atoi(string(bytes.TrimSpace(v)))
	if err != nil || n < 0 {
		return -1, true
	}
	size := end + 4 + n
	return size, len(p) >= size
}

// indexFold is the index of lower in p, ignoring ASCII case, or -1;
// without bytes.ToLower's copy.
func indexFold(p []byte, lower string) int {
	key := []byte(lower)
	for i := 0; i+len(key) <= len(p); i++ {
		if bytes.EqualFold(p[i:i+len(key)], key) {
			return i
		}
	}
	return -1
}
