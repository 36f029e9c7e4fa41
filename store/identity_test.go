package store

import "testing"

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
