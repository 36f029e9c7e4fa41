package store

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/tether-proxy/tether/keyring"
	"github.com/tether-proxy/tether/test/testutil"
)

var (
	oldSecret = []byte("the-old-cluster-secret-0123456789")
	newSecret = []byte("the-new-cluster-secret-9876543210")
	badSecret = []byte("a-secret-nobody-in-the-cluster-has")
)

// secretsOf holds the given secrets, the first one primary.
func secretsOf(t testing.TB, secrets ...[]byte) *keyring.Secrets {
	t.Helper()
	var held []keyring.HeldSecret
	for i, s := range secrets {
		st := keyring.SecretInstalled
		if i == 0 {
			st = keyring.SecretPrimary
		}
		held = append(held, keyring.HeldSecret{ID: keyring.SecretID(s), State: st, Secret: s})
	}
	sec, err := keyring.RestoreSecrets(held)
	if err != nil {
		t.Fatal(err)
	}
	return sec
}

// layerWith is testLayer with the given secrets, logger and clock.
func layerWith(t *testing.T, sec *keyring.Secrets, logger *slog.Logger, now func() time.Time) (*streamLayer, <-chan net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if logger == nil {
		logger = testLogger()
	}
	l, err := newStreamLayer(ln, ln.Addr().String(), sec, nil, &knobs{handshakeTimeout: 2 * time.Second, now: now}, logger)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close(); l.wait() })
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

// v1Client runs handshake version 1 as a peer of an earlier release does:
// TLS 1.3 without ALPN, then HMAC(authKey, "client" | exporter). It returns
// whether the server answered with its own proof.
func v1Client(t *testing.T, addr string, secret []byte) bool {
	t.Helper()
	c, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS13})
	if err != nil {
		return false
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	cs := c.ConnectionState()
	ekm, err := cs.ExportKeyingMaterial("EXPORTER-tether-raft-auth-v1", nil, 32)
	if err != nil {
		t.Fatal(err)
	}
	authKey, _ := keyring.DeriveKEK(secret, "tether raft transport v1")
	mac := func(role string) []byte {
		m := hmac.New(sha256.New, authKey)
		m.Write([]byte(role))
		m.Write(ekm)
		return m.Sum(nil)
	}
	if _, err := c.Write(mac("client")); err != nil {
		return false
	}
	got := make([]byte, 32)
	if _, err := io.ReadFull(c, got); err != nil {
		return false
	}
	return hmac.Equal(got, mac("server"))
}

// TestRefusedRaftConnectionsAreLoggedOncePerReasonWithACount: 40 plain TCP
// clients and 40 TLS clients with a wrong proof make two log lines, one per
// reason; after 30 s the next refusal's line says how many were held back;
// every refusal is counted by reason.
func TestRefusedRaftConnectionsAreLoggedOncePerReasonWithACount(t *testing.T) {
	var logs syncBuffer
	var mu sync.Mutex
	now := t0
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	l, accepted := layerWith(t, secretsOf(t, testSecret), slog.New(slog.NewTextHandler(&logs, nil)), clock)
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
	counts := l.refusedCounts()
	if counts[RefusedSecret] != 41 || counts[RefusedTLS]+counts[RefusedClosed] != 40 {
		t.Fatalf("refusals by reason: %v, want %d %s and 40 tls or closed", counts, 41, RefusedSecret)
	}
}

// TestHandshakeVersion1FollowsThePolicy: a peer of an earlier release (no
// ALPN) completes version 1 while the policy allows it and is refused,
// without a proof from the server, once it does not; the client side
// refuses a server that chooses no ALPN the same way.
func TestHandshakeVersion1FollowsThePolicy(t *testing.T) {
	l, accepted := layerWith(t, secretsOf(t, testSecret), nil, nil)
	addr := l.Addr().String()
	if !v1Client(t, addr, testSecret) {
		t.Fatal("a version 1 peer with the secret was refused while version 1 is allowed")
	}
	(<-accepted).Close()
	if v1Client(t, addr, badSecret) {
		t.Fatal("a version 1 peer without the secret got the server's proof")
	}
	allow := false
	l.allowV1.Store(func() *func() bool { f := func() bool { return allow }; return &f }())
	if v1Client(t, addr, testSecret) {
		t.Fatal("a version 1 peer with the secret got the server's proof once version 1 is refused")
	}
	if c := l.refusedCounts()[RefusedV1]; c != 1 {
		t.Errorf("refusals of version 1 counted %d, want 1", c)
	}

	// A server of an earlier release: TLS without ALPN, then the version 1
	// exchange.
	old, _ := layerWith(t, secretsOf(t, testSecret), nil, nil)
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
	sec := secretsOf(t, oldSecret, newSecret)
	srv, accepted := layerWith(t, sec, nil, nil)
	addr := raft.ServerAddress(srv.Addr().String())
	dial := func(secret []byte) (net.Conn, error) {
		cl, _ := layerWith(t, secretsOf(t, secret), nil, nil)
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

// feedSecrets is feed for an FSM whose node holds sec.
func secretFSM(t *testing.T, sec *keyring.Secrets) *fsm {
	t.Helper()
	return newFSM(newRing(), sec, testLogger())
}

func applyTo(t *testing.T, f *fsm, cmds ...Command) []error {
	t.Helper()
	var errs []error
	for _, c := range cmds {
		b, err := encodeCommand(f.sec.KEK(keyring.InfoRaft), c)
		if err != nil {
			t.Fatalf("encode %T: %v", c, err)
		}
		idx := f.index.Load() + 1
		errs = append(errs, f.Apply(&raft.Log{Index: idx, Type: raft.LogCommand, Data: b}).(applyResponse).err)
	}
	return errs
}

// installOf is the install command of secret, wrapped by a node that holds
// sec.
func installOf(t *testing.T, req string, sec *keyring.Secrets, secret []byte) ClusterSecret {
	t.Helper()
	w, under, err := sec.WrapSecret(secret)
	if err != nil {
		t.Fatal(err)
	}
	return ClusterSecret{ReqID: req, Op: SecretInstall, ID: keyring.SecretID(secret), Wrapped: w, Under: under}
}

// TestClusterSecretRotationInTheFSM: install, use and remove as log entries
// applied by two nodes that both start with the old secret: both learn the
// new one, make it primary, retire the old one, and end with the same
// state; the rules (remove the primary, use an unknown secret, more than
// MaxSecrets) refuse with their errors on both.
func TestClusterSecretRotationInTheFSM(t *testing.T) {
	a, b := secretFSM(t, secretsOf(t, oldSecret)), secretFSM(t, secretsOf(t, oldSecret))
	oldID, newID := keyring.SecretID(oldSecret), keyring.SecretID(newSecret)
	leader := secretsOf(t, oldSecret)
	cmds := []Command{
		installOf(t, "r1", leader, newSecret),
		ClusterSecret{ReqID: "r2", Op: SecretRemove, ID: oldID},
		ClusterSecret{ReqID: "r3", Op: SecretUse, ID: keyring.SecretID(badSecret)},
		ClusterSecret{ReqID: "r4", Op: SecretUse, ID: newID},
		InstallKey{"r5", testKey("k1", 0)},
		ClusterSecret{ReqID: "r6", Op: SecretRemove, ID: newID},
		ClusterSecret{ReqID: "r7", Op: SecretRemove, ID: oldID},
		ClusterSecret{ReqID: "r8", Op: SecretRemove, ID: oldID},
	}
	want := []error{nil, ErrSecretInUse, ErrUnknownSecret, nil, nil, ErrSecretInUse, nil, nil}
	// Entries after the use are wrapped under the new secret by the
	// leader, which uses it from then on.
	after := secretsOf(t, newSecret, oldSecret)
	for _, f := range []*fsm{a, b} {
		for i, c := range cmds {
			kek := leader.KEK(keyring.InfoRaft)
			if i >= 4 {
				kek = after.KEK(keyring.InfoRaft)
			}
			b, err := encodeCommand(kek, c)
			if err != nil {
				t.Fatal(err)
			}
			idx := f.index.Load() + 1
			got := f.Apply(&raft.Log{Index: idx, Type: raft.LogCommand, Data: b}).(applyResponse).err
			if !errors.Is(got, want[i]) || (want[i] == nil) != (got == nil) {
				t.Fatalf("entry %d (%+v): %v, want %v", i+1, c, got, want[i])
			}
		}
		if f.sec.PrimaryID() != newID || f.sec.State(oldID) != keyring.SecretRetired {
			t.Fatalf("after the rotation: %+v", f.sec.List())
		}
		if kk := f.ring.Snapshot(); len(kk) != 1 {
			t.Fatalf("key installed under the new secret: %d keys", len(kk))
		}
	}
	if a.dump() != b.dump() {
		t.Fatalf("the two FSMs differ:\n%s\n%s", a.dump(), b.dump())
	}
	if !strings.Contains(a.dump(), "secret removed "+oldID) {
		t.Fatalf("dump:\n%s", a.dump())
	}
	// A fifth secret is refused.
	c := secretFSM(t, secretsOf(t, oldSecret))
	lead := secretsOf(t, oldSecret)
	for i := range keyring.MaxSecrets {
		s := []byte(strings.Repeat("s", 20) + string(rune('a'+i)))
		errs := applyTo(t, c, installOf(t, "i"+string(rune('a'+i)), lead, s))
		if wantErr := i == keyring.MaxSecrets-1; (errs[0] != nil) != wantErr || (wantErr && !errors.Is(errs[0], ErrTooManySecrets)) {
			t.Fatalf("install %d: %v", i+1, errs[0])
		}
	}
}

// TestSnapshotCarriesANewSecretToANodeThatHoldsTheOld: a node that missed
// the log entries (it restores the leader's snapshot, keys wrapped under
// the new secret) learns the new secret from the snapshot's records while
// the old one is still held by the cluster; once the old one is removed a
// snapshot carries nothing it opens.
func TestSnapshotCarriesANewSecretToANodeThatHoldsTheOld(t *testing.T) {
	src := secretFSM(t, secretsOf(t, oldSecret))
	oldID, newID := keyring.SecretID(oldSecret), keyring.SecretID(newSecret)
	applyTo(t, src, installOf(t, "r1", secretsOf(t, oldSecret), newSecret), ClusterSecret{ReqID: "r2", Op: SecretUse, ID: newID})
	applyTo(t, src, InstallKey{"r3", testKey("k1", 0)}) // wrapped under the new secret now
	snapshot := func() []byte {
		s, err := src.Snapshot()
		if err != nil {
			t.Fatal(err)
		}
		b, err := s.(*fsmSnapshot).encode()
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	dst := secretFSM(t, secretsOf(t, oldSecret))
	if err := dst.Restore(io.NopCloser(bytes.NewReader(snapshot()))); err != nil {
		t.Fatalf("restore on a node that holds the old secret: %v", err)
	}
	if dst.dump() != src.dump() || dst.sec.PrimaryID() != newID {
		t.Fatalf("restored:\n%s\nwant\n%s\nsecrets %+v", dst.dump(), src.dump(), dst.sec.List())
	}
	applyTo(t, src, ClusterSecret{ReqID: "r4", Op: SecretRemove, ID: oldID})
	late := secretFSM(t, secretsOf(t, oldSecret))
	if err := late.Restore(io.NopCloser(bytes.NewReader(snapshot()))); err == nil {
		t.Fatal("a node holding only the removed secret restored the snapshot")
	}
	if late.sec.Has(newID) {
		t.Fatal("a node holding only the removed secret learned the new one")
	}
}

// TestClusterSecretRotatesInARaftCluster: three stores, the old secret on
// each; install, use and remove through the leader while keys are written:
// every node ends with the new secret primary, the old one retired and,
// once a snapshot covers the removal, forgotten; the same state; and a
// restarted node that kept its secrets reads its state.
func TestClusterSecretRotatesInARaftCluster(t *testing.T) {
	c := newTestCluster(t, 3, knobs{})
	for _, nd := range c.nodes {
		nd.secrets = secretsOf(t, oldSecret)
		c.stop(nd)
		c.start(nd)
	}
	c.bootstrap()
	l := c.leader()
	c.apply(InstallKey{"k1", testKey("k1", 0)})
	oldID, newID := keyring.SecretID(oldSecret), keyring.SecretID(newSecret)
	c.apply(installOf(t, "s1", c.leader().s.secrets, newSecret))
	c.apply(InstallKey{"k2", testKey("k2", time.Hour)})
	c.apply(ClusterSecret{ReqID: "s2", Op: SecretUse, ID: newID})
	c.apply(InstallKey{"k3", testKey("k3", 2*time.Hour)})
	idx := c.apply(ClusterSecret{ReqID: "s3", Op: SecretRemove, ID: oldID})
	c.converged(idx)
	for _, nd := range c.nodes {
		if nd.secrets.PrimaryID() != newID || nd.secrets.State(oldID) != keyring.SecretRetired {
			t.Fatalf("%s: %+v", nd.id, nd.secrets.List())
		}
		// The snapshot after the removal holds everything under the new
		// secret: the old one's bytes go.
		testutil.Eventually(t, 10*time.Second, nd.id+" forgets the removed secret", func() bool { return !nd.secrets.Has(oldID) })
	}
	// A node restarted with the secrets it kept reads its log and snapshot.
	f := c.nodes[0]
	if f == l {
		f = c.nodes[1]
	}
	kept, err := keyring.RestoreSecrets(f.secrets.Export())
	if err != nil {
		t.Fatal(err)
	}
	c.stop(f)
	f.secrets = kept
	c.start(f)
	idx = c.apply(InstallKey{"k4", testKey("k4", 3*time.Hour)})
	testutil.Eventually(t, 10*time.Second, "the restarted node catches up", func() bool { return f.s.AppliedIndex() >= idx })
	c.converged(idx)
}

// TestDialFallsBackToTheOtherAcceptedSecrets: a node that uses the new
// secret reaches a peer that holds only the old one (down while the new one
// was installed) with the old one, and only with a secret it accepts.
func TestDialFallsBackToTheOtherAcceptedSecrets(t *testing.T) {
	behind, accepted := layerWith(t, secretsOf(t, oldSecret), nil, nil)
	leader, _ := layerWith(t, secretsOf(t, newSecret, oldSecret), nil, nil)
	c, err := leader.Dial(raft.ServerAddress(behind.Addr().String()), 5*time.Second)
	if err != nil {
		t.Fatalf("the leader could not reach a peer holding the old secret: %v", err)
	}
	c.Close()
	(<-accepted).Close()
	if got := behind.refusedCounts()[RefusedSecret]; got != 1 {
		t.Errorf("the peer refused %d proofs, want 1 (the new secret's)", got)
	}
	alone, _ := layerWith(t, secretsOf(t, newSecret), nil, nil)
	if _, err := alone.Dial(raft.ServerAddress(behind.Addr().String()), 5*time.Second); err == nil {
		t.Fatal("a node without the old secret reached a peer that holds only the old one")
	}
}
