package node

import (
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tether-proxy/tether/cluster"
	"github.com/tether-proxy/tether/test/testutil"
)

// ghost joins the cluster's gossip as a member that stays alive but whose
// durable index never moves past durable: a node stuck behind on Raft.
func (tc *testCluster) ghost(id string, durable uint64, join string) *cluster.Membership {
	tc.t.Helper()
	secret, err := readSecretFile(tc.secret)
	if err != nil {
		tc.t.Fatal(err)
	}
	m, err := cluster.Open(cluster.Config{
		NodeID: id, BindAddr: "127.0.0.1:0", Secret: secret, Timing: cluster.Local, Logger: quietLogger(),
		Meta: cluster.Meta{ID: id, Version: Version, Durable: durable},
	})
	if err != nil {
		tc.t.Fatal(err)
	}
	tc.t.Cleanup(func() { m.Shutdown() })
	if _, err := m.Join([]string{join}); err != nil {
		tc.t.Fatal(err)
	}
	return m
}

// memberState is id's gossip state as n sees it ("" unknown).
func memberState(n *Node, id string) string {
	for _, m := range n.members.Members() {
		if m.ID == id {
			return string(m.State)
		}
	}
	return ""
}

// activeEverywhere is the key every live node encrypts with ("" if they differ).
func (tc *testCluster) activeEverywhere() string {
	id := ""
	for i, n := range tc.live() {
		a := n.ring.ActiveKeyID(time.Now())
		if i > 0 && a != id {
			return ""
		}
		id = a
	}
	return id
}

// A key becomes active only once every alive or suspect member holds it;
// revoking the active key is no exception: encryption goes to a key every
// member holds, and with none the revocation waits for the members (and
// past the bound passes over failed members only, naming them).
func TestKeyActivatesOnlyOnceEveryReachableMemberHoldsItRevokeIncluded(t *testing.T) {
	if testing.Short() {
		t.Skip("a slow in-process cluster test (over 5 s); make test runs it")
	}
	tc := newTestCluster(t, 1)
	nodes := tc.form(3)
	leader := tc.waitLeader()
	// k1 active; rotate to k2 and wait until it encrypts everywhere.
	k1 := leader.ring.ActiveKeyID(time.Now())
	status, body := adminWrite(t, leader, "POST", "/v1/keyring/rotate", nil)
	if status != 200 {
		t.Fatalf("rotate: %d %v", status, body)
	}
	k2 := body["id"].(string)
	testutil.Eventually(t, 15*time.Second, "k2 active everywhere", func() bool { return tc.activeEverywhere() == k2 })
	tc.waitIdentical()
	// A member stuck at today's state joins: it holds k1 and k2, nothing newer.
	ghost := tc.ghost("ghost", leader.store.AppliedIndex(), nodes[0].GossipAddr())
	testutil.Eventually(t, 10*time.Second, "the ghost alive on every node", func() bool {
		for _, n := range tc.live() {
			if memberState(n, "ghost") != "alive" {
				return false
			}
		}
		return true
	})
	// 1. Revoking k2 (active, an earlier key k1 exists): k1, which the
	// ghost holds, encrypts at once; the new key k3 waits for the ghost.
	f := tc.follower()
	status, body = admin(t, f, "POST", "/v1/keyring/"+k2+"/revoke", nil)
	if status != 200 {
		t.Fatalf("revoke k2: %d %v", status, body)
	}
	if body["active_key_id"] != k1 {
		t.Fatalf("revoke k2 answered %v: want encryption on the earlier key %s, which every member holds", body, k1)
	}
	k3, _ := body["replacement_id"].(string)
	if k3 == "" || k3 == k1 || k3 == k2 {
		t.Fatalf("revoke k2 answered %v: want a new key installed to take over", body)
	}
	for _, n := range tc.live() {
		if a := n.ring.ActiveKeyID(time.Now()); a == k3 {
			t.Fatalf("%s encrypts with %s, which the alive ghost does not hold", n.ID(), a)
		}
	}
	if a := f.ring.ActiveKeyID(time.Now()); a != k1 {
		t.Fatalf("%s answered the revoke but encrypts with %q, want %v", f.ID(), a, k1)
	}
	// 2. Revoking k1 (no earlier key left): k3 must take over, and the
	// ghost lacks it: refused once the bound passed, nothing revoked, k1
	// still encrypts (past the bound, an alive member is not passed over).
	hdr := map[string]string{hdrRequestID: "revoke-k1"}
	status, body = adminWith(t, f, "POST", "/v1/keyring/"+k1+"/revoke", hdr, nil)
	if status != http.StatusServiceUnavailable {
		t.Fatalf("revoke k1 while the alive ghost lacks k3: %d %v, want 503", status, body)
	}
	if a := tc.activeEverywhere(); a != k1 {
		t.Fatalf("after a refused revoke, past the bound, the active key is %q, want %v", a, k1)
	}
	// The ghost fails: past the bound it is passed over, named.
	ghost.Shutdown()
	testutil.Eventually(t, 20*time.Second, "the ghost dead on the leader", func() bool { return memberState(tc.waitLeader(), "ghost") == "dead" })
	status, body = adminWith(t, f, "POST", "/v1/keyring/"+k1+"/revoke", hdr, nil)
	if status != 200 || body["active_key_id"] != k3 {
		t.Fatalf("revoke k1 once the ghost failed: %d %v, want %s active", status, body, k3)
	}
	// The leader's round or the revoke passed the failed ghost over.
	if po, ok := body["passed_over"].([]any); ok && (len(po) != 1 || po[0] != "ghost") {
		t.Fatalf("revoke k1: passed_over %v, want [ghost]", body["passed_over"])
	}
	if got := metricValue(t, tc.waitLeader(), "tether_keyring_activation_timeouts_total"); got < 1 {
		t.Fatalf("tether_keyring_activation_timeouts_total = %v, want at least 1 (k3 passed the failed ghost over)", got)
	}
	testutil.Eventually(t, 10*time.Second, "k3 active everywhere", func() bool { return tc.activeEverywhere() == k3 })
}

// metricValue is the value of an unlabelled metric on n's /metrics.
func metricValue(t *testing.T, n *Node, name string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + n.AdminAddr().String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("%s: %v", line, err)
			}
			return f
		}
	}
	t.Fatalf("no %s on /metrics", name)
	return 0
}
