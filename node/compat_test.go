package node

import (
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tether-proxy/tether/keyring"
	"github.com/tether-proxy/tether/store"
	"github.com/tether-proxy/tether/test/testutil"
)

// TestClusterLeaderWritesACommandOnlyOnceEveryMemberAppliesIt: one member
// runs an older command set (it does not know the drain commands). A drain
// is refused with a 409 naming that member and what it lacks, the member
// never meets an entry it cannot apply, and once it is upgraded (restarted
// with this binary's set) the drain goes through on every node.
func TestClusterLeaderWritesACommandOnlyOnceEveryMemberAppliesIt(t *testing.T) {
	tc := newTestCluster(t, 2)
	tc.startThree(func(i int, n *Node) {
		if i == 2 {
			n.commands = "1111001" // no SetDrain, no ClearDrain
		}
	})
	tc.waitSettled()
	old := tc.nodes["n3"]
	// The older member may win the first election; as leader it would
	// refuse the command itself ("this node does not apply"), which is not
	// the rule under test here: hand leadership to an upgraded member.
	testutil.Eventually(t, 20*time.Second, "a leader other than n3", func() bool {
		l := tc.leader()
		if l == old {
			_ = old.store.TransferLeadership()
			return false
		}
		return l != nil
	})
	testutil.Eventually(t, 10*time.Second, "the leader to see n3's command set", func() bool {
		l := tc.leader()
		return l != nil && l.lead.CommandGate(storeSetDrain()) != nil
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
	testutil.Eventually(t, 15*time.Second, "the drain to be accepted once every member applies it", func() bool {
		l := tc.leader()
		if l == nil {
			return false
		}
		status, _ := admin(t, l, "POST", "/v1/clusters/app/destinations/d1/drain", nil)
		return status == 200
	})
	testutil.Eventually(t, 10*time.Second, "d1 draining on every node", func() bool {
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
	logs := &lockedBuffer{}
	var join []string
	for _, id := range []string{"n1", "n2", "n3"} {
		cfg := tc.config(id, 3, join)
		cfg.Logger = slog.New(slog.NewTextHandler(logs, nil))
		join = append(join, tc.start(cfg).GossipAddr())
	}
	tc.waitSettled()
	nodes := tc.live()
	victim := nodes[1]
	// n4 claims n2's Raft address from its first gossip on: its Raft binds
	// n2's port on another loopback address and advertises 127.0.0.1
	// (claimed later, the leader may add n4 at its own address first).
	_, port, _ := net.SplitHostPort(victim.store.Addr())
	cfg4 := tc.config("n4", 0, []string{nodes[0].GossipAddr()})
	cfg4.RaftAddr, cfg4.Advertise = net.JoinHostPort("127.0.0.2", port), "127.0.0.1"
	if n4 := tc.start(cfg4); n4.store.Addr() != victim.store.Addr() {
		t.Fatalf("n4 advertises Raft at %s, want n2's %s", n4.store.Addr(), victim.store.Addr())
	}
	var rows []any
	testutil.Eventually(t, 15*time.Second, "/v1/members to show the conflict on both nodes", func() bool {
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
	testutil.Eventually(t, 10*time.Second, "the leader to log the conflict naming both", func() bool {
		l := logs.String()
		return strings.Contains(l, "raft address conflict") && strings.Contains(l, "claimed by n2, n4")
	})
	// Give the leader a few rounds to do the wrong thing: n2 must still be
	// a voter, n4 not in Raft.
	rounds := func() (r uint64) {
		for _, n := range tc.live() {
			r += n.lead.Rounds()
		}
		return r
	}
	before := rounds()
	testutil.Eventually(t, 10*time.Second, "three more leader rounds", func() bool { return rounds() >= before+3 })
	if r := raftRole(nodes[0], victim.ID()); r != "voter" {
		t.Errorf("n2 is %q after another node claimed its address, want voter (members %v)", r, rows)
	}
	if r := raftRole(nodes[0], "n4"); r != "" && r != "none" {
		t.Errorf("n4 was added as %q at an address a live voter holds", r)
	}
}

// TestClusterLeaderClockAheadDoesNotPruneKeysOthersNeed: the time the
// leader's rounds go by passes the first key's expiry plus retention while
// the members' clocks (as they gossip them) do not: the key stays on every
// node. Once every member's clock agrees, the key is pruned.
func TestClusterLeaderClockAheadDoesNotPruneKeysOthersNeed(t *testing.T) {
	tc := newTestCluster(t, 1)
	tc.startThree(func(_ int, n *Node) { manual(n) })
	now := time.Now()
	var first keyring.Metadata
	testutil.Eventually(t, 30*time.Second, "a first key active on every node", func() bool {
		if l := tc.leader(); l != nil {
			l.lead.Round(now)
		}
		for _, n := range tc.live() {
			id := n.ring.ActiveKeyID(now)
			if id == "" {
				return false
			}
			for _, md := range n.ring.List(now) {
				if md.ID == id {
					first = md
				}
			}
		}
		return true
	})
	l := tc.leader()
	testutil.Eventually(t, 10*time.Second, "every member's clock in the leader's view", func() bool {
		for _, m := range l.members.Members() {
			if m.Clock == 0 {
				return false
			}
		}
		return true
	})
	jumped := first.Expires.Add(l.ring.Retention() + time.Hour)
	has := func(n *Node) bool {
		return slices.ContainsFunc(n.ring.List(now), func(md keyring.Metadata) bool { return md.ID == first.ID })
	}
	for range 5 { // rounds at the jumped clock: it rotates, but must not prune
		l.lead.Round(jumped)
	}
	for _, n := range tc.live() {
		if !has(n) {
			t.Fatalf("%s lost key %s: the leader pruned it by its clock alone, %s ahead of the others'", n.ID(), first.ID, time.Until(jumped).Round(time.Hour))
		}
	}
	// The other members' clocks get there too: now it may go.
	for _, n := range tc.live() {
		if n != l {
			n.clock.SetWall(func() time.Time { return jumped })
		}
	}
	testutil.Eventually(t, 15*time.Second, "the key pruned everywhere once every clock agrees", func() bool {
		l.lead.Round(jumped)
		for _, n := range tc.live() {
			if has(n) {
				return false
			}
		}
		return true
	})
}

// TestClusterMemberThatCannotPersistIsPassedOverAndReported: a follower's
// snapshot directory breaks (here: replaced by a file; a full disk acts
// alike). It reports it in /readyz, in /metrics and in gossip, and a
// rotation activates without waiting out the bound for it.
func TestClusterMemberThatCannotPersistIsPassedOverAndReported(t *testing.T) {
	tc := newTestCluster(t, 1)
	tc.form(3)
	f := tc.follower()
	snaps := filepath.Join(f.cfg.DataDir, "raft", "snapshots")
	if err := os.Rename(snaps, snaps+".moved"); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(snaps, []byte("not a directory"), 0o600); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	status, body := adminWrite(t, tc.leader(), "POST", "/v1/keyring/rotate", nil)
	if status != 200 {
		t.Fatalf("rotate: %d %v", status, body)
	}
	id, _ := body["id"].(string)
	testutil.Eventually(t, 20*time.Second, "the rotated key active on every node", func() bool {
		for _, n := range tc.live() {
			if n.ring.ActiveKeyID(time.Now()) != id {
				return false
			}
		}
		return true
	})
	if took := time.Since(start); took >= activationWait {
		t.Errorf("activation took %s: it waited out the bound for a member that cannot persist", took.Round(time.Millisecond))
	}
	for _, n := range tc.live() {
		if m := scrape(t, n); !strings.Contains(m, "tether_keyring_activation_timeouts_total 0") {
			t.Errorf("%s counted an activation timeout", n.ID())
		}
	}
	status, body = admin(t, f, "GET", "/readyz", nil)
	if warn, _ := body["warnings"].([]any); status != 200 || len(warn) != 1 || !strings.Contains(fmt.Sprint(warn[0]), "cannot persist") {
		t.Errorf("/readyz of the node that cannot persist: %d %v", status, body)
	}
	metrics := scrape(t, f)
	if !strings.Contains(metrics, "tether_raft_persist_failing 1") {
		t.Errorf("/metrics lacks tether_raft_persist_failing 1")
	}

	// The disk is fixed: it persists again and says so everywhere.
	os.Remove(snaps)
	if err := os.Rename(snaps+".moved", snaps); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 15*time.Second, "the node to persist again", func() bool {
		pf, _ := f.store.PersistFailure()
		return pf == nil && f.store.DurableIndex() >= f.store.AppliedIndex()
	})
	if _, body := admin(t, f, "GET", "/readyz", nil); body["warnings"] != nil {
		t.Errorf("/readyz still warns: %v", body)
	}
}

// scrape returns a node's /metrics text.
func scrape(t *testing.T, n *Node) string {
	t.Helper()
	resp, err := http.Get("http://" + n.AdminAddr().String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// lockedBuffer is a log sink shared by nodes and the test.
type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestClusterMismatchedSettingsAreLoggedAndShown: one node runs with
// another --raft-voters and another ProbeFanout. The leader logs it, and
// /v1/members names the settings on that member's row.
func TestClusterMismatchedSettingsAreLoggedAndShown(t *testing.T) {
	tc := newTestCluster(t, 1)
	raw, err := os.ReadFile(tc.cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	other := filepath.Join(tc.dir, "other.json")
	os.WriteFile(other, []byte(strings.Replace(string(raw), `"DrainTimeout": "00:10:00",`,
		`"DrainTimeout": "00:10:00", "HealthCheck": { "Active": { "Enabled": true, "Interval": "00:00:01", "Timeout": "00:00:00.500", "Path": "/", "ProbeFanout": 1 } },`, 1)), 0o600)
	logs := &lockedBuffer{}
	var join []string
	for _, id := range []string{"n1", "n2", "n3"} {
		cfg := tc.config(id, 3, join)
		cfg.Logger = slog.New(slog.NewTextHandler(logs, nil))
		if id == "n3" {
			cfg.RaftVoters, cfg.ConfigPath = 3, other
		}
		join = append(join, tc.start(cfg).GossipAddr())
	}
	tc.waitSettled()
	cases := []struct{ desc, want string }{
		{"raft voters", "--raft-voters 3 (this node 5)"},
		{"probe fanout", "ProbeFanout 1 (this node 3)"},
	}
	for _, c := range cases {
		t.Run(c.desc, func(t *testing.T) {
			testutil.Eventually(t, 15*time.Second, "the leader's log and /v1/members to name "+c.want, func() bool {
				l := tc.leader()
				if l == nil {
					return false
				}
				if l.ID() == "n3" { // its own view would name the others' settings
					l.store.TransferLeadership()
					return false
				}
				_, body := admin(t, l, "GET", "/v1/members", nil)
				rows, _ := body["members"].([]any)
				shown := false
				for _, r := range rows {
					m, _ := r.(map[string]any)
					s, _ := m["settings_mismatch"].(string)
					if m["id"] == "n3" && strings.Contains(s, c.want) {
						shown = true
					}
					if m["id"] != "n3" && s != "" {
						t.Errorf("%v shows a mismatch: %s", m["id"], s)
					}
				}
				return shown && strings.Contains(logs.String(), "cluster settings other than the leader's") && strings.Contains(logs.String(), c.want)
			})
		})
	}
}

// TestClusterGateCountsADownServerOnAnOlderCommandSet: a Raft server that
// runs an older command set and is down when a drain is first written
// would stop at it once started. The drain is refused (409 naming it) on
// every node while it is down; once it is forgotten by gossip, a command
// beyond the baseline is refused as coming from an unknown set.
func TestClusterGateCountsADownServerOnAnOlderCommandSet(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-node")
	}
	tc := newTestCluster(t, 2)
	tc.startThree(func(i int, n *Node) {
		if i == 2 {
			n.commands = "1111001" // no SetDrain, no ClearDrain
		}
	})
	tc.waitSettled()
	testutil.Eventually(t, 20*time.Second, "a leader other than n3", func() bool {
		l := tc.leader()
		if l == tc.nodes["n3"] {
			_ = l.store.TransferLeadership()
			return false
		}
		return l != nil
	})
	tc.stop("n3")
	testutil.Eventually(t, 20*time.Second, "n3 dead in every node's gossip", func() bool {
		for _, n := range tc.live() {
			for _, m := range n.members.Members() {
				if m.ID == "n3" && m.Alive() {
					return false
				}
			}
		}
		return true
	})
	if r := raftRole(tc.waitLeader(), "n3"); r != "voter" {
		t.Fatalf("n3 is %q in the Raft configuration, want voter", r)
	}
	for _, n := range tc.live() {
		status, body := adminWrite(t, n, "POST", "/v1/clusters/app/destinations/d1/drain", nil)
		msg, _ := body["error"].(string)
		if status != 409 || !strings.Contains(msg, "n3 (dead") || !strings.Contains(msg, "SetDrain v1") {
			t.Fatalf("drain via %s while n3 (older command set) is down: %d %v; want 409 naming n3 and SetDrain v1", n.ID(), status, body)
		}
	}
	for _, n := range tc.live() {
		if on, _ := n.proxy.Cluster("app").Destination("d1").Draining(); on {
			t.Fatalf("d1 draining on %s after a refused drain", n.ID())
		}
	}
	l := tc.waitLeader()
	l.members.Forget("n3")
	err := l.lead.CommandGate(store.SetClock{At: time.Now()})
	if err == nil || !strings.Contains(err.Error(), "n3 (a Raft server that is down and whose command set is unknown") {
		t.Fatalf("SetClock with n3 down and unknown to gossip: %v; want a refusal naming n3's unknown command set", err)
	}
}
