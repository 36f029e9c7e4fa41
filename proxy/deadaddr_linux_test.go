package proxy

import (
	"errors"
	"fmt"
	"net"
	"syscall"
	"testing"
)

// deadAddr is a loopback address nothing listens on (connections are
// refused) for the test's whole run: a socket bound there, never listening
// and without SO_REUSEADDR, keeps the port, so no server another test
// starts meanwhile can take it (a closed listener's port could be, and a
// request meant to be refused would reach that server).
func deadAddr(t *testing.T) string {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("127.0.0.1:%d", sa.(*syscall.SockaddrInet4).Port)
}

// TestDeadAddrStaysRefused: no listener can take a dead address while the
// test runs, and a connection to it is refused.
func TestDeadAddrStaysRefused(t *testing.T) {
	addr := deadAddr(t)
	if ln, err := net.Listen("tcp", addr); err == nil {
		ln.Close()
		t.Fatalf("a listener took the dead address %s", addr)
	}
	if c, err := net.Dial("tcp", addr); err == nil || !errors.Is(err, syscall.ECONNREFUSED) {
		if c != nil {
			c.Close()
		}
		t.Fatalf("dial %s: %v, want refused", addr, err)
	}
}
