package healthgossip

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/tether-proxy/tether/cluster"
)

// testNet is a loopback network for in-process nodes: every node's
// memberlist transport goes through it, so a test can cut links (both
// directions, UDP and TCP) and count the bytes each node sends.
type testNet struct {
	mu    sync.Mutex
	group map[string]int // gossip address → partition group (0 by default)
	byID  map[string]*filterTransport
}

// openHook, while a testNet is installed, is the option the tests' node
// constructor passes to Open.
var openHook cluster.OpenOption

// install makes every Open during the test use t's filtering transport.
func (n *testNet) install(t testing.TB) {
	n.group, n.byID = map[string]int{}, map[string]*filterTransport{}
	openHook = func(id string, c *memberlist.Config) {
		ft, err := n.newTransport(id, c)
		if err != nil {
			t.Fatalf("transport for %s: %v", id, err)
		}
		c.Transport = ft
		c.BindPort, c.AdvertisePort = ft.port, ft.port
	}
	t.Cleanup(func() { openHook = nil })
}

// partition puts the given nodes in group g; nodes in different groups
// cannot reach each other.
func (n *testNet) partition(g int, ids ...string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, id := range ids {
		n.group[n.byID[id].addr] = g
	}
}

func (n *testNet) heal() {
	n.mu.Lock()
	defer n.mu.Unlock()
	clear(n.group)
}

func (n *testNet) cut(from, to string) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.group[from] != n.group[to]
}

// sent is how many bytes a node wrote (UDP packets and TCP streams).
func (n *testNet) sent(id string) uint64 {
	n.mu.Lock()
	ft := n.byID[id]
	n.mu.Unlock()
	if ft == nil {
		return 0
	}
	return ft.bytes.Load()
}

func (n *testNet) newTransport(id string, c *memberlist.Config) (*filterTransport, error) {
	var nt *memberlist.NetTransport
	var err error
	for range 10 { // the port must be free for TCP and UDP: retry like memberlist
		nt, err = memberlist.NewNetTransport(&memberlist.NetTransportConfig{
			BindAddrs: []string{c.BindAddr}, BindPort: c.BindPort, Logger: c.Logger})
		if err == nil || !strings.Contains(err.Error(), "address already in use") {
			break
		}
	}
	if err != nil {
		return nil, err
	}
	port := nt.GetAutoBindPort()
	ft := &filterTransport{NetTransport: nt, net: n, port: port,
		addr:    net.JoinHostPort(c.BindAddr, strconv.Itoa(port)),
		streams: make(chan net.Conn), stop: make(chan struct{}), down: make(chan struct{})}
	go ft.acceptLoop()
	n.mu.Lock()
	n.byID[id] = ft
	n.mu.Unlock()
	return ft, nil
}

type filterTransport struct {
	*memberlist.NetTransport
	net     *testNet
	port    int
	addr    string
	bytes   atomic.Uint64
	streams chan net.Conn
	stop    chan struct{}
	down    chan struct{} // closed once the NetTransport is shut down
	once    sync.Once
}

var errCut = errors.New("test network: link cut")

func (f *filterTransport) WriteTo(b []byte, addr string) (time.Time, error) {
	return f.WriteToAddress(b, memberlist.Address{Addr: addr})
}

func (f *filterTransport) WriteToAddress(b []byte, a memberlist.Address) (time.Time, error) {
	if f.net.cut(f.addr, a.Addr) {
		return time.Now(), nil // lost on the wire
	}
	f.bytes.Add(uint64(len(b)))
	return f.NetTransport.WriteToAddress(b, a)
}

func (f *filterTransport) DialTimeout(addr string, timeout time.Duration) (net.Conn, error) {
	return f.DialAddressTimeout(memberlist.Address{Addr: addr}, timeout)
}

func (f *filterTransport) DialAddressTimeout(a memberlist.Address, timeout time.Duration) (net.Conn, error) {
	if f.net.cut(f.addr, a.Addr) {
		return nil, fmt.Errorf("dial %s: %w", a.Addr, errCut)
	}
	c, err := f.NetTransport.DialAddressTimeout(a, timeout)
	if err != nil {
		return nil, err
	}
	return &countConn{Conn: c, n: &f.bytes}, nil
}

func (f *filterTransport) StreamCh() <-chan net.Conn { return f.streams }

// acceptLoop counts what this node writes on streams peers opened. After
// stop it closes what is still accepted until the NetTransport is down: its
// listener goroutines block on handing over a stream, and its Shutdown
// waits for them.
func (f *filterTransport) acceptLoop() {
	in := f.NetTransport.StreamCh()
	for {
		select {
		case <-f.stop:
			f.drain(in)
			return
		case c := <-in:
			select {
			case f.streams <- &countConn{Conn: c, n: &f.bytes}:
			case <-f.stop:
				c.Close()
				f.drain(in)
				return
			}
		}
	}
}

func (f *filterTransport) drain(in <-chan net.Conn) {
	for {
		select {
		case c := <-in:
			c.Close()
		case <-f.down:
			return
		}
	}
}

func (f *filterTransport) Shutdown() error {
	var err error
	f.once.Do(func() {
		close(f.stop)
		err = f.NetTransport.Shutdown()
		close(f.down)
	})
	return err
}

type countConn struct {
	net.Conn
	n *atomic.Uint64
}

func (c *countConn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	c.n.Add(uint64(n))
	return n, err
}
