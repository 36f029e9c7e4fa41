package proxy

import (
	"bufio"
	"context"
	"net"
	"testing"

	"github.com/tether-proxy/tether/proxy/internal/sockio"
	"github.com/tether-proxy/tether/test/testutil"
)

// TestTetherSocketsAreSockConns: the connections the proxy accepts and the
// ones its transport dials do their I/O through sockConn, under the
// wrappers that give them their timeouts and limits.
func TestTetherSocketsAreSockConns(t *testing.T) {
	b := testutil.NewRawServer(t, func(int, net.Conn, *bufio.Reader) {})
	h := newHarness(t, mustParse(t, simpleConfig(map[string]string{"d1": b.URL()}, "", "", "")), nil)
	tr := h.p.rt.Load().clusters["c"].transport
	c, err := tr.DialContext(context.Background(), "tcp", b.Addr())
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
	if want, _ := ic.Conn.(*sockio.Conn).SyscallConn(); sockio.RawConnOf(ic) != want {
		t.Error("sockio.RawConnOf built a new RawConn where the sockConn holds one")
	}
}
