package transport

import (
	"crypto/tls"
	"encoding/binary"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/tether-proxy/tether/keyring"
	"github.com/tether-proxy/tether/keyring/keyringtest"
	"github.com/tether-proxy/tether/test/testutil"
)

var testSecret = []byte("0123456789abcdef-test-cluster-secret")

// t0 is the tests' epoch.
var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func testLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// testCA writes a CA and a certificate it signs into dir.
func testCA(t *testing.T, dir, name string) *TLSFiles {
	t.Helper()
	cert, key, ca := testutil.CAFiles(t, dir, name)
	return &TLSFiles{CertFile: cert, KeyFile: key, CAFile: ca}
}

// testLayer listens on loopback with secret and files; accepted
// connections appear on the returned channel.
func testLayer(t *testing.T, secret []byte, files *TLSFiles, opts Options) (*Layer, <-chan net.Conn) {
	t.Helper()
	sec, err := keyring.NewSecrets(secret)
	if err != nil {
		t.Fatal(err)
	}
	return serveLayer(t, sec, files, opts, testLogger())
}

// serveLayer listens on loopback; accepted connections appear on the
// returned channel.
func serveLayer(t *testing.T, sec *keyring.Secrets, files *TLSFiles, opts Options, logger *slog.Logger) (*Layer, <-chan net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l, err := New(ln, ln.Addr().String(), sec, files, opts, logger)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close(); l.Wait() })
	accepted := make(chan net.Conn, 64)
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

// dialRefused fails the test, saying what, when from connects to addr.
func dialRefused(t *testing.T, from *Layer, addr raft.ServerAddress, what string) {
	t.Helper()
	if c, err := from.Dial(addr, 5*time.Second); err == nil {
		c.Close()
		t.Error(what)
	}
}

// reachedAccept reports whether a connection reaches Accept within 50 ms.
func reachedAccept(accepted <-chan net.Conn) bool {
	select {
	case <-accepted:
		return true
	case <-time.After(50 * time.Millisecond):
		return false
	}
}

func TestStreamRefusesPeersWithoutTheSecret(t *testing.T) {
	// A short handshake deadline: a client stuck mid-handshake is dropped
	// quickly too.
	srv, accepted := testLayer(t, testSecret, nil, Options{HandshakeTimeout: time.Second})
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
	other, _ := testLayer(t, []byte("another-secret-of-enough-length"), nil, Options{})
	dialRefused(t, other, addr, "peer with a different secret connected")
	if reachedAccept(accepted) {
		t.Error("peer with a different secret reached Accept")
	}
	// And the server does not authenticate itself to such a peer: a server
	// with another secret is refused by a client with ours.
	client, _ := testLayer(t, testSecret, nil, Options{})
	dialRefused(t, client, raft.ServerAddress(other.Addr().String()), "client accepted a server with a different secret")

	// The server keeps serving peers that know the secret.
	c, err := client.Dial(addr, 5*time.Second)
	if err != nil {
		t.Fatalf("peer with the secret: %v", err)
	}
	defer c.Close()
	echoCheck(t, c, accepted)
}

func TestStalledHandshakesDoNotBlockAccept(t *testing.T) {
	srv, accepted := testLayer(t, testSecret, nil, Options{HandshakeTimeout: time.Minute})
	addr := srv.Addr().String()
	for i := 0; i < 10; i++ { // connect and say nothing
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
	}
	client, _ := testLayer(t, testSecret, nil, Options{})
	c, err := client.Dial(raft.ServerAddress(addr), 5*time.Second)
	if err != nil {
		t.Fatalf("dial behind stalled clients: %v", err)
	}
	defer c.Close()
	echoCheck(t, c, accepted)
}

func TestHandshakeDeadlineClosesStalledClients(t *testing.T) {
	srv, accepted := testLayer(t, testSecret, nil, Options{HandshakeTimeout: 100 * time.Millisecond})
	c, err := net.Dial("tcp", srv.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	expectNothing(t, "client that never speaks", c, accepted)
}

func TestDialResolvesHostNames(t *testing.T) {
	srv, accepted := testLayer(t, testSecret, nil, Options{})
	_, port, _ := net.SplitHostPort(srv.Addr().String())
	client, _ := testLayer(t, testSecret, nil, Options{})
	c, err := client.Dial(raft.ServerAddress(net.JoinHostPort("localhost", port)), 5*time.Second)
	if err != nil {
		t.Fatalf("dial by host name: %v", err)
	}
	defer c.Close()
	echoCheck(t, c, accepted)
}

func TestMutualTLSRefusesCertificatesFromAnotherCA(t *testing.T) {
	dir := t.TempDir()
	good := testCA(t, dir, "good")
	bad := testCA(t, dir, "bad")
	srv, accepted := testLayer(t, testSecret, good, Options{})
	addr := raft.ServerAddress(srv.Addr().String())

	// Same secret, certificate from another CA: refused.
	badClient, _ := testLayer(t, testSecret, bad, Options{})
	dialRefused(t, badClient, addr, "client with a foreign CA's certificate connected")
	// No client certificate at all (secret mode client): refused.
	noCert, _ := testLayer(t, testSecret, nil, Options{})
	dialRefused(t, noCert, addr, "client without a certificate connected")
	if reachedAccept(accepted) {
		t.Fatal("a refused client reached Accept")
	}
	goodClient, _ := testLayer(t, testSecret, good, Options{})
	c, err := goodClient.Dial(addr, 5*time.Second)
	if err != nil {
		t.Fatalf("client with the cluster CA's certificate: %v", err)
	}
	defer c.Close()
	echoCheck(t, c, accepted)

	// Right CA, wrong secret: still refused.
	wrongSecret, _ := testLayer(t, []byte("another-secret-of-enough-length"), good, Options{})
	dialRefused(t, wrongSecret, addr, "client with the right CA but a different secret connected")
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
	srv, accepted := testLayer(t, testSecret, srvFiles, Options{})
	addr := raft.ServerAddress(srv.Addr().String())
	oldClient, _ := testLayer(t, testSecret, oldFiles, Options{})
	c, err := oldClient.Dial(addr, 5*time.Second)
	if err != nil {
		t.Fatalf("before the rotation: %v", err)
	}
	echoCheck(t, c, accepted)
	c.Close()

	// Rotate the server to a new CA by replacing its files.
	next := testCA(t, t.TempDir(), "node")
	copyFiles(next, srvFiles)
	dialRefused(t, oldClient, addr, "after the rotation a certificate of the old CA still connects")
	newClient, _ := testLayer(t, testSecret, next, Options{})
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

var (
	oldSecret = []byte("the-old-cluster-secret-0123456789")
	newSecret = []byte("the-new-cluster-secret-9876543210")
	badSecret = []byte("a-secret-nobody-in-the-cluster-has")
)

// layerWith is testLayer with the given secrets, logger and clock.
func layerWith(t *testing.T, sec *keyring.Secrets, logger *slog.Logger, now func() time.Time) (*Layer, <-chan net.Conn) {
	t.Helper()
	if logger == nil {
		logger = testLogger()
	}
	return serveLayer(t, sec, nil, Options{HandshakeTimeout: 2 * time.Second, Now: now}, logger)
}

// TestRefusedRaftConnectionsAreLoggedOncePerReasonWithACount: 40 plain TCP
// clients and 40 TLS clients with a wrong proof make two log lines, one per
// reason; after 30 s the next refusal's line says how many were held back;
// every refusal is counted by reason.
func TestRefusedRaftConnectionsAreLoggedOncePerReasonWithACount(t *testing.T) {
	var logs testutil.SyncBuffer
	var mu sync.Mutex
	now := t0
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	l, accepted := layerWith(t, keyringtest.Secrets(t, testSecret), slog.New(slog.NewTextHandler(&logs, nil)), clock)
	addr := l.Addr().String()
	plain := func() {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		c.Write([]byte("GET / HTTP/1.1\r\n\r\n"))
		expectNothing(t, "plain TCP", c, accepted)
	}
	wrongProof := func() {
		tc, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS13, NextProtos: []string{alpnV2}})
		if err != nil {
			t.Fatal(err)
		}
		tc.Write(append(binary.BigEndian.AppendUint16(nil, 0), make([]byte, proofLen)...))
		expectNothing(t, "wrong proof", tc, accepted)
	}
	for range 40 {
		plain()
		wrongProof()
	}
	lines := func() []string {
		var out []string
		for _, l := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
			if strings.Contains(l, "raft connection refused") {
				out = append(out, l)
			}
		}
		return out
	}
	if got := lines(); len(got) != 2 || !strings.Contains(got[0], "reason=") || !strings.Contains(strings.Join(got, ""), "reason="+RefusedSecret) {
		t.Fatalf("80 refusals of two kinds logged as %d lines, want 2 (one per reason):\n%s", len(got), strings.Join(got, "\n"))
	}
	mu.Lock()
	now = now.Add(refusalLogEvery)
	mu.Unlock()
	wrongProof()
	got := lines()
	if len(got) != 3 || !strings.Contains(got[2], "repeated=39") {
		t.Fatalf("the line after the window: %q, want repeated=39", got[len(got)-1])
	}
	counts := l.Refused()
	if counts[RefusedSecret] != 41 || counts[RefusedTLS]+counts[RefusedClosed] != 40 {
		t.Fatalf("refusals by reason: %v, want %d %s and 40 tls or closed", counts, 41, RefusedSecret)
	}
}

// TestHandshakeVersion1FollowsThePolicy: a peer of an earlier release (no
// ALPN) completes version 1 while the policy allows it and is refused,
// without a proof from the server, once it does not; the client side
// refuses a server that chooses no ALPN the same way.
func TestHandshakeVersion1FollowsThePolicy(t *testing.T) {
	l, accepted := layerWith(t, keyringtest.Secrets(t, testSecret), nil, nil)
	addr := l.Addr().String()
	if !testutil.RaftV1Proves(t, addr, testSecret) {
		t.Fatal("a version 1 peer with the secret was refused while version 1 is allowed")
	}
	(<-accepted).Close()
	if testutil.RaftV1Proves(t, addr, badSecret) {
		t.Fatal("a version 1 peer without the secret got the server's proof")
	}
	allow := false
	l.SetLegacyHandshake(func() bool { return allow })
	if testutil.RaftV1Proves(t, addr, testSecret) {
		t.Fatal("a version 1 peer with the secret got the server's proof once version 1 is refused")
	}
	if c := l.Refused()[RefusedV1]; c != 1 {
		t.Errorf("refusals of version 1 counted %d, want 1", c)
	}

	// A server of an earlier release: TLS without ALPN, then the version 1
	// exchange.
	old, _ := layerWith(t, keyringtest.Secrets(t, testSecret), nil, nil)
	old.serverTLS.NextProtos = nil
	old.clientTLS.NextProtos = nil
	if _, err := l.Dial(raft.ServerAddress(old.Addr().String()), 5*time.Second); err == nil || !strings.Contains(err.Error(), "version 1 refused") {
		t.Fatalf("dialing a version 1 server with version 1 refused: %v", err)
	}
	allow = true
	c, err := l.Dial(raft.ServerAddress(old.Addr().String()), 5*time.Second)
	if err != nil {
		t.Fatalf("dialing a version 1 server with version 1 allowed: %v", err)
	}
	c.Close()
}

// TestRaftAcceptsEverySecretOfARotationAndCutsRemovedOnes: a node holding
// the old secret (primary) and the new one (installed) accepts peers that
// prove either, not a third; once the old one is removed, connections made
// with it are cut and new ones refused.
func TestRaftAcceptsEverySecretOfARotationAndCutsRemovedOnes(t *testing.T) {
	sec := keyringtest.Secrets(t, oldSecret, newSecret)
	srv, accepted := layerWith(t, sec, nil, nil)
	addr := raft.ServerAddress(srv.Addr().String())
	dial := func(secret []byte) (net.Conn, error) {
		cl, _ := layerWith(t, keyringtest.Secrets(t, secret), nil, nil)
		return cl.Dial(addr, 5*time.Second)
	}
	withOld, err := dial(oldSecret)
	if err != nil {
		t.Fatalf("peer with the old secret: %v", err)
	}
	srvOld := <-accepted
	withNew, err := dial(newSecret)
	if err != nil {
		t.Fatalf("peer with the new secret: %v", err)
	}
	srvNew := <-accepted
	if _, err := dial(badSecret); err == nil {
		t.Fatal("peer with a third secret connected")
	}

	oldID, newID := keyring.SecretID(oldSecret), keyring.SecretID(newSecret)
	if err := sec.Sync([]keyring.SecretRecord{{ID: newID, State: keyring.SecretPrimary}}, []keyring.RemovedSecret{{ID: oldID, Index: 9}}); err != nil {
		t.Fatal(err)
	}
	srvOld.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := srvOld.Read(make([]byte, 1)); err == nil || isTimeout(err) {
		t.Errorf("the connection made with the removed secret stays open: %v", err)
	}
	withNew.Write([]byte("ping"))
	b := make([]byte, 4)
	srvNew.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadFull(srvNew, b); err != nil {
		t.Errorf("the connection made with the new secret was cut: %v", err)
	}
	if _, err := dial(oldSecret); err == nil {
		t.Fatal("peer with the removed secret connected")
	}
	withOld.Close()
	withNew.Close()
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// TestDialFallsBackToTheOtherAcceptedSecrets: a node that uses the new
// secret reaches a peer that holds only the old one (down while the new one
// was installed) with the old one, and only with a secret it accepts.
func TestDialFallsBackToTheOtherAcceptedSecrets(t *testing.T) {
	behind, accepted := layerWith(t, keyringtest.Secrets(t, oldSecret), nil, nil)
	leader, _ := layerWith(t, keyringtest.Secrets(t, newSecret, oldSecret), nil, nil)
	c, err := leader.Dial(raft.ServerAddress(behind.Addr().String()), 5*time.Second)
	if err != nil {
		t.Fatalf("the leader could not reach a peer holding the old secret: %v", err)
	}
	c.Close()
	(<-accepted).Close()
	if got := behind.Refused()[RefusedSecret]; got != 1 {
		t.Errorf("the peer refused %d proofs, want 1 (the new secret's)", got)
	}
	alone, _ := layerWith(t, keyringtest.Secrets(t, newSecret), nil, nil)
	if _, err := alone.Dial(raft.ServerAddress(behind.Addr().String()), 5*time.Second); err == nil {
		t.Fatal("a node without the old secret reached a peer that holds only the old one")
	}
}

// TestStreamBindsTheClusterID: the handshake proves the cluster id with the
// secret; peers of two clusters are refused, and a peer without an id yet
// (forming, or waiting to be added) is accepted.
func TestStreamBindsTheClusterID(t *testing.T) {
	cases := []struct {
		desc                 string
		server, client       string
		oldServer, oldClient bool // an earlier release: no ALPN, handshake version 1
		ok                   bool
	}{
		{desc: "same cluster", server: "c1", client: "c1", ok: true},
		{desc: "client not in a cluster yet", server: "c1", client: "", ok: true},
		{desc: "server not in a cluster yet", server: "", client: "c1", ok: true},
		{desc: "neither has an id (formation)", server: "", client: "", ok: true},
		{desc: "two clusters sharing a secret", server: "c1", client: "c2", ok: false},
		{desc: "rolling upgrade: a server of an earlier release", server: "c1", client: "c1", oldServer: true, ok: true},
		{desc: "rolling upgrade: a client of an earlier release", server: "c1", client: "c1", oldClient: true, ok: true},
	}
	for _, c := range cases {
		t.Run(c.desc, func(t *testing.T) {
			srv, accepted := testLayer(t, testSecret, nil, Options{})
			cli, _ := testLayer(t, testSecret, nil, Options{})
			setID := func(l *Layer, id string) { l.SetClusterID(func() string { return id }) }
			setID(srv, c.server)
			setID(cli, c.client)
			if c.oldServer {
				srv.serverTLS.NextProtos = nil
			}
			if c.oldClient {
				cli.clientTLS.NextProtos = nil
			}
			conn, err := cli.Dial(raft.ServerAddress(srv.Addr().String()), 5*time.Second)
			if !c.ok {
				if err == nil {
					conn.Close()
					t.Fatal("connected across clusters")
				}
				if !strings.Contains(err.Error(), "c1") || !strings.Contains(err.Error(), "c2") {
					t.Errorf("error %q does not name both clusters", err)
				}
				select {
				case <-accepted:
					t.Error("a peer of another cluster reached Accept")
				case <-time.After(100 * time.Millisecond):
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			echoCheck(t, conn, accepted)
		})
	}
}
