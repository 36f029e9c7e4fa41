package proxy

import (
	"errors"
	"net"
	"os"
	"syscall"
	"testing"
	"time"
)

// blackholeAddr is a loopback address that answers no SYN: a listener
// with a backlog of 0 that never accepts, its queue filled, so Linux drops
// further SYNs (as the address of a killed container does) instead of
// refusing them. It lives until the test ends.
func blackholeAddr(t *testing.T) string {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		syscall.Close(fd)
		t.Fatal(err)
	}
	if err := syscall.Listen(fd, 0); err != nil {
		syscall.Close(fd)
		t.Fatal(err)
	}
	f := os.NewFile(uintptr(fd), "blackhole")
	l, err := net.FileListener(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	addr := l.Addr().String()
	for range 16 {
		c, err := net.DialTimeout("tcp", addr, 500*time.Millisecond)
		if err == nil {
			t.Cleanup(func() { c.Close() })
			continue // queued: the backlog is not full yet
		}
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return addr // the SYN went unanswered
		}
		t.Fatalf("filling the backlog of %s: %v", addr, err)
	}
	t.Fatalf("%s still accepted connections after 16 dials: cannot make a silent address", addr)
	return ""
}
