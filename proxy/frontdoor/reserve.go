package frontdoor

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"syscall"
)

// Reserve binds every listener's address without listening: the ports are
// this node's (another process cannot take them, a port in use fails here,
// and Addrs reports ":0" resolved), but a client's connection is refused,
// as if nothing ran there, so a client behind DNS tries another address.
// Start then listens on the reserved sockets. A node that must not serve
// before it is in its cluster reserves at start and starts once ready.
// Where sockets cannot be bound without listening (not Unix), Reserve
// holds nothing and Start binds as it does without it.
func (s *Server) Reserve() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.lns != nil || s.reserved {
		return errors.New("server already reserved or started")
	}
	if !canReserve {
		return nil
	}
	var addrs []net.Addr
	for i, l := range s.ls {
		if err := l.reserve(s.logger); err != nil {
			for _, done := range s.ls[:i] {
				done.release()
			}
			return err
		}
		for _, r := range l.reserved {
			addrs = append(addrs, r.addr)
		}
		if !l.tcp {
			for _, pc := range l.udp {
				addrs = append(addrs, pc.LocalAddr())
			}
		}
	}
	s.reserved, s.addrs = true, addrs
	return nil
}

// Serving says whether Start has opened the listeners.
func (s *Server) Serving() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lns != nil
}

// reserve reserves the listener's TCP sockets and binds its UDP ones
// (HTTP/3): a bound UDP socket holds the port but answers nothing until
// Start serves it. Packets that arrive meanwhile wait in the socket's
// queue; no client has been told to use HTTP/3 yet by this node (Alt-Svc
// rides on answers over TCP, which Start opens at the same time).
func (l *listener) reserve(logger *slog.Logger) error {
	for attempt := 0; ; attempt++ {
		if l.tcp {
			rs, err := reserveAll(l.cfg.Address, logger)
			if err != nil {
				return err
			}
			l.reserved = rs
		}
		if l.h3 == nil {
			return nil
		}
		var err error
		if l.tcp {
			var tcp []net.Addr
			for _, r := range l.reserved {
				tcp = append(tcp, r.addr)
			}
			l.udp, err = listenUDP(l.cfg.Address, tcp)
		} else {
			l.udp, err = listenUDPOnly(l.cfg.Address)
		}
		if err == nil {
			l.h3.setPort(udpPort(l.udp))
			return nil
		}
		l.release()
		if !l.tcp || !dynamicPort(l.cfg.Address) || !errors.Is(err, syscall.EADDRINUSE) || attempt >= maxPortTries {
			return err
		}
	}
}

// maxPortTries bounds the tries at a dynamic port free for TCP and UDP
// alike.
const maxPortTries = 8

// bind opens the listener's sockets: its reserved ones when Reserve ran;
// with HTTP/3, UDP sockets of the same address and port too.
func (l *listener) bind(logger *slog.Logger) ([]net.Listener, error) {
	if l.h3 == nil {
		return l.bindTCP(logger)
	}
	for attempt := 0; ; attempt++ {
		var lns []net.Listener
		var err error
		if l.tcp {
			if lns, err = l.bindTCP(logger); err != nil {
				closeAll(l.udp)
				l.udp = nil
				return nil, err
			}
		}
		if l.udp != nil { // bound by Reserve
			return lns, nil
		}
		var pcs []net.PacketConn
		if l.tcp {
			var tcp []net.Addr
			for _, ln := range lns {
				tcp = append(tcp, ln.Addr())
			}
			pcs, err = listenUDP(l.cfg.Address, tcp)
		} else {
			pcs, err = listenUDPOnly(l.cfg.Address)
		}
		if err == nil {
			l.udp = pcs
			l.h3.setPort(udpPort(pcs))
			return lns, nil
		}
		for _, ln := range lns {
			_ = ln.Close()
		}
		if !l.tcp || !dynamicPort(l.cfg.Address) || !errors.Is(err, syscall.EADDRINUSE) || attempt >= maxPortTries {
			return nil, err
		}
	}
}

// bindTCP opens the listener's TCP sockets.
func (l *listener) bindTCP(logger *slog.Logger) ([]net.Listener, error) {
	if l.reserved == nil {
		return listenAll(l.cfg.Address, logger)
	}
	var lns []net.Listener
	for _, r := range l.reserved {
		ln, err := r.listen()
		if err != nil {
			for _, x := range lns {
				_ = x.Close()
			}
			return nil, fmt.Errorf("listen on %s: %w", l.cfg.Address, err)
		}
		lns = append(lns, ln)
	}
	l.reserved = nil
	return lns, nil
}

// release closes the listener's reservations and unserved UDP sockets.
func (l *listener) release() {
	for _, r := range l.reserved {
		r.close()
	}
	l.reserved = nil
	closeAll(l.udp)
	l.udp = nil
}

// releaseReserved closes the reservations Start did not use; Start
// refuses after it (Shutdown).
func (s *Server) releaseReserved() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.shut = true
	for _, l := range s.ls {
		l.release()
	}
	s.reserved = false
}

// reserveAll reserves addr as listenAll binds it: "localhost:port" is both
// loopbacks (one that cannot be bound for another reason than being in
// use is skipped, as long as the other is bound).
func reserveAll(addr string, logger interface{ Warn(string, ...any) }) ([]*reservation, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil || !strings.EqualFold(host, "localhost") || port == "0" {
		r, err := reserve(addr)
		if err != nil {
			return nil, fmt.Errorf("listen on %s: %w", addr, err)
		}
		return []*reservation{r}, nil
	}
	var rs []*reservation
	var skipped error
	for _, a := range []string{net.JoinHostPort("127.0.0.1", port), net.JoinHostPort("::1", port)} {
		r, err := reserve(a)
		switch {
		case err == nil:
			rs = append(rs, r)
		case errors.Is(err, syscall.EADDRINUSE):
			for _, x := range rs {
				x.close()
			}
			return nil, fmt.Errorf("listen on %s (%s): %w", addr, a, err)
		default:
			skipped = err
			logger.Warn("localhost: one loopback address cannot be bound; serving on the other", "addr", a, "err", err)
		}
	}
	if len(rs) == 0 {
		return nil, fmt.Errorf("listen on %s: %w", addr, skipped)
	}
	return rs, nil
}
