package store

import (
	"testing"

	"github.com/hashicorp/raft"
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
	for _, nd := range a.nodes {
		var vr raft.RequestVoteResponse
		err := from.transport.RequestVote(raft.ServerID(b.nodes[0].id), raft.ServerAddress(nd.s.Addr()), &raft.RequestVoteRequest{
			RPCHeader: raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte("b1"), Addr: []byte(from.Addr())}, Term: term + 100, LastLogIndex: 1 << 40, LastLogTerm: term + 100,
		}, &vr)
		if err == nil {
			t.Errorf("RequestVote from cluster B to %s went through", nd.id)
		}
		var ar raft.AppendEntriesResponse
		err = from.transport.AppendEntries(raft.ServerID(b.nodes[0].id), raft.ServerAddress(nd.s.Addr()), &raft.AppendEntriesRequest{
			RPCHeader: raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte("b1"), Addr: []byte(from.Addr())}, Term: term + 100,
		}, &ar)
		if err == nil {
			t.Errorf("AppendEntries from cluster B to %s went through", nd.id)
		}
	}
	for _, nd := range a.nodes {
		if got := nd.s.raft.CurrentTerm(); got >= term+100 {
			t.Errorf("%s adopted cluster B's term %d", nd.id, got)
		}
	}
	a.converged(a.apply(InstallKey{Key: testKey("k1", 0)}))
}
