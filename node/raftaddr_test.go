package node

import (
	"testing"
	"time"

	"github.com/tether-proxy/tether/test/testutil"
)

// TestClusterVoterBackOnANewRaftAddressIsReachedThroughGossip: of three
// voters, C stops, the leader A commits an entry with B, B stops, and C
// comes back on a new Raft address (127.0.0.1:0 again). No leader is left
// to write C's new address into the configuration, and only A (the newer
// log) can win, with C's vote: A dials C where gossip says C is, is
// elected, and then repairs C's address in the configuration.
func TestClusterVoterBackOnANewRaftAddressIsReachedThroughGossip(t *testing.T) {
	tc := newTestCluster(t, 1)
	tc.form(3)
	a := tc.waitLeader()
	var b, c *Node
	for _, n := range tc.live() {
		switch {
		case n == a:
		case b == nil:
			b = n
		default:
			c = n
		}
	}
	cID, oldAddr := c.ID(), c.store.Addr()
	cfg := tc.cfgs[cID]
	tc.stop(cID)
	if status, body := adminWrite(t, a, "POST", "/v1/clusters/app/destinations/d1/drain", nil); status != 200 {
		t.Fatalf("drain on the leader: %d %v", status, body)
	}
	tc.stop(b.ID())
	// A leader still in its lease would write C's new address itself as
	// soon as gossip shows it (the repair this test is not about).
	testutil.Eventually(t, 10*time.Second, a.ID()+" to step down without a quorum", func() bool { return !a.store.IsLeader() })

	cfg.Join = []string{a.GossipAddr()}
	c = tc.start(cfg)
	newAddr := c.store.Addr()
	if newAddr == oldAddr {
		t.Fatalf("%s came back on its old Raft address %s", cID, oldAddr)
	}
	if l := tc.waitLeader(); l != a {
		t.Fatalf("%s leads with the older log", l.ID())
	}
	testutil.Eventually(t, 20*time.Second, cID+" at its new address in the configuration", func() bool {
		servers, err := a.store.Servers()
		if err != nil {
			return false
		}
		for _, s := range servers {
			if s.ID == cID {
				return s.Address == newAddr && s.Voter
			}
		}
		return false
	})
	tc.waitIdentical()
}
