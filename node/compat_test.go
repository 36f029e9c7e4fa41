package node

import (
	"strings"
	"testing"
	"time"

	"github.com/tether-proxy/tether/cluster"
	"github.com/tether-proxy/tether/store"
)

// TestClusterLeaderWritesACommandOnlyOnceEveryMemberAppliesIt: one member
// runs an older command set (it does not know the drain commands). A drain
// is refused with a 409 naming that member and what it lacks, the member
// never meets an entry it cannot apply, and once it is upgraded (restarted
// with this binary's set) the drain goes through on every node.
func TestClusterLeaderWritesACommandOnlyOnceEveryMemberAppliesIt(t *testing.T) {
	tc := newTestCluster(t, 2)
	var join []string
	for i, id := range []string{"n1", "n2", "n3"} {
		cfg := tc.config(id, 3, join)
		n, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if i == 2 {
			n.commands = "1111001" // no SetDrain, no ClearDrain
		}
		if err := n.Start(); err != nil {
			t.Fatal(err)
		}
		tc.mu.Lock()
		tc.nodes[id], tc.cfgs[id] = n, cfg
		tc.mu.Unlock()
		join = append(join, n.GossipAddr())
	}
	tc.waitSettled()
	old := tc.nodes["n3"]
	waitFor(t, 10*time.Second, "the leader to see n3's command set", func() bool {
		l := tc.leader()
		return l != nil && l.commandGate(storeSetDrain()) != nil
	})
	for _, n := range tc.live() {
		status, body := adminWrite(t, n, "POST", "/v1/clusters/app/destinations/d1/drain", nil)
		msg, _ := body["error"].(string)
		if status != 409 || !strings.Contains(msg, "n3") || !strings.Contains(msg, "SetDrain v1") {
			t.Fatalf("drain via %s with n3 on an older command set: %d %v; want 409 naming n3 and SetDrain v1", n.ID(), status, body)
		}
	}
	if idx, need := old.store.Stopped(); idx != 0 {
		t.Fatalf("the older member met an entry it cannot apply: %s", need)
	}

	// Upgrade n3: restart it with this binary's command set.
	cfg := tc.cfgs["n3"]
	tc.stop("n3")
	tc.start(cfg)
	tc.waitSettled()
	waitFor(t, 15*time.Second, "the drain to be accepted once every member applies it", func() bool {
		l := tc.leader()
		if l == nil {
			return false
		}
		status, _ := admin(t, l, "POST", "/v1/clusters/app/destinations/d1/drain", nil)
		return status == 200
	})
	waitFor(t, 10*time.Second, "d1 draining on every node", func() bool {
		for _, n := range tc.live() {
			if on, _ := n.proxy.Cluster("app").Destination("d1").Draining(); !on {
				return false
			}
		}
		return true
	})
}

func storeSetDrain() store.Command {
	return store.SetDrain{Cluster: "app", Destination: "d1", Deadline: time.Now().Add(time.Minute)}
}

// TestClusterAddressClaimedTwiceEvictsNobodyAndShowsInMembers: a new node
// that advertises a live voter's Raft address (pod IP reuse, every node on
// :7000) is not added and the voter stays; /v1/members names both.
func TestClusterAddressClaimedTwiceEvictsNobodyAndShowsInMembers(t *testing.T) {
	tc := newTestCluster(t, 1)
	nodes := tc.form(3)
	victim := nodes[1]
	n4 := tc.start(tc.config("n4", 0, []string{nodes[0].GossipAddr()}))
	if err := n4.members.UpdateMeta(func(m *cluster.Meta) { m.RaftAddr = victim.store.Addr() }); err != nil {
		t.Fatal(err)
	}
	var rows []any
	waitFor(t, 15*time.Second, "/v1/members to show the conflict on both nodes", func() bool {
		_, body := admin(t, nodes[0], "GET", "/v1/members", nil)
		rows, _ = body["members"].([]any)
		flagged := 0
		for _, r := range rows {
			m, _ := r.(map[string]any)
			c, _ := m["conflict"].(string)
			if (m["id"] == "n2" || m["id"] == "n4") && strings.Contains(c, "n2, n4") {
				flagged++
			}
		}
		return flagged == 2
	})
	// Give the leader a few rounds to do the wrong thing: n2 must still be
	// a voter, n4 not in Raft.
	time.Sleep(3 * leaderInterval)
	if r := raftRole(nodes[0], victim.ID()); r != "voter" {
		t.Errorf("n2 is %q after another node claimed its address, want voter (members %v)", r, rows)
	}
	if r := raftRole(nodes[0], "n4"); r != "" && r != "none" {
		t.Errorf("n4 was added as %q at an address a live voter holds", r)
	}
}
