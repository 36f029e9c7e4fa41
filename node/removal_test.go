package node

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/tether-proxy/tether/test/testutil"
)

// formWithGrace starts n1..n3 with --bootstrap-expect 3 and the given
// voter grace, and waits for one leader and an active key everywhere.
func (tc *testCluster) formWithGrace(grace time.Duration) []*Node {
	tc.t.Helper()
	var join []string
	for i := 1; i <= 3; i++ {
		cfg := tc.config(fmt.Sprintf("n%d", i), 3, slices.Clone(join))
		cfg.VoterGrace = grace
		join = append(join, tc.start(cfg).GossipAddr())
	}
	tc.waitSettled()
	return tc.live()
}

// serverAt reports whether n's Raft configuration holds id at addr as a
// voter, and whether it holds gone at all.
func serverAt(n *Node, id, addr, gone string) (voterThere, goneStays bool) {
	servers, err := n.store.Servers()
	if err != nil {
		return false, true
	}
	for _, s := range servers {
		if s.ID == id && s.Address == addr && s.Voter {
			voterThere = true
		}
		if s.ID == gone {
			goneStays = true
		}
	}
	return voterThere, goneStays
}

// A node started on the Raft address of a failed voter (a pod that came
// back on the IP of one that died; every node on one port) takes its place
// once the voter has been failed for the voter grace, even when the
// cluster runs with as many voters as --bootstrap-expect: the failed voter
// is removed first (Raft refuses two servers at one address) and the new
// node is added, promoted, and holds the cluster's state.
func TestClusterNodeOnAFailedVotersAddressTakesItsPlaceAfterTheGrace(t *testing.T) {
	tc := newTestCluster(t, 1)
	const grace = 2 * time.Second
	tc.formWithGrace(grace)
	victim := tc.follower()
	addr := victim.store.Addr()
	tc.stop(victim.ID())
	cfg := tc.config("n4", 0, []string{tc.waitLeader().GossipAddr()})
	cfg.RaftAddr, cfg.VoterGrace = addr, grace
	tc.start(cfg)
	testutil.Eventually(t, 45*time.Second, "n4 a voter at "+addr+" and "+victim.ID()+" out of Raft, on every node", func() bool {
		for _, n := range tc.live() {
			if there, stays := serverAt(n, "n4", addr, victim.ID()); !there || stays {
				return false
			}
		}
		return true
	})
	tc.waitSettled()
	tc.waitIdentical()
}

// A non-voter that moves onto the Raft address of a failed voter (it was
// restarted there) is moved once the voter has been failed for the grace:
// the voter is removed, the non-voter's address updated, and it takes the
// vote, with voters = --bootstrap-expect.
func TestClusterNonvoterMovingOntoAFailedVotersAddressMovesAfterTheGrace(t *testing.T) {
	tc := newTestCluster(t, 1)
	const grace = 2 * time.Second
	nodes := tc.formWithGrace(grace)
	cfg := tc.config("n4", 0, []string{nodes[0].GossipAddr()})
	cfg.VoterGrace = grace
	tc.start(cfg)
	testutil.Eventually(t, 20*time.Second, "n4 a non-voter", func() bool { return raftRole(tc.leader(), "n4") == "nonvoter" })
	tc.waitIdentical()
	var victim *Node // a voter that does not lead
	for _, n := range tc.live() {
		if n.ID() != "n4" && !n.store.IsLeader() {
			victim = n
		}
	}
	addr := victim.store.Addr()
	tc.stop(victim.ID())
	tc.stop("n4")
	cfg.RaftAddr = addr
	tc.start(cfg)
	testutil.Eventually(t, 45*time.Second, "n4 a voter at "+addr+" and "+victim.ID()+" out of Raft, on every node", func() bool {
		for _, n := range tc.live() {
			if there, stays := serverAt(n, "n4", addr, victim.ID()); !there || stays {
				return false
			}
		}
		return true
	})
	tc.waitSettled()
	tc.waitIdentical()
}
