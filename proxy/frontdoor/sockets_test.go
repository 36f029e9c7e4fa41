package frontdoor

import (
	"net"
	"net/http"
	"testing"

	"github.com/tether-proxy/tether/proxy/config"
	"github.com/tether-proxy/tether/proxy/internal/sockio"
	"github.com/tether-proxy/tether/test/testutil"
)

// TestOwnLoopReachesTheSocketUnderTheCap: the own loop reaches an
// accepted socket through the connection cap's wrapper.
func TestOwnLoopReachesTheSocketUnderTheCap(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		if c, err := net.Dial("tcp", ln.Addr().String()); err == nil {
			defer c.Close()
		}
	}()
	ac, err := sockio.Listener{Listener: ln}.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer ac.Close()
	if sockio.RawConnOf(&limitConn{Conn: ac}) == nil {
		t.Error("the own loop cannot reach the socket under limitConn and sockConn")
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
		resp, err := testutil.RawRequest(t, s.Addrs()[0].String(), "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("capped=%v: %v %v", capped, resp, err)
		}
	}
}
