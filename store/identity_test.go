package store

import (
	"sync"
	"testing"
	"time"

	"github.com/tether-proxy/tether/store/transport"
	"github.com/tether-proxy/tether/test/testutil"
)

// TestClustersSharingASecretNeverExchangeRaftRPCs: cluster B shares cluster
// A's secret (and could reach A's nodes through a reused address); its Raft
// transport asks A's nodes for votes with a huge term and appends entries:
// every RPC is refused and A's term never moves.
func TestClustersSharingASecretNeverExchangeRaftRPCs(t *testing.T) {
	a := newTestCluster(t, 3, knobs{})
	a.bootstrap()
	a.converged(a.apply(SetClusterID{ID: "cluster-a"}))
	b := newTestCluster(t, 1, knobs{})
	b.bootstrap()
	b.converged(b.apply(SetClusterID{ID: "cluster-b"}))
	term := a.leader().s.raft.CurrentTerm()
	from := b.nodes[0].s
	a.foreignRPCsRefused("cluster B", from.transport, "b1", from.Addr(), term, nil)
	a.converged(a.apply(InstallKey{Key: testKey("k1", 0)}))
}

// TestResolvedAddressOfAnotherClusterIsRefused: the resolver of cluster A
// says a follower of A is where a node of cluster B (same secret) listens.
// A's leader dials it for that follower, and the handshake refuses it
// (cluster id), so no RPC of A reaches B: B's term and log stay as they
// were.
func TestResolvedAddressOfAnotherClusterIsRefused(t *testing.T) {
	b := newTestCluster(t, 1, knobs{})
	b.bootstrap()
	b.converged(b.apply(SetClusterID{ID: "cluster-b"}))
	other := b.nodes[0].s
	term := other.raft.CurrentTerm()
	last := other.raft.LastIndex()

	var mu sync.Mutex
	claim, target := "", ""
	a := &testCluster{t: t, net: newFaultNet(), resolve: func(id string) (string, bool) {
		mu.Lock()
		defer mu.Unlock()
		return claim, id == target && claim != ""
	}}
	for range 3 {
		a.addNode()
	}
	a.bootstrap()
	a.converged(a.apply(SetClusterID{ID: "cluster-a"}))
	// A follower's address is the one claimed: the leader dials its
	// followers, and a follower dials nobody while the leader stays.
	leader := a.leader()
	mu.Lock()
	for _, nd := range a.nodes {
		if nd != leader {
			target = nd.id
			break
		}
	}
	claim = other.Addr()
	mu.Unlock()
	testutil.Eventually(t, 10*time.Second, "cluster B's node to refuse cluster A's dial for "+target, func() bool {
		return other.Refused()[transport.RefusedClusterID] > 0
	})
	if got := other.raft.CurrentTerm(); got != term {
		t.Errorf("cluster B's term moved from %d to %d", term, got)
	}
	if got := other.raft.LastIndex(); got != last {
		t.Errorf("cluster B's log grew from %d to %d", last, got)
	}
	if !other.IsLeader() {
		t.Error("cluster B's node lost its leadership")
	}
}
