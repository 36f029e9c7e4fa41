package store

import (
	"errors"
	"os"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/tether-proxy/tether/test/testutil"
)

// TestDiskThatCannotPersistIsReportedOnceAndRecovers: with snapshots
// failing (a full disk), the node says so once in its log, reports it
// (PersistFailure), keeps its durable index below the change it could not
// persist, and retries; once the disk works again it says so and the
// durable index catches up.
func TestDiskThatCannotPersistIsReportedOnceAndRecovers(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for the snapshotter's retries")
	}
	var full atomic.Bool
	c := newTestCluster(t, 0, knobs{snapshotFault: func() error {
		if full.Load() {
			return &os.PathError{Op: "write", Path: "snapshots", Err: syscall.ENOSPC}
		}
		return nil
	}})
	logs := &syncBuffer{}
	nd := &testNode{id: "n1", dir: t.TempDir(), bind: "127.0.0.1:0", logs: logs}
	t.Cleanup(func() { nd.s.Shutdown() })
	c.nodes = append(c.nodes, nd)
	c.start(nd)
	c.bootstrap()
	c.converged(c.apply(SetClusterID{ID: "c1"}))
	testutil.Eventually(t, 5*time.Second, "the first snapshot", func() bool { return nd.s.DurableIndex() >= nd.s.AppliedIndex() })

	full.Store(true)
	idx := c.apply(InstallKey{Key: testKey("k1", 0)})
	testutil.Eventually(t, 10*time.Second, "three failed snapshot tries", func() bool { _, n := nd.s.PersistFailure(); return n >= 3 })
	pf, _ := nd.s.PersistFailure()
	if pf == nil || !strings.Contains(pf.Err, "no space left") {
		t.Fatalf("PersistFailure() = %+v, want the ENOSPC error", pf)
	}
	if d := nd.s.DurableIndex(); d >= idx {
		t.Errorf("durable index %d covers the install at %d that was never persisted", d, idx)
	}
	if n := strings.Count(logs.String(), "cannot persist raft state"); n != 1 {
		t.Errorf("%d log lines about the disk, want 1:\n%s", n, logs.String())
	}

	full.Store(false)
	// The durable index moves with the snapshot, and the failure is
	// cleared just after it: wait for both.
	testutil.Eventually(t, 10*time.Second, "the durable index to catch up and the failure to clear once the disk works", func() bool {
		pf, _ := nd.s.PersistFailure()
		return nd.s.DurableIndex() >= idx && pf == nil
	})
	// The line is written just after the failure is cleared: wait for it.
	testutil.Eventually(t, 5*time.Second, "the log line for the recovery", func() bool {
		return strings.Contains(logs.String(), "raft state persists again")
	})
}

// TestShutdownPersistsWhatTheSnapshotterHadNotYet: a change applied just
// before a graceful stop, before the snapshotter wrote it, is still there
// when the node restarts alone (no leader, so no log replay).
func TestShutdownPersistsWhatTheSnapshotterHadNotYet(t *testing.T) {
	var behind atomic.Bool
	c := newTestCluster(t, 3, knobs{snapshotFault: func() error {
		if behind.Load() {
			return errors.New("the snapshotter has not got there yet")
		}
		return nil
	}})
	c.bootstrap()
	idx := c.apply(SetClusterID{ID: "c1"})
	c.converged(idx)
	behind.Store(true)
	idx = c.apply(SetDrain{Cluster: "web", Destination: "d1", Deadline: t0.Add(time.Hour)})
	c.converged(idx)
	for _, nd := range c.nodes {
		if nd.s.DurableIndex() >= idx {
			t.Fatalf("%s: a snapshot holds the drain already (durable %d)", nd.id, nd.s.DurableIndex())
		}
	}
	behind.Store(false)
	for _, nd := range c.nodes {
		c.stop(nd)
	}
	for _, nd := range c.nodes {
		c.start(nd) // alone: no peer is running, no leader, no log replay
		if d := nd.s.Drains(); len(d) != 1 || d[0].Destination != "d1" {
			t.Errorf("%s after a restart alone: drains %v", nd.id, d)
		}
		c.stop(nd)
	}
}
