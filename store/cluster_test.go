package store

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/tether-proxy/tether/keyring"
	"github.com/tether-proxy/tether/test/testutil"
)

func TestClusterFormsReplicatesAndReelects(t *testing.T) {
	for _, n := range []int{3, 5} {
		t.Run(fmt.Sprintf("%d nodes", n), func(t *testing.T) { testFormReplicateReelect(t, n) })
	}
}

func testFormReplicateReelect(t *testing.T, n int) {
	c := newTestCluster(t, n, knobs{})
	c.bootstrap()
	l := c.leader()

	// Writes on a follower are refused with ErrNotLeader.
	for _, nd := range c.nodes {
		if nd != l && !nd.s.IsLeader() {
			if _, err := nd.s.Apply(SetClusterID{ID: "c1"}); !errors.Is(err, ErrNotLeader) && !nd.s.IsLeader() {
				t.Fatalf("Apply on follower %s: err %v, want ErrNotLeader", nd.id, err)
			}
		}
	}
	c.apply(SetClusterID{ID: "c1"})
	c.apply(InstallKey{Key: testKey("k1", 0)})
	idx := c.apply(SetDrain{Cluster: "web", Destination: "d1", Deadline: t0.Add(time.Hour)})
	c.converged(idx)
	for _, nd := range c.nodes {
		if nd.s.ClusterID() != "c1" || nd.ring.Len() != 1 || len(nd.s.Drains()) != 1 {
			t.Fatalf("%s: cluster %q, %d keys, drains %v", nd.id, nd.s.ClusterID(), nd.ring.Len(), nd.s.Drains())
		}
	}

	// Leader loss: the other two elect a new leader and keep taking writes.
	c.stop(l)
	var rest []*testNode
	for _, nd := range c.nodes {
		if nd != l {
			rest = append(rest, nd)
		}
	}
	l2 := c.leader(rest...)
	if l2 == l {
		t.Fatal("stopped node still leads")
	}
	idx = c.apply(InstallKey{Key: testKey("k2", time.Hour)}, rest...)

	// The old leader restarts from its data dir and catches up.
	c.start(l)
	if !l.s.HadState() {
		t.Error("restarted node reports no prior state")
	}
	c.leader()
	dump := c.converged(idx)
	if l.ring.Len() != 2 {
		t.Errorf("restarted node has %d keys, want 2:\n%s", l.ring.Len(), dump)
	}
	if l.s.LeaderChanges() == 0 {
		t.Error("LeaderChanges is 0 on a node that saw leaders")
	}
}

func TestRestartAloneKeepsEveryCommittedKeyAndDrain(t *testing.T) {
	c := newTestCluster(t, 3, knobs{})
	c.bootstrap()
	day := 24 * time.Hour
	k1, k2, k3 := testKey("k1", 0), testKey("k2", 30*day), testKey("k3", 60*day)
	c.apply(SetClusterID{ID: "c1"})
	for _, k := range []keyring.Key{k1, k2, k3} {
		c.apply(InstallKey{Key: k})
	}
	c.apply(ActivateKey{ID: "k2", At: t0.Add(day)})
	c.apply(SetDrain{Cluster: "web", Destination: "d1", Deadline: t0.Add(time.Hour)})
	idx := c.apply(SetDrain{Cluster: "api", Destination: "d9", Deadline: t0.Add(2 * time.Hour)})
	c.converged(idx)
	testutil.Eventually(t, 10*time.Second, "every node's DurableIndex to reach the last write", func() bool {
		for _, nd := range c.nodes {
			if nd.s.DurableIndex() < idx {
				return false
			}
		}
		return true
	})

	// Values sealed under each key, by rings that hold only that key.
	purpose := keyring.Purpose("test")
	sealed := map[string]string{}
	for _, k := range []keyring.Key{k1, k2, k3} {
		k.Activates = t0
		r := newRing()
		if err := r.Install(k); err != nil {
			t.Fatal(err)
		}
		v, err := r.SealAt(t0.Add(time.Hour), purpose, []byte("value of "+k.ID))
		if err != nil {
			t.Fatal(err)
		}
		sealed[k.ID] = v
	}

	for _, nd := range c.nodes {
		c.stop(nd)
	}
	alone := c.nodes[1]
	c.start(alone) // no peer is running: no leader, no log replay
	if alone.s.IsLeader() {
		t.Fatal("a lone node of three became leader")
	}
	for id, v := range sealed {
		got, err := alone.ring.OpenAt(t0.Add(61*day), purpose, v)
		if err != nil || string(got) != "value of "+id {
			t.Errorf("value sealed under %s: %q, %v", id, got, err)
		}
	}
	if got := alone.ring.ActiveKeyID(t0.Add(2 * day)); got != "k2" {
		t.Errorf("activation of k2 lost: %q encrypts", got)
	}
	if d := alone.s.Drains(); len(d) != 2 || d[0].Cluster != "api" || d[1].Destination != "d1" {
		t.Errorf("drains after a lone restart: %v", d)
	}
	if alone.s.ClusterID() != "c1" {
		t.Errorf("cluster id after a lone restart: %q", alone.s.ClusterID())
	}

	// The others come back from their data dirs: the cluster re-forms
	// without a new bootstrap and takes writes again.
	for _, nd := range c.nodes {
		if nd != alone {
			c.start(nd)
		}
		if !nd.s.HadState() {
			t.Errorf("%s restarted without state", nd.id)
		}
	}
	idx = c.apply(SetDrain{Cluster: "web", Destination: "d2", Deadline: t0})
	c.converged(idx)
}

func TestSnapshotInstalledOnNodeFarBehind(t *testing.T) {
	c := newTestCluster(t, 3, knobs{snapshotThreshold: 4, trailingLogs: 2})
	c.bootstrap()
	c.leader()
	behind := c.nodes[2]
	c.stop(behind)
	rest := c.nodes[:2]
	var idx uint64
	for i := 0; i < 30; i++ {
		idx = c.apply(SetDrain{Cluster: "web", Destination: "d" + string(rune('a'+i%26)) + string(rune('0'+i/26)), Deadline: t0}, rest...)
	}
	c.converged(idx, rest...)
	l := c.leader(rest...)
	first, _ := l.s.logs.FirstIndex()
	if first <= 3 {
		t.Fatalf("leader's log still starts at %d: no compaction, the test would not need a snapshot", first)
	}
	c.start(behind)
	c.converged(idx)
	if n := len(behind.s.Drains()); n != 30 {
		t.Errorf("node restored from the leader's snapshot has %d drains, want 30", n)
	}
}

func TestMembershipChangesAreIdempotent(t *testing.T) {
	skipUnderRaceForAddressChange(t)
	c := newTestCluster(t, 3, knobs{})
	c.bootstrap()
	extra := c.addNode()
	core := c.nodes[:3]
	servers := func() map[string]Server {
		t.Helper()
		ss, err := c.leader(core...).s.Servers()
		if err != nil {
			t.Fatal(err)
		}
		m := map[string]Server{}
		for _, s := range ss {
			m[s.ID] = s
		}
		return m
	}
	// l is whichever node leads when a step runs (a loaded machine may
	// elect another one in between; every step is idempotent).
	var l *testNode
	steps := []struct {
		desc  string
		do    func() error
		check func(map[string]Server) bool
	}{
		{"add a non-voter", func() error { return l.s.AddNonvoter(extra.id, extra.s.Addr()) },
			func(m map[string]Server) bool { s, ok := m[extra.id]; return ok && !s.Voter }},
		{"adding the same non-voter again changes nothing", func() error { return l.s.AddNonvoter(extra.id, extra.s.Addr()) },
			func(m map[string]Server) bool { return len(m) == 4 && !m[extra.id].Voter }},
		{"AddVoter promotes the non-voter", func() error { return l.s.AddVoter(extra.id, extra.s.Addr()) },
			func(m map[string]Server) bool { return m[extra.id].Voter }},
		{"AddVoter of a voter changes nothing", func() error { return l.s.AddVoter(extra.id, extra.s.Addr()) },
			func(m map[string]Server) bool { return len(m) == 4 && m[extra.id].Voter }},
		{"AddNonvoter leaves a voter a voter", func() error { return l.s.AddNonvoter(extra.id, extra.s.Addr()) },
			func(m map[string]Server) bool { return m[extra.id].Voter }},
		{"DemoteVoter makes it a non-voter", func() error { return l.s.DemoteVoter(extra.id) },
			func(m map[string]Server) bool { return len(m) == 4 && !m[extra.id].Voter }},
		{"DemoteVoter of a non-voter changes nothing", func() error { return l.s.DemoteVoter(extra.id) },
			func(m map[string]Server) bool { return !m[extra.id].Voter }},
		{"same id at a new address is updated in place", func() error { return l.s.AddNonvoter(extra.id, "127.0.0.1:1") },
			func(m map[string]Server) bool { return len(m) == 4 && m[extra.id].Address == "127.0.0.1:1" }},
		{"same address under a new id is refused while the holder is in the configuration", func() error {
			if err := l.s.AddNonvoter("other", "127.0.0.1:1"); !errors.Is(err, ErrAddressTaken) {
				return fmt.Errorf("want ErrAddressTaken, got %w", err)
			}
			return nil
		}, func(m map[string]Server) bool { _, other := m["other"]; return len(m) == 4 && !other }},
		{"once the stale holder is removed, the new id takes the address", func() error {
			if err := l.s.RemoveServer(extra.id); err != nil {
				return err
			}
			return l.s.AddNonvoter("other", "127.0.0.1:1")
		}, func(m map[string]Server) bool {
			_, old := m[extra.id]
			return !old && m["other"].Address == "127.0.0.1:1"
		}},
		{"RemoveServer removes it", func() error { return l.s.RemoveServer("other") },
			func(m map[string]Server) bool { return len(m) == 3 }},
		{"RemoveServer of an unknown id changes nothing", func() error { return l.s.RemoveServer("other") },
			func(m map[string]Server) bool { return len(m) == 3 }},
	}
	for _, st := range steps {
		c.retry(st.desc, core, func(nd *testNode) error { l = nd; return st.do() })
		if m := servers(); !st.check(m) {
			t.Fatalf("%s: configuration %v", st.desc, m)
		}
	}
	l = c.leader(core...)
	if err := l.s.DemoteVoter("nobody"); err == nil {
		t.Error("DemoteVoter of an unknown id: no error")
	}
	for _, nd := range c.nodes[:3] {
		if nd != l {
			if err := nd.s.AddVoter("x", "127.0.0.1:2"); !errors.Is(err, ErrNotLeader) {
				t.Errorf("AddVoter on follower %s: %v, want ErrNotLeader", nd.id, err)
			}
		}
	}
}

func TestNonvoterReceivesReplicatedState(t *testing.T) {
	c := newTestCluster(t, 3, knobs{})
	c.bootstrap()
	extra := c.addNode()
	core := c.nodes[:3]
	c.retry("add a non-voter", core, func(l *testNode) error { return l.s.AddNonvoter(extra.id, extra.s.Addr()) })
	idx := c.apply(InstallKey{Key: testKey("k1", 0)}, core...)
	c.converged(idx)
	if extra.ring.Len() != 1 || extra.s.IsLeader() {
		t.Errorf("non-voter: %d keys, leader %t", extra.ring.Len(), extra.s.IsLeader())
	}
}

func TestMinorityPartitionLosesNoAcknowledgedWrite(t *testing.T) {
	c := newTestCluster(t, 5, knobs{})
	c.bootstrap()
	old := c.leader()
	acked := map[string]bool{}
	write := func(nodes []*testNode, dest string) uint64 {
		idx := c.apply(SetDrain{Cluster: "web", Destination: dest, Deadline: t0}, nodes...)
		acked[dest] = true
		return idx
	}
	write(nil, "before")

	// Cut the leader and one follower off: a minority of two.
	minority, majority := []*testNode{old}, []*testNode{}
	for _, nd := range c.nodes {
		switch {
		case nd == old:
		case len(minority) < 2:
			minority = append(minority, nd)
		default:
			majority = append(majority, nd)
		}
	}
	for _, nd := range minority {
		c.net.isolate(nd.s.Addr())
	}
	// The old leader cannot commit: its writes fail (not acknowledged).
	_, err := old.s.Apply(SetDrain{Cluster: "web", Destination: "lost", Deadline: t0})
	if err == nil {
		t.Fatal("a leader cut off from its quorum acknowledged a write")
	}
	if !errors.Is(err, ErrLeadershipLost) && !errors.Is(err, ErrNotLeader) {
		t.Errorf("write on the cut-off leader: %v, want ErrLeadershipLost or ErrNotLeader", err)
	}
	newLeader := c.leader(majority...)
	for _, nd := range minority {
		if nd == newLeader {
			t.Fatal("minority node leads the majority")
		}
	}
	for i := 0; i < 5; i++ {
		write(majority, "during"+string(rune('0'+i)))
	}
	testutil.Eventually(t, 10*time.Second, "the cut-off leader to step down", func() bool { return !old.s.IsLeader() })

	c.net.heal()
	idx := write(nil, "after")
	c.converged(idx)
	for _, nd := range c.nodes {
		got := map[string]bool{}
		for _, d := range nd.s.Drains() {
			got[d.Destination] = true
		}
		for dest := range acked {
			if !got[dest] {
				t.Errorf("%s lacks acknowledged write %s", nd.id, dest)
			}
		}
		if got["lost"] {
			t.Errorf("%s has the write the cut-off leader failed to commit", nd.id)
		}
	}
}

func TestApplyRetryWithSameRequestIDIsANoop(t *testing.T) {
	c := newTestCluster(t, 3, knobs{})
	c.bootstrap()
	c.apply(InstallKey{ReqID: "r1", Key: testKey("k1", 0)})
	c.apply(RevokeKey{ReqID: "r2", ID: "k1"})
	// A retry of r1 after the revoke must not reinstall or fail.
	c.apply(InstallKey{ReqID: "r1", Key: testKey("k1", 0)})
	l := c.leader()
	_, err := l.s.Apply(ActivateKey{ReqID: "r3", ID: "missing", At: t0})
	if !errors.Is(err, keyring.ErrUnknownKey) {
		t.Fatalf("first apply: %v, want ErrUnknownKey", err)
	}
	c.apply(InstallKey{ReqID: "r4", Key: testKey("missing", time.Hour)})
	_, err2 := l.s.Apply(ActivateKey{ReqID: "r3", ID: "missing", At: t0})
	if !errors.Is(err2, keyring.ErrUnknownKey) || err2.Error() != err.Error() {
		t.Fatalf("retry returned %v, want the first result %v", err2, err)
	}
	idx := c.apply(SetClusterID{ID: "c1"})
	c.converged(idx)
	for _, nd := range c.nodes {
		ks := nd.ring.Snapshot()
		if len(ks) != 2 || ks[0].ID != "k1" || !ks[0].Revoked {
			t.Errorf("%s: keys %v, want k1 revoked and missing", nd.id, ks)
		}
	}
	if _, err := l.s.Apply(SetClusterID{ID: "c2"}); !errors.Is(err, ErrClusterID) {
		t.Errorf("second cluster id: %v, want ErrClusterID", err)
	}
}

func TestChangedSignalsAppliedChangesOnEveryNode(t *testing.T) {
	c := newTestCluster(t, 3, knobs{})
	c.bootstrap()
	c.leader()
	drain := func(ch <-chan struct{}) {
		select {
		case <-ch:
		default:
		}
	}
	for _, nd := range c.nodes {
		drain(nd.s.Changed())
	}
	idx := c.apply(SetDrain{Cluster: "web", Destination: "d1", Deadline: t0})
	c.converged(idx)
	for _, nd := range c.nodes {
		select {
		case <-nd.s.Changed():
		case <-time.After(5 * time.Second):
			t.Errorf("%s: no Changed signal after a drain was applied", nd.id)
		}
	}
	// A command that changes nothing (the same cluster id again) does not
	// signal.
	idx = c.apply(SetClusterID{ID: "c1"})
	c.converged(idx)
	for _, nd := range c.nodes {
		drain(nd.s.Changed())
	}
	idx = c.apply(SetClusterID{ID: "c1"})
	c.converged(idx)
	for _, nd := range c.nodes {
		select {
		case <-nd.s.Changed():
			t.Errorf("%s: Changed signalled for a no-op", nd.id)
		default:
		}
	}
}

func TestWaitAppliedReachesTheCommitIndexAfterAnElection(t *testing.T) {
	c := newTestCluster(t, 3, knobs{})
	c.bootstrap()
	idx := c.apply(InstallKey{Key: testKey("k1", 0)})
	c.converged(idx)
	l := c.leader()
	c.stop(l)
	var rest []*testNode
	for _, nd := range c.nodes {
		if nd != l {
			rest = append(rest, nd)
		}
	}
	l2 := c.leader(rest...)
	// The new leader's term starts with a no-op entry the FSM never sees;
	// WaitApplied on the commit index must still return.
	testutil.Eventually(t, 5*time.Second, "the new leader to commit its no-op", func() bool { return l2.s.CommitIndex() > idx })
	for _, nd := range rest {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := nd.s.WaitApplied(ctx, l2.s.CommitIndex())
		cancel()
		if err != nil {
			t.Errorf("%s: %v", nd.id, err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := l2.s.WaitApplied(ctx, 1<<40); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("WaitApplied on a future index: %v, want the context's deadline", err)
	}
	if d := l2.s.DurableIndex(); d < idx {
		t.Errorf("DurableIndex %d < the install's index %d", d, idx)
	}
}

func TestRandomMinorityPartitionsLoseNoAcknowledgedWrite(t *testing.T) {
	c := newTestCluster(t, 5, knobs{})
	c.bootstrap()
	c.leader()
	rng := rand.New(rand.NewPCG(1, 2)) // fixed seed: the same rounds every run
	acked := map[string]bool{}
	for round := 0; round < 3; round++ {
		// Cut off a random minority (1 or 2 nodes), sometimes with the leader.
		perm := rng.Perm(len(c.nodes))
		cut := map[*testNode]bool{}
		for _, i := range perm[:1+rng.IntN(2)] {
			cut[c.nodes[i]] = true
		}
		var majority []*testNode
		for _, nd := range c.nodes {
			if cut[nd] {
				c.net.isolate(nd.s.Addr())
			} else {
				majority = append(majority, nd)
			}
		}
		for i := 0; i < 3; i++ {
			dest := fmt.Sprintf("r%d-%d", round, i)
			c.apply(SetDrain{Cluster: "web", Destination: dest, Deadline: t0}, majority...)
			acked[dest] = true
		}
		c.net.heal()
		c.leader()
	}
	idx := c.apply(SetClusterID{ID: "c1"})
	c.converged(idx)
	for _, nd := range c.nodes {
		got := map[string]bool{}
		for _, d := range nd.s.Drains() {
			got[d.Destination] = true
		}
		for dest := range acked {
			if !got[dest] {
				t.Errorf("%s lacks acknowledged write %s", nd.id, dest)
			}
		}
	}
}

func TestDurableChangedSignalsAfterTheSnapshot(t *testing.T) {
	c := newTestCluster(t, 3, knobs{})
	c.bootstrap()
	idx := c.apply(SetClusterID{ID: "c1"})
	c.converged(idx)
	for _, nd := range c.nodes {
		testutil.Eventually(t, 5*time.Second, "the first snapshot", func() bool { return nd.s.DurableIndex() >= idx })
		select {
		case <-nd.s.DurableChanged():
		default:
		}
	}
	idx = c.apply(InstallKey{Key: testKey("k1", 0)})
	for _, nd := range c.nodes {
		select {
		case <-nd.s.DurableChanged():
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: no DurableChanged signal after an install", nd.id)
		}
		// The signal may be for an earlier snapshot; the install's follows.
		testutil.Eventually(t, 5*time.Second, "the install to be durable", func() bool { return nd.s.DurableIndex() >= idx })
	}
}

// TestPeersFileRecoversFromLostQuorum: two of three nodes are lost for
// good; the operator writes peers.json naming the survivor, which then
// leads alone with every committed write, and takes new ones.
func TestPeersFileRecoversFromLostQuorum(t *testing.T) {
	c := newTestCluster(t, 3, knobs{})
	c.bootstrap()
	c.apply(SetClusterID{ID: "c1"})
	idx := c.apply(InstallKey{Key: testKey("k1", 0)})
	c.converged(idx)
	for _, nd := range c.nodes {
		c.stop(nd)
	}
	survivor := c.nodes[0]
	peers := fmt.Sprintf(`[{"id": %q, "address": %q, "non_voter": false}]`, survivor.id, survivor.bind)
	if err := os.WriteFile(filepath.Join(survivor.dir, PeersFile), []byte(peers), 0o600); err != nil {
		t.Fatal(err)
	}
	c.start(survivor)
	testutil.Eventually(t, 10*time.Second, "the survivor leading alone", func() bool { return survivor.s.IsLeader() })
	if _, err := os.Stat(filepath.Join(survivor.dir, PeersFile+".recovered")); err != nil {
		t.Fatalf("peers.json not marked recovered: %v", err)
	}
	if survivor.s.ClusterID() != "c1" || survivor.ring.Len() != 1 {
		t.Fatalf("state after recovery: cluster %q, %d keys", survivor.s.ClusterID(), survivor.ring.Len())
	}
	if _, err := survivor.s.Apply(InstallKey{Key: testKey("k2", 0)}); err != nil {
		t.Fatalf("write after recovery: %v", err)
	}
	servers, err := survivor.s.Servers()
	if err != nil || len(servers) != 1 || servers[0].ID != survivor.id {
		t.Fatalf("configuration after recovery: %v %v", servers, err)
	}
}
