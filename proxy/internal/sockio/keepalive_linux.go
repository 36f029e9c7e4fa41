package sockio

import (
	"net"
	"syscall"
)

// Client connections get TCP keep-alive probes as Go gives every accepted
// connection by default (on after 15 s idle, every 15 s, 9 unanswered
// probes end it), but set once on the listening socket, whose options
// Linux copies to each socket it accepts, instead of four setsockopt(2)
// calls per accepted connection (3 µs of the 67 µs a new connection per
// request costs; proxy/DESIGN.md, "The server side").
// TestKeepAliveInherited holds the
// accepted sockets to those values.
const (
	keepAliveIdle     = 15 // seconds
	keepAliveInterval = 15 // seconds
	keepAliveCount    = 9
)

// ListenConfig binds listeners whose accepted connections inherit the
// keep-alive settings above; Go's own per-connection setting is off.
var ListenConfig = net.ListenConfig{KeepAlive: -1, Control: setListenerKeepAlive}

func setListenerKeepAlive(_, _ string, c syscall.RawConn) error {
	var serr error
	err := c.Control(func(fd uintptr) {
		for _, o := range [...][3]int{
			{syscall.SOL_SOCKET, syscall.SO_KEEPALIVE, 1},
			{syscall.IPPROTO_TCP, syscall.TCP_KEEPIDLE, keepAliveIdle},
			{syscall.IPPROTO_TCP, syscall.TCP_KEEPINTVL, keepAliveInterval},
			{syscall.IPPROTO_TCP, syscall.TCP_KEEPCNT, keepAliveCount},
		} {
			if err := syscall.SetsockoptInt(int(fd), o[0], o[1], o[2]); err != nil && serr == nil {
				serr = err
			}
		}
	})
	if err != nil {
		return err
	}
	return serr
}
