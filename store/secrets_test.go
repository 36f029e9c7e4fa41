package store

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/tether-proxy/tether/keyring"
	"github.com/tether-proxy/tether/keyring/keyringtest"
	"github.com/tether-proxy/tether/store/command"
	"github.com/tether-proxy/tether/test/testutil"
)

var (
	oldSecret = []byte("the-old-cluster-secret-0123456789")
	newSecret = []byte("the-new-cluster-secret-9876543210")
	badSecret = []byte("a-secret-nobody-in-the-cluster-has")
)

// secretFSM is an FSM whose node holds sec.
func secretFSM(t *testing.T, sec *keyring.Secrets) *fsm {
	t.Helper()
	return newFSM(newRing(), sec, testLogger())
}

func applyTo(t *testing.T, f *fsm, cmds ...Command) []error {
	t.Helper()
	var errs []error
	for _, c := range cmds {
		b, err := command.Encode(f.sec.KEK(keyring.InfoRaft), c)
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
	a, b := secretFSM(t, keyringtest.Secrets(t, oldSecret)), secretFSM(t, keyringtest.Secrets(t, oldSecret))
	oldID, newID := keyring.SecretID(oldSecret), keyring.SecretID(newSecret)
	leader := keyringtest.Secrets(t, oldSecret)
	cmds := []Command{
		installOf(t, "r1", leader, newSecret),
		ClusterSecret{ReqID: "r2", Op: SecretRemove, ID: oldID},
		ClusterSecret{ReqID: "r3", Op: SecretUse, ID: keyring.SecretID(badSecret)},
		ClusterSecret{ReqID: "r4", Op: SecretUse, ID: newID},
		InstallKey{ReqID: "r5", Key: testKey("k1", 0)},
		ClusterSecret{ReqID: "r6", Op: SecretRemove, ID: newID},
		ClusterSecret{ReqID: "r7", Op: SecretRemove, ID: oldID},
		ClusterSecret{ReqID: "r8", Op: SecretRemove, ID: oldID},
	}
	want := []error{nil, ErrSecretInUse, ErrUnknownSecret, nil, nil, ErrSecretInUse, nil, nil}
	// Entries after the use are wrapped under the new secret by the
	// leader, which uses it from then on.
	after := keyringtest.Secrets(t, newSecret, oldSecret)
	for _, f := range []*fsm{a, b} {
		for i, c := range cmds {
			kek := leader.KEK(keyring.InfoRaft)
			if i >= 4 {
				kek = after.KEK(keyring.InfoRaft)
			}
			b, err := command.Encode(kek, c)
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
	c := secretFSM(t, keyringtest.Secrets(t, oldSecret))
	lead := keyringtest.Secrets(t, oldSecret)
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
	src := secretFSM(t, keyringtest.Secrets(t, oldSecret))
	oldID, newID := keyring.SecretID(oldSecret), keyring.SecretID(newSecret)
	applyTo(t, src, installOf(t, "r1", keyringtest.Secrets(t, oldSecret), newSecret), ClusterSecret{ReqID: "r2", Op: SecretUse, ID: newID})
	applyTo(t, src, InstallKey{ReqID: "r3", Key: testKey("k1", 0)}) // wrapped under the new secret now
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
	dst := secretFSM(t, keyringtest.Secrets(t, oldSecret))
	if err := dst.Restore(io.NopCloser(bytes.NewReader(snapshot()))); err != nil {
		t.Fatalf("restore on a node that holds the old secret: %v", err)
	}
	if dst.dump() != src.dump() || dst.sec.PrimaryID() != newID {
		t.Fatalf("restored:\n%s\nwant\n%s\nsecrets %+v", dst.dump(), src.dump(), dst.sec.List())
	}
	applyTo(t, src, ClusterSecret{ReqID: "r4", Op: SecretRemove, ID: oldID})
	late := secretFSM(t, keyringtest.Secrets(t, oldSecret))
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
		nd.secrets = keyringtest.Secrets(t, oldSecret)
		c.stop(nd)
		c.start(nd)
	}
	c.bootstrap()
	l := c.leader()
	c.apply(InstallKey{ReqID: "k1", Key: testKey("k1", 0)})
	oldID, newID := keyring.SecretID(oldSecret), keyring.SecretID(newSecret)
	c.apply(installOf(t, "s1", c.leader().s.secrets, newSecret))
	c.apply(InstallKey{ReqID: "k2", Key: testKey("k2", time.Hour)})
	c.apply(ClusterSecret{ReqID: "s2", Op: SecretUse, ID: newID})
	c.apply(InstallKey{ReqID: "k3", Key: testKey("k3", 2*time.Hour)})
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
	idx = c.apply(InstallKey{ReqID: "k4", Key: testKey("k4", 3*time.Hour)})
	testutil.Eventually(t, 10*time.Second, "the restarted node catches up", func() bool { return f.s.AppliedIndex() >= idx })
	c.converged(idx)
}
