package store

import (
	"errors"
	"strings"
	"testing"
	"time"

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
	old := &testNode{id: "n3", dir: t.TempDir(), bind: "127.0.0.1:0", commands: Commands[:typeSetClusterID-1], logs: &syncBuffer{}}
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
