package store

import (
	"io"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/tether-proxy/tether/keyring"
	"github.com/tether-proxy/tether/store/command"
	"github.com/tether-proxy/tether/store/transport"
	"github.com/tether-proxy/tether/test/testutil"
)

func TestForeignTransportCannotDisturbTheCluster(t *testing.T) {
	c := newTestCluster(t, 3, knobs{})
	c.bootstrap()
	l := c.leader()
	term := l.s.raft.CurrentTerm()

	// A raft transport with the wrong secret asks for votes with a huge term
	// and tries to append entries: every RPC fails and nothing changes.
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	other, _ := keyring.NewSecrets([]byte("another-secret-of-enough-length"))
	layer, err := transport.New(ln, ln.Addr().String(), other, nil, transport.Options{}, testLogger())
	if err != nil {
		t.Fatal(err)
	}
	tr := raft.NewNetworkTransport(layer, 1, time.Second, io.Discard)
	defer tr.Close()
	c.foreignRPCsRefused("a transport of another secret", tr, "evil", ln.Addr().String(), term,
		[]*raft.Log{{Index: 1 << 40, Term: term + 100, Type: raft.LogCommand, Data: []byte{command.TypeSetClusterID, 1}}})
	idx := c.apply(SetClusterID{ID: "c1"})
	c.converged(idx)
}

func TestClusterFormsOverMutualTLS(t *testing.T) {
	files := testCA(t, t.TempDir(), "node") // one certificate for every node: enough here
	c := newTestClusterTLS(t, 3, knobs{}, files)
	c.bootstrap()
	idx := c.apply(InstallKey{Key: testKey("k1", 0)})
	c.converged(idx)
}

// holeConn models a peer that vanished without a reset (power loss, a
// firewall dropping packets): while the hole is open, writes go nowhere and
// nothing is read; deadlines still fire.
type holeConn struct {
	net.Conn
	hole *atomic.Bool
}

func (c holeConn) Read(b []byte) (int, error) {
	for {
		n, err := c.Conn.Read(b)
		if err != nil || !c.hole.Load() {
			return n, err
		}
	}
}

func (c holeConn) Write(b []byte) (int, error) {
	if c.hole.Load() {
		return len(b), nil
	}
	return c.Conn.Write(b)
}

func TestShutdownDoesNotWaitForUnresponsivePeers(t *testing.T) {
	var hole atomic.Bool
	// RPC and handshake deadlines far beyond the guard below: only cutting
	// the connections lets Shutdown return in time.
	k := knobs{transportTimeout: time.Minute, handshakeTimeout: time.Minute}
	c := newTestCluster(t, 3, k)
	for _, nd := range c.nodes {
		c.stop(nd)
	}
	c.knobs.wrapAlso = func(_, _ string, cn net.Conn) net.Conn { return holeConn{cn, &hole} }
	for _, nd := range c.nodes {
		c.start(nd)
	}
	c.bootstrap()
	l := c.leader()
	c.apply(SetClusterID{ID: "c1"})
	hole.Store(true)
	// Make sure RPCs are in flight into the hole.
	l.s.raft.Apply([]byte{command.TypeSetClusterID, 1}, time.Second)
	done := make(chan error, 1)
	start := time.Now()
	go func() { done <- l.s.Shutdown() }()
	select {
	case <-done:
	case <-time.After(30 * time.Second): // a hang detector, not a timing figure
		t.Fatal("Shutdown waited for RPCs into unresponsive peers")
	}
	t.Logf("shutdown took %s", time.Since(start))
	hole.Store(false)
}

func TestClusterFormsWithHostNameAddresses(t *testing.T) {
	c := &testCluster{t: t, net: newFaultNet(), byName: true}
	for i := 0; i < 3; i++ {
		if nd := c.addNode(); !strings.HasPrefix(nd.s.Addr(), "localhost:") {
			t.Fatalf("advertised %q, want localhost:port", nd.s.Addr())
		}
	}
	c.bootstrap()
	idx := c.apply(InstallKey{Key: testKey("k1", 0)})
	c.converged(idx)
	ss, err := c.leader().s.Servers()
	if err != nil || len(ss) != 3 || !strings.HasPrefix(ss[0].Address, "localhost:") {
		t.Fatalf("configuration %v, %v", ss, err)
	}
}

// testCA writes a CA and a certificate it signs into dir.
func testCA(t *testing.T, dir, name string) *TLSFiles {
	t.Helper()
	cert, key, ca := testutil.CAFiles(t, dir, name)
	return &TLSFiles{CertFile: cert, KeyFile: key, CAFile: ca}
}
