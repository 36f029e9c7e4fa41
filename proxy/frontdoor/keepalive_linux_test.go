package frontdoor

import (
	"log/slog"
	"net"
	"syscall"
	"testing"
)

// TestKeepAliveInherited: a connection accepted on a listener from
// listenAll has TCP keep-alive on with Go's default timing, set on the
// listening socket and copied by the kernel, not by a setsockopt of Go's
// per connection (the listener's KeepAlive is -1, so without the
// listener's options the accepted socket would have none).
func TestKeepAliveInherited(t *testing.T) {
	lns, err := listenAll("127.0.0.1:0", slog.Default())
	if err != nil {
		t.Fatal(err)
	}
	ln := lns[0]
	defer ln.Close()
	go func() {
		if c, err := net.Dial("tcp", ln.Addr().String()); err == nil {
			defer c.Close()
			var b [1]byte
			_, _ = c.Read(b[:])
		}
	}()
	c, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	raw, err := c.(*net.TCPConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name       string
		level, opt int
		want       int
	}{
		{"SO_KEEPALIVE", syscall.SOL_SOCKET, syscall.SO_KEEPALIVE, 1},
		{"TCP_KEEPIDLE", syscall.IPPROTO_TCP, syscall.TCP_KEEPIDLE, 15},
		{"TCP_KEEPINTVL", syscall.IPPROTO_TCP, syscall.TCP_KEEPINTVL, 15},
		{"TCP_KEEPCNT", syscall.IPPROTO_TCP, syscall.TCP_KEEPCNT, 9},
		{"TCP_NODELAY", syscall.IPPROTO_TCP, syscall.TCP_NODELAY, 1},
	} {
		var v int
		var gerr error
		if err := raw.Control(func(fd uintptr) { v, gerr = syscall.GetsockoptInt(int(fd), tc.level, tc.opt) }); err != nil {
			t.Fatal(err)
		}
		if gerr != nil {
			t.Fatalf("%s: %v", tc.name, gerr)
		}
		if v != tc.want {
			t.Errorf("accepted socket's %s = %d, want %d", tc.name, v, tc.want)
		}
	}
}
