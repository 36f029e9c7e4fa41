package node

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/tether-proxy/tether/test/testutil"
)

// formWith starts n1..n3 with --bootstrap-expect 3 and the flags set by
// flags, and waits for one leader and an active key everywhere.
func (tc *testCluster) formWith(flags func(*Config)) []*Node {
	tc.t.Helper()
	var join []string
	for i := 1; i <= 3; i++ {
		cfg := tc.config(fmt.Sprintf("n%d", i), 3, slices.Clone(join))
		flags(&cfg)
		join = append(join, tc.start(cfg).GossipAddr())
	}
	tc.waitSettled()
	return tc.live()
}

// formWithGrace is formWith a voter grace.
func (tc *testCluster) formWithGrace(grace time.Duration) []*Node {
	tc.t.Helper()
	return tc.formWith(func(c *Config) { c.VoterGrace = grace })
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
	if testing.Short() {
		t.Skip("a slow in-process cluster test (over 5 s); make test runs it")
	}
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

// memberRow is id's row of GET /v1/members on n (nil when it is not listed).
func memberRow(t *testing.T, n *Node, id string) map[string]any {
	t.Helper()
	_, body := admin(t, n, "GET", "/v1/members", nil)
	rows, _ := body["members"].([]any)
	for _, r := range rows {
		if m, _ := r.(map[string]any); m["id"] == id {
			return m
		}
	}
	return nil
}

// passedOver sums the live nodes' count of keys activated past failed
// members that lacked them.
func (tc *testCluster) passedOver(t *testing.T) float64 {
	t.Helper()
	sum := 0.0
	for _, n := range tc.live() {
		sum += metricValue(t, n, "tether_keyring_activation_timeouts_total")
	}
	return sum
}

// A member removed from Raft (tether remove) is out of key activation at
// once and reads "left" on every node: later rotations activate without
// waiting for it or passing it over, under the leader that removed it and
// under the next.
func TestClusterRemovedMemberIsLeftEverywhereAndHoldsUpNoRotation(t *testing.T) {
	tc := newTestCluster(t, 1)
	nodes := tc.form(3)
	tc.start(tc.config("n4", 0, []string{nodes[0].GossipAddr()}))
	testutil.Eventually(t, 20*time.Second, "n4 a non-voter", func() bool { return raftRole(tc.leader(), "n4") == "nonvoter" })
	tc.waitIdentical()
	tc.stop("n4")
	testutil.Eventually(t, 20*time.Second, "n4 seen failed by the leader", func() bool {
		s := memberState(tc.waitLeader(), "n4")
		return s == "suspect" || s == "dead"
	})
	status, body := adminWrite(t, tc.follower(), "DELETE", "/v1/members/n4", nil)
	if status != 200 || body["removed"] != true {
		t.Fatalf("tether remove n4: %d %v, want removed", status, body)
	}
	testutil.Eventually(t, 10*time.Second, "n4 left on every node", func() bool {
		for _, n := range tc.live() {
			if row := memberRow(t, n, "n4"); row == nil || row["state"] != "left" || row["raft"] != "none" {
				return false
			}
		}
		return true
	})
	for round := range 2 {
		leader := tc.waitLeader()
		before := tc.passedOver(t)
		start := time.Now()
		status, body := adminWrite(t, leader, "POST", "/v1/keyring/rotate", nil)
		if status != 200 {
			t.Fatalf("rotate on %s: %d %v", leader.ID(), status, body)
		}
		id := body["id"].(string)
		testutil.Eventually(t, 30*time.Second, "the rotated key active on every node", func() bool { return tc.activeEverywhere() == id })
		if after := tc.passedOver(t); after != before {
			t.Fatalf("rotation %d under %s activated after %s passing over a member (activation timeouts %v -> %v): the removed n4 still held it up",
				round+1, leader.ID(), time.Since(start).Round(time.Millisecond), before, after)
		}
		for _, n := range tc.live() {
			if row := memberRow(t, n, "n4"); row == nil || row["state"] != "left" {
				t.Fatalf("after rotation %d, %s lists n4 as %v, want left", round+1, n.ID(), row)
			}
		}
		if round == 0 {
			// Every node holds the same committed removal.
			want, ok := leader.store.RemovedAt("n4")
			for _, n := range tc.live() {
				if idx, has := n.store.RemovedAt("n4"); !ok || !has || idx != want {
					t.Fatalf("%s holds n4's removal at %d (%t), the leader at %d (%t)", n.ID(), idx, has, want, ok)
				}
			}
			if err := leader.store.TransferLeadership(); err != nil {
				t.Fatal(err)
			}
			testutil.Eventually(t, 20*time.Second, "a new leader", func() bool { l := tc.leader(); return l != nil && l != leader })
		}
	}
	tc.waitIdentical()
}

// A member the leader reaped (failed past --reap-timeout) leaves the
// member list of every node, not only the leader's: every node forgets a
// member a committed configuration removed once it has been gone for the
// reap timeout.
func TestClusterReapedMemberIsForgottenOnEveryNode(t *testing.T) {
	tc := newTestCluster(t, 1)
	const reap = 2 * time.Second
	nodes := tc.formWith(func(c *Config) { c.ReapTimeout = reap })
	cfg := tc.config("n4", 0, []string{nodes[0].GossipAddr()})
	cfg.ReapTimeout = reap
	tc.start(cfg)
	testutil.Eventually(t, 20*time.Second, "n4 a non-voter", func() bool { return raftRole(tc.leader(), "n4") == "nonvoter" })
	tc.waitIdentical()
	tc.stop("n4")
	testutil.Eventually(t, 20*time.Second, "n4 reaped and gone from every node's members", func() bool {
		for _, n := range tc.live() {
			if raftRole(n, "n4") != "" || memberRow(t, n, "n4") != nil {
				return false
			}
		}
		return true
	})
	tc.waitIdentical()
}
