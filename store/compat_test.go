package store

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tether-proxy/tether/store/command"
	"github.com/tether-proxy/tether/test/testutil"
)

// TestOlderNodeStopsAtANewCommandAndCatchesUpWhenUpgraded: in a rolling
// upgrade, a node whose binary does not know a command that is not marked
// ignorable applies nothing from that entry on and never counts it as
// durable (the leader would activate a key it never stored), names the
// version it needs once in its log, and, restarted with the newer binary,
// applies the entry and everything after it.
func TestOlderNodeStopsAtANewCommandAndCatchesUpWhenUpgraded(t *testing.T) {
	c := newTestCluster(t, 2, knobs{})
	old := &testNode{id: "n3", dir: t.TempDir(), bind: "127.0.0.1:0", commands: Commands[:command.TypeSetClusterID-1], logs: &syncBuffer{}}
	t.Cleanup(func() {
		if old.s != nil {
			old.s.Shutdown()
		}
	})
	c.nodes = append(c.nodes, old)
	c.start(old)
	old.bind = old.s.Addr() // a restart keeps the address
	c.bootstrap()
	if l := c.leader(); l == old {
		if err := old.s.TransferLeadership(); err != nil {
			t.Fatal(err)
		}
	}
	before := c.apply(InstallKey{Key: testKey("k1", 0)}, c.nodes[:2]...)
	c.converged(before)

	// The old node's own Apply refuses what its FSM would not apply.
	if _, err := old.s.Apply(SetClusterID{ID: "x"}); !errors.Is(err, ErrUnsupported) {
		t.Fatalf("older node's Apply(SetClusterID): %v, want ErrUnsupported", err)
	}
	stop := c.apply(SetClusterID{ID: "c1"}, c.nodes[:2]...)
	after := c.apply(InstallKey{Key: testKey("k2", 0)}, c.nodes[:2]...)
	c.converged(after, c.nodes[:2]...)
	for _, nd := range c.nodes[:2] {
		testutil.Eventually(t, 10*time.Second, nd.id+" durable past the new command", func() bool { return nd.s.DurableIndex() >= after })
	}
	testutil.Eventually(t, 10*time.Second, "the older node to stop at the new command", func() bool {
		idx, _ := old.s.Stopped()
		return idx == stop
	})
	// Give it every chance to count the entry: more writes, a snapshot try.
	last := c.apply(SetDrain{Cluster: "web", Destination: "d1", Deadline: t0}, c.nodes[:2]...)
	c.converged(last, c.nodes[:2]...)
	if err := old.s.Snapshot(); err == nil {
		t.Error("the older node took a snapshot above an entry it did not apply")
	}
	if a, d := old.s.AppliedIndex(), old.s.DurableIndex(); a >= stop || d >= stop {
		t.Errorf("older node: applied %d, durable %d; want both below the entry it cannot apply (%d)", a, d, stop)
	}
	if old.ring.Len() != 1 || old.s.ClusterID() != "" {
		t.Errorf("older node applied entries after the one it stopped at: %d keys, cluster %q", old.ring.Len(), old.s.ClusterID())
	}
	logs := old.logs.(*syncBuffer).String()
	if n := strings.Count(logs, `msg="raft entry`); n != 1 || !strings.Contains(logs, "type 7 v1") || !strings.Contains(logs, "upgrade tether") {
		t.Errorf("want one log line naming command type 7 v1 and asking for an upgrade; got %d:\n%s", n, logs)
	}
	if l := c.leader(); l == old {
		t.Error("a node that stopped applying leads")
	}

	// Upgrade: the same data dir, this binary's command set.
	c.stop(old)
	old.commands, old.logs = "", nil
	c.start(old)
	c.converged(last)
	if idx, _ := old.s.Stopped(); idx != 0 {
		t.Errorf("upgraded node still stopped at %d", idx)
	}
	testutil.Eventually(t, 10*time.Second, "the upgraded node durable past every entry", func() bool { return old.s.DurableIndex() >= last })
}

// TestOlderNodeStaysStoppedThroughASnapshotOfANewCommand: a node that
// stopped at a command it does not apply is down while the leader
// compacts its log past that entry; restarted with the same binary, it is
// sent the leader's snapshot, which holds that command. It refuses the
// snapshot exactly as it refused the entry (stopped, one ERROR line naming
// what to upgrade, never the leader) and keeps the state it had; restarted
// with the newer binary it installs the snapshot and applies on.
func TestOlderNodeStaysStoppedThroughASnapshotOfANewCommand(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-node cluster")
	}
	c := newTestCluster(t, 2, knobs{snapshotThreshold: 4, trailingLogs: 2})
	old := &testNode{id: "n3", dir: t.TempDir(), bind: "127.0.0.1:0", commands: Commands[:command.TypeSetClusterID-1], logs: &syncBuffer{}}
	t.Cleanup(func() {
		if old.s != nil {
			old.s.Shutdown()
		}
	})
	c.nodes = append(c.nodes, old)
	c.start(old)
	old.bind = old.s.Addr()
	c.bootstrap()
	if l := c.leader(); l == old {
		if err := old.s.TransferLeadership(); err != nil {
			t.Fatal(err)
		}
	}
	before := c.apply(InstallKey{Key: testKey("k1", 0)}, c.nodes[:2]...)
	c.converged(before)
	stop := c.apply(SetClusterID{ID: "c1"}, c.nodes[:2]...)
	testutil.Eventually(t, 10*time.Second, "the older node to stop at the new command", func() bool {
		idx, _ := old.s.Stopped()
		return idx == stop
	})

	// Down while the leader writes on and compacts past what it holds.
	c.stop(old)
	var last uint64
	for i := range 12 {
		last = c.apply(SetDrain{Cluster: "web", Destination: fmt.Sprintf("d%d", i), Deadline: t0}, c.nodes[:2]...)
	}
	c.converged(last, c.nodes[:2]...)
	for _, nd := range c.nodes[:2] {
		if err := nd.s.Snapshot(); err != nil {
			t.Fatal(err)
		}
		testutil.Eventually(t, 10*time.Second, nd.id+" compacted past the new command", func() bool {
			first, err := nd.s.logs.FirstIndex()
			return err == nil && first > stop+1
		})
	}

	// Restarted with the same older binary.
	logs := &syncBuffer{}
	old.logs = logs
	c.start(old)
	testutil.Eventually(t, 20*time.Second, "the older node to be sent the leader's snapshot (refused, or installed)", func() bool {
		return strings.Contains(logs.String(), "raft snapshot") || old.s.AppliedIndex() >= stop
	})
	if idx, need := old.s.Stopped(); idx == 0 {
		t.Fatalf("older node restarted with the same binary: not stopped (applied %d, cluster %q); want stopped as at the entry", old.s.AppliedIndex(), old.s.ClusterID())
	} else if !strings.Contains(need, "upgrade tether") {
		t.Fatalf("stopped, but the reason does not ask for an upgrade: %q", need)
	}
	// Give it time to be offered the snapshot again and to apply anything.
	more := c.apply(SetDrain{Cluster: "web", Destination: "late", Deadline: t0}, c.nodes[:2]...)
	c.converged(more, c.nodes[:2]...)
	testutil.Eventually(t, 10*time.Second, "the older node to be offered the snapshot again", func() bool {
		return strings.Count(logs.String(), "failed to create snapshot to install")+strings.Count(logs.String(), "failed to install snapshot") > 0 ||
			strings.Count(logs.String(), "failed to restore snapshot") > 1
	})
	if idx, need := old.s.Stopped(); idx == 0 || !strings.Contains(need, "upgrade tether") {
		t.Fatalf("older node after the snapshot of a new command: stopped at %d (%q); want stopped", idx, need)
	}
	if old.s.ClusterID() != "" || len(old.s.Drains()) != 0 {
		t.Errorf("older node took state from a snapshot it does not understand: cluster %q, %d drains", old.s.ClusterID(), len(old.s.Drains()))
	}
	if a := old.s.AppliedIndex(); a >= stop {
		t.Errorf("older node applied index %d, want below the entry it cannot apply (%d)", a, stop)
	}
	out := logs.String()
	if n := strings.Count(out, "level=ERROR msg=\"raft snapshot"); n != 1 || !strings.Contains(out, "command type 7 v1") {
		t.Errorf("want one ERROR line naming command type 7 v1 and asking for an upgrade; got %d:\n%s", n, out)
	}
	if l := c.leader(); l == old {
		t.Error("a node that stopped applying leads")
	}

	// Restarted with the same older binary again: still stopped.
	c.stop(old)
	logs = &syncBuffer{}
	old.logs = logs
	c.start(old)
	testutil.Eventually(t, 20*time.Second, "the older node to stop again", func() bool {
		idx, _ := old.s.Stopped()
		return idx != 0
	})
	if old.s.ClusterID() != "" {
		t.Errorf("older node restarted again took the new state: cluster %q", old.s.ClusterID())
	}

	// Upgraded: installs the snapshot and applies on.
	c.stop(old)
	old.commands, old.logs = "", nil
	c.start(old)
	c.converged(more)
	if idx, _ := old.s.Stopped(); idx != 0 {
		t.Errorf("upgraded node still stopped at %d", idx)
	}
	if old.s.ClusterID() != "c1" {
		t.Errorf("upgraded node: cluster %q, want c1", old.s.ClusterID())
	}
}

// A node whose every snapshot holds a command its binary does not apply
// cannot start from any of them: Open says so and asks for the upgrade
// (raft alone would only fail to load any snapshot).
func TestOpenWithOnlySnapshotsOfANewerCommandAsksForAnUpgrade(t *testing.T) {
	c := newTestCluster(t, 1, knobs{})
	c.bootstrap()
	nd := c.nodes[0]
	c.apply(SetClusterID{ID: "c1"})
	last := c.apply(InstallKey{Key: testKey("k1", 0)})
	c.converged(last)
	if err := nd.s.Snapshot(); err != nil {
		t.Fatal(err)
	}
	c.stop(nd)
	nd.commands = Commands[:command.TypeSetClusterID-1]
	_, err := Open(c.config(nd), withKnobs(c.netKnobs()))
	if err == nil || !strings.Contains(err.Error(), "newer tether") || !strings.Contains(err.Error(), "SetClusterID") && !strings.Contains(err.Error(), "type 7") || !strings.Contains(err.Error(), "upgrade tether") {
		t.Fatalf("Open with an older command set: %v; want an error naming command type 7 and asking for an upgrade", err)
	}
	nd.commands = ""
	c.start(nd)
	c.converged(last)
}
