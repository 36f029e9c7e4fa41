//go:build unix

package frontdoor

import (
	"context"
	"errors"
	"net"
	"strconv"
	"syscall"

	"github.com/tether-proxy/tether/proxy/internal/sockio"
)

// canReserve: Unix sockets bind without listening.
const canReserve = true

// reservation is a TCP socket bound to an address and not listening: the
// kernel answers a connection to it with a reset.
type reservation struct {
	fd   int
	addr *net.TCPAddr // what it is bound to
	host string       // the host to listen on: as given for a wildcard
}

// reserve binds a socket as net.Listen("tcp", addr) would (a wildcard host
// binds IPv6 and IPv4 on one socket where the host has IPv6) and does not
// listen. It binds without SO_REUSEADDR, so nobody else binds the port
// meanwhile, Go programs included. Where that bind fails with the address in
// use, it binds again with SO_REUSEADDR, as net.Listen does: connections an
// earlier process on the port closed first wait in TIME-WAIT for up to a
// minute and refuse only a bind without it, while a socket listening on the
// port refuses both. Only then may a program that sets SO_REUSEADDR too bind
// the port until Start listens.
func reserve(addr string) (*reservation, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	ta, err := net.ResolveTCPAddr("tcp", addr)
	if err != nil {
		return nil, err
	}
	wildcard := ta.IP == nil || ta.IP.IsUnspecified()
	r := &reservation{fd: -1, host: host}
	if !wildcard {
		r.host = ta.IP.String()
	}
	var sa syscall.Sockaddr
	switch ip4 := ta.IP.To4(); {
	case wildcard:
		r.fd, err = socket(syscall.AF_INET6)
		if err == nil {
			// Dual-stack, as Go's listeners on a wildcard address.
			if err = syscall.SetsockoptInt(r.fd, syscall.IPPROTO_IPV6, syscall.IPV6_V6ONLY, 0); err != nil {
				r.close()
			} else {
				sa = &syscall.SockaddrInet6{Port: ta.Port}
			}
		}
		if err != nil { // no IPv6 here
			if r.fd, err = socket(syscall.AF_INET); err != nil {
				return nil, err
			}
			sa = &syscall.SockaddrInet4{Port: ta.Port}
		}
	case ip4 != nil:
		if r.fd, err = socket(syscall.AF_INET); err != nil {
			return nil, err
		}
		s4 := &syscall.SockaddrInet4{Port: ta.Port}
		copy(s4.Addr[:], ip4)
		sa = s4
	default:
		if r.fd, err = socket(syscall.AF_INET6); err != nil {
			return nil, err
		}
		_ = syscall.SetsockoptInt(r.fd, syscall.IPPROTO_IPV6, syscall.IPV6_V6ONLY, 1)
		s6 := &syscall.SockaddrInet6{Port: ta.Port}
		copy(s6.Addr[:], ta.IP.To16())
		sa = s6
	}
	if err := syscall.Bind(r.fd, sa); err != nil {
		if !errors.Is(err, syscall.EADDRINUSE) || ta.Port == 0 {
			r.close()
			return nil, err
		}
		if err := syscall.SetsockoptInt(r.fd, syscall.SOL_SOCKET, syscall.SO_REUSEADDR, 1); err != nil {
			r.close()
			return nil, err
		}
		if err := syscall.Bind(r.fd, sa); err != nil {
			r.close()
			return nil, err
		}
	}
	bound, err := syscall.Getsockname(r.fd)
	if err != nil {
		r.close()
		return nil, err
	}
	switch b := bound.(type) {
	case *syscall.SockaddrInet4:
		r.addr = &net.TCPAddr{IP: net.IP(append([]byte(nil), b.Addr[:]...)), Port: b.Port}
	case *syscall.SockaddrInet6:
		r.addr = &net.TCPAddr{IP: net.IP(append([]byte(nil), b.Addr[:]...)), Port: b.Port}
	}
	return r, nil
}

func socket(family int) (int, error) {
	fd, err := syscall.Socket(family, syscall.SOCK_STREAM, syscall.IPPROTO_TCP)
	if err != nil {
		return -1, err
	}
	syscall.CloseOnExec(fd)
	return fd, nil
}

// listen opens the listener on the reserved port. The listener is a new
// socket (Go's own, with the listeners' options): the reservation lets it
// bind the same address (SO_REUSEADDR on both, neither listening: Linux
// allows it), so the port is never free in between; where the system
// refuses that, the reservation is closed first.
func (r *reservation) listen() (net.Listener, error) {
	addr := net.JoinHostPort(r.host, strconv.Itoa(r.addr.Port))
	_ = syscall.SetsockoptInt(r.fd, syscall.SOL_SOCKET, syscall.SO_REUSEADDR, 1)
	ln, err := sockio.ListenConfig.Listen(context.Background(), "tcp", addr)
	if errors.Is(err, syscall.EADDRINUSE) {
		r.close()
		ln, err = sockio.ListenConfig.Listen(context.Background(), "tcp", addr)
	}
	r.close()
	return ln, err
}

func (r *reservation) close() {
	if r.fd >= 0 {
		_ = syscall.Close(r.fd)
		r.fd = -1
	}
}
