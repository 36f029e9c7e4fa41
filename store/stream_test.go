package store

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/tether-proxy/tether/keyring"
)

// testLayer listens on loopback with secret and files; accepted
// connections appear on the returned channel.
func testLayer(t *testing.T, secret []byte, files *TLSFiles, k *knobs) (*streamLayer, <-chan net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if k == nil {
		k = &knobs{}
	}
	sec, err := keyring.NewSecrets(secret)
	if err != nil {
		t.Fatal(err)
	}
	l, err := newStreamLayer(ln, ln.Addr().String(), sec, files, k, testLogger())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close(); l.wait() })
	accepted := make(chan net.Conn, 16)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	return l, accepted
}

// echoCheck writes on c and expects the server side (from accepted) to
// read it: the connection carries data both ways.
func echoCheck(t *testing.T, c net.Conn, accepted <-chan net.Conn) {
	t.Helper()
	var srv net.Conn
	select {
	case srv = <-accepted:
	case <-time.After(5 * time.Second):
		t.Fatal("authenticated connection never reached Accept")
	}
	defer srv.Close()
	if _, err := c.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4)
	srv.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadFull(srv, buf); err != nil || string(buf) != "ping" {
		t.Fatalf("server read %q, %v", buf, err)
	}
}

// expectNothing checks that the server closes c without sending a byte and
// that nothing reached Accept.
func expectNothing(t *testing.T, desc string, c net.Conn, accepted <-chan net.Conn) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	n, err := c.Read(make([]byte, 1))
	if n != 0 || err == nil {
		t.Errorf("%s: read %d bytes, err %v; want the connection closed", desc, n, err)
	}
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Errorf("%s: server kept the connection open", desc)
	}
	select {
	case <-accepted:
		t.Errorf("%s: connection reached Accept", desc)
	default:
	}
}

func TestStreamRefusesPeersWithoutTheSecret(t *testing.T) {
	// A short handshake deadline: a client stuck mid-handshake is dropped
	// quickly too.
	srv, accepted := testLayer(t, testSecret, nil, &knobs{handshakeTimeout: time.Second})
	addr := raft.ServerAddress(srv.Addr().String())

	// A plain TCP client speaking raft's wire format.
	plain, err := net.Dial("tcp", string(addr))
	if err != nil {
		t.Fatal(err)
	}
	plain.Write([]byte{1, 0x80, 0x80, 0x80}) // rpcRequestVote and junk
	expectNothing(t, "plain TCP", plain, accepted)

	// A TLS client that sends a wrong proof, then an RPC.
	tc, err := tls.Dial("tcp", string(addr), &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS13})
	if err != nil {
		t.Fatal(err)
	}
	tc.Write(make([]byte, proofLen))
	tc.Write([]byte{1, 0x80})
	expectNothing(t, "TLS with a wrong proof", tc, accepted)

	// A stream layer with another secret: Dial fails on both sides.
	other, _ := testLayer(t, []byte("another-secret-of-enough-length"), nil, nil)
	if c, err := other.Dial(addr, 5*time.Second); err == nil {
		c.Close()
		t.Error("peer with a different secret connected")
	}
	select {
	case <-accepted:
		t.Error("peer with a different secret reached Accept")
	case <-time.After(50 * time.Millisecond):
	}
	// And the server does not authenticate itself to such a peer: a server
	// with another secret is refused by a client with ours.
	client, _ := testLayer(t, testSecret, nil, nil)
	if c, err := client.Dial(raft.ServerAddress(other.Addr().String()), 5*time.Second); err == nil {
		c.Close()
		t.Error("client accepted a server with a different secret")
	}

	// The server keeps serving peers that know the secret.
	c, err := client.Dial(addr, 5*time.Second)
	if err != nil {
		t.Fatalf("peer with the secret: %v", err)
	}
	defer c.Close()
	echoCheck(t, c, accepted)
}

func TestStalledHandshakesDoNotBlockAccept(t *testing.T) {
	srv, accepted := testLayer(t, testSecret, nil, &knobs{handshakeTimeout: time.Minute})
	addr := srv.Addr().String()
	for i := 0; i < 10; i++ { // connect and say nothing
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
	}
	client, _ := testLayer(t, testSecret, nil, nil)
	c, err := client.Dial(raft.ServerAddress(addr), 5*time.Second)
	if err != nil {
		t.Fatalf("dial behind stalled clients: %v", err)
	}
	defer c.Close()
	echoCheck(t, c, accepted)
}

func TestHandshakeDeadlineClosesStalledClients(t *testing.T) {
	srv, accepted := testLayer(t, testSecret, nil, &knobs{handshakeTimeout: 100 * time.Millisecond})
	c, err := net.Dial("tcp", srv.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	expectNothing(t, "client that never speaks", c, accepted)
}

func TestDialResolvesHostNames(t *testing.T) {
	srv, accepted := testLayer(t, testSecret, nil, nil)
	_, port, _ := net.SplitHostPort(srv.Addr().String())
	client, _ := testLayer(t, testSecret, nil, nil)
	c, err := client.Dial(raft.ServerAddress(net.JoinHostPort("localhost", port)), 5*time.Second)
	if err != nil {
		t.Fatalf("dial by host name: %v", err)
	}
	defer c.Close()
	echoCheck(t, c, accepted)
}

// testCA writes a CA and a certificate it signs into dir, as PEM files.
func testCA(t *testing.T, dir, name string) *TLSFiles {
	t.Helper()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name + " CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, _ := x509.MarshalECPrivateKey(key)
	f := &TLSFiles{
		CertFile: filepath.Join(dir, name+".crt"), KeyFile: filepath.Join(dir, name+".key"), CAFile: filepath.Join(dir, name+"-ca.crt"),
	}
	for path, blk := range map[string]*pem.Block{
		f.CertFile: {Type: "CERTIFICATE", Bytes: der},
		f.KeyFile:  {Type: "EC PRIVATE KEY", Bytes: keyDER},
		f.CAFile:   {Type: "CERTIFICATE", Bytes: caDER},
	} {
		if err := os.WriteFile(path, pem.EncodeToMemory(blk), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return f
}

func TestMutualTLSRefusesCertificatesFromAnotherCA(t *testing.T) {
	dir := t.TempDir()
	good := testCA(t, dir, "good")
	bad := testCA(t, dir, "bad")
	srv, accepted := testLayer(t, testSecret, good, nil)
	addr := raft.ServerAddress(srv.Addr().String())

	// Same secret, certificate from another CA: refused.
	badClient, _ := testLayer(t, testSecret, bad, nil)
	if c, err := badClient.Dial(addr, 5*time.Second); err == nil {
		c.Close()
		t.Error("client with a foreign CA's certificate connected")
	}
	// No client certificate at all (secret mode client): refused.
	noCert, _ := testLayer(t, testSecret, nil, nil)
	if c, err := noCert.Dial(addr, 5*time.Second); err == nil {
		c.Close()
		t.Error("client without a certificate connected")
	}
	select {
	case <-accepted:
		t.Fatal("a refused client reached Accept")
	case <-time.After(50 * time.Millisecond):
	}
	goodClient, _ := testLayer(t, testSecret, good, nil)
	c, err := goodClient.Dial(addr, 5*time.Second)
	if err != nil {
		t.Fatalf("client with the cluster CA's certificate: %v", err)
	}
	defer c.Close()
	echoCheck(t, c, accepted)

	// Right CA, wrong secret: still refused.
	wrongSecret, _ := testLayer(t, []byte("another-secret-of-enough-length"), good, nil)
	if c, err := wrongSecret.Dial(addr, 5*time.Second); err == nil {
		c.Close()
		t.Error("client with the right CA but a different secret connected")
	}
}

func TestForeignTransportCannotDisturbTheCluster(t *testing.T) {
	c := newTestCluster(t, 3, knobs{})
	c.bootstrap()
	l := c.leader()
	term := l.s.raft.CurrentTerm()

	// A raft transport with the wrong secret asks for votes with a huge term
	// and tries to append entries: every RPC fails and nothing changes.
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	other, _ := keyring.NewSecrets([]byte("another-secret-of-enough-length"))
	layer, err := newStreamLayer(ln, ln.Addr().String(), other, nil, &knobs{}, testLogger())
	if err != nil {
		t.Fatal(err)
	}
	tr := raft.NewNetworkTransport(layer, 1, time.Second, io.Discard)
	defer tr.Close()
	for _, nd := range c.nodes {
		var vr raft.RequestVoteResponse
		err := tr.RequestVote("evil", raft.ServerAddress(nd.s.Addr()), &raft.RequestVoteRequest{
			RPCHeader: raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte("evil"), Addr: []byte(ln.Addr().String())}, Term: term + 100, LastLogIndex: 1 << 40, LastLogTerm: term + 100,
		}, &vr)
		if err == nil {
			t.Errorf("RequestVote to %s went through", nd.id)
		}
		var ar raft.AppendEntriesResponse
		err = tr.AppendEntries("evil", raft.ServerAddress(nd.s.Addr()), &raft.AppendEntriesRequest{
			RPCHeader: raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte("evil"), Addr: []byte(ln.Addr().String())}, Term: term + 100,
			Entries: []*raft.Log{{Index: 1 << 40, Term: term + 100, Type: raft.LogCommand, Data: []byte{typeSetClusterID, 1}}},
		}, &ar)
		if err == nil {
			t.Errorf("AppendEntries to %s went through", nd.id)
		}
	}
	// (A loaded machine may hold an election of its own; the foreign term
	// must never be adopted.)
	for _, nd := range c.nodes {
		if got := nd.s.raft.CurrentTerm(); got >= term+100 {
			t.Errorf("%s adopted the foreign term %d", nd.id, got)
		}
	}
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
	l.s.raft.Apply([]byte{typeSetClusterID, 1}, time.Second)
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

func TestMutualTLSFilesReloadWithoutRestart(t *testing.T) {
	srvFiles := testCA(t, t.TempDir(), "node")
	oldFiles := testCA(t, t.TempDir(), "node") // placeholder paths, overwritten below
	copyFiles := func(from, to *TLSFiles) {
		t.Helper()
		for _, p := range [][2]string{{from.CertFile, to.CertFile}, {from.KeyFile, to.KeyFile}, {from.CAFile, to.CAFile}} {
			b, err := os.ReadFile(p[0])
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p[1], b, 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
	copyFiles(srvFiles, oldFiles) // a client with the server's current CA
	srv, accepted := testLayer(t, testSecret, srvFiles, nil)
	addr := raft.ServerAddress(srv.Addr().String())
	oldClient, _ := testLayer(t, testSecret, oldFiles, nil)
	c, err := oldClient.Dial(addr, 5*time.Second)
	if err != nil {
		t.Fatalf("before the rotation: %v", err)
	}
	echoCheck(t, c, accepted)
	c.Close()

	// Rotate the server to a new CA by replacing its files.
	next := testCA(t, t.TempDir(), "node")
	copyFiles(next, srvFiles)
	if c, err := oldClient.Dial(addr, 5*time.Second); err == nil {
		c.Close()
		t.Error("after the rotation a certificate of the old CA still connects")
	}
	newClient, _ := testLayer(t, testSecret, next, nil)
	c, err = newClient.Dial(addr, 5*time.Second)
	if err != nil {
		t.Fatalf("after the rotation, a certificate of the new CA: %v", err)
	}
	defer c.Close()
	echoCheck(t, c, accepted)

	// A broken file (half written) keeps the last good set in use.
	if err := os.WriteFile(srvFiles.CertFile, []byte("garbage"), 0o600); err != nil {
		t.Fatal(err)
	}
	c2, err := newClient.Dial(addr, 5*time.Second)
	if err != nil {
		t.Fatalf("with a broken certificate file: %v", err)
	}
	defer c2.Close()
	echoCheck(t, c2, accepted)
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
