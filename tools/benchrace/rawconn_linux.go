package main

import (
	"io"
	"net"
	"runtime"
	"syscall"
	"unsafe"
)

// rawConn is bare-gor's socket I/O, tether's (proxy/internal/sockio): every
// read and write is a raw read(2) or write(2) inside RawConn, which keeps
// the P through the call where net.TCPConn's syscall.Read and Write let
// sysmon hand it to another thread, and a write first yields the P so
// that a scheduling round's writes leave together.
type rawConn struct {
	*net.TCPConn
	raw syscall.RawConn
}

// newRawConn wraps c when it is a TCP connection.
func newRawConn(c net.Conn) net.Conn {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return c
	}
	raw, err := tc.SyscallConn()
	if err != nil {
		return c
	}
	return &rawConn{TCPConn: tc, raw: raw}
}

func (c *rawConn) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	var n int
	var errno syscall.Errno
	err := c.raw.Read(func(fd uintptr) bool {
		for {
			r, _, e := syscall.RawSyscall(syscall.SYS_READ, fd, uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)))
			switch e {
			case syscall.EINTR:
				continue
			case syscall.EAGAIN:
				return false
			case 0:
				n = int(r)
			default:
				errno = e
			}
			return true
		}
	})
	switch {
	case err != nil:
		return 0, err
	case errno != 0:
		return 0, errno
	case n == 0:
		return 0, io.EOF
	}
	return n, nil
}

func (c *rawConn) Write(p []byte) (int, error) {
	runtime.Gosched()
	var n int
	var errno syscall.Errno
	err := c.raw.Write(func(fd uintptr) bool {
		for n < len(p) {
			r, _, e := syscall.RawSyscall(syscall.SYS_WRITE, fd, uintptr(unsafe.Pointer(&p[n])), uintptr(len(p)-n))
			switch e {
			case 0:
				n += int(r)
			case syscall.EINTR:
			case syscall.EAGAIN:
				return false
			default:
				errno = e
				return true
			}
		}
		return true
	})
	if err == nil && errno != 0 {
		err = errno
	}
	return n, err
}
