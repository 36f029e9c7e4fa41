package proxy

import (
	"bufio"
	"context"
	"net"
	"net/http"
	"testing"

	"github.com/tether-proxy/tether/proxy/config"
	"github.com/tether-proxy/tether/proxy/internal/sockio"
)

// TestTetherSocketsAreSockConns: the connections the proxy accepts and the
// ones its transport dials do their I/O through sockConn, under the
// wrappers that give them their timeouts and limits.
func TestTetherSocketsAreSockConns(t *testing.T) {
	b := newRawBackend(t, func(int, net.Conn, *bufio.Reader) {})
	h := newHarness(t, mustParse(t, simpleConfig(map[string]string{"d1": b.url()}, "", "", "")), nil)
	tr := h.p.rt.Load().clusters["c"].transport
	c, err := tr.DialContext(context.Background(), "tcp", b.ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ic, ok := c.(*idleConn)
	if !ok {
		t.Fatalf("dialed %T, want *idleConn", c)
	}
	if _, ok := ic.Conn.(*sockio.Conn); !ok {
		t.Errorf("idleConn holds %T, want *sockio.Conn", ic.Conn)
	}

	ln2, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln2.Close()
	go func() {
		if c, err := net.Dial("tcp", ln2.Addr().String()); err == nil {
			defer c.Close()
		}
	}()
	ac, err := sockio.Listener{Listener: ln2}.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer ac.Close()
	if _, ok := ac.(*sockio.Conn); !ok {
		t.Errorf("sockListener accepted %T, want *sockio.Conn", ac)
	}
	if sockio.RawConnOf(&limitConn{Conn: ac}) == nil {
		t.Error("the own loop cannot reach the socket under limitConn and sockConn")
	}
	if want, _ := ic.Conn.(*sockio.Conn).SyscallConn(); sockio.RawConnOf(ic) != want {
		t.Error("sockio.RawConnOf built a new RawConn where the sockConn holds one")
	}
}

// TestServerListensThroughSockListener: every listener Start binds
// (under the connection cap when there is one) accepts sockConns.
func TestServerListensThroughSockListener(t *testing.T) {
	cfg := &config.Config{Listeners: []config.Listener{{Address: "127.0.0.1:0"}}}
	for _, capped := range []bool{false, true} {
		if capped {
			cfg.Limits.MaxConcurrentConnections = 10
		}
		s := startServer(t, cfg, http.HandlerFunc(okHandler))
		for _, ln := range s.lns {
			if l, ok := ln.(*limitListener); ok {
				ln = l.Listener
			} else if capped {
				t.Errorf("capped: listener %T, want *limitListener", ln)
			}
			if _, ok := ln.(sockio.Listener); !ok {
				t.Errorf("capped=%v: listener %T, want sockListener", capped, ln)
			}
		}
		resp, err := rawRequest(t, s.Addrs()[0].String(), "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("capped=%v: %v %v", capped, resp, err)
		}
	}
}
