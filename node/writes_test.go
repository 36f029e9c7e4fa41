package node

import (
	"testing"
	"time"

	"github.com/tether-proxy/tether/test/testutil"
)

// adminWith calls a node's admin API with extra headers.
func adminWith(t *testing.T, n *Node, method, path string, hdr map[string]string, body any) (int, map[string]any) {
	t.Helper()
	resp := adminSend(t, n, method, path, hdr, body)
	return resp.StatusCode, jsonMap(resp)
}

// keyIDs lists the ids GET /v1/keyring shows on n.
func keyIDs(t *testing.T, n *Node) map[string]string {
	t.Helper()
	status, body := admin(t, n, "GET", "/v1/keyring", nil)
	if status != 200 {
		t.Fatalf("keyring on %s: %d %v", n.ID(), status, body)
	}
	out := map[string]string{}
	for _, k := range body["keys"].([]any) {
		k := k.(map[string]any)
		out[k["id"].(string)] = k["state"].(string)
	}
	return out
}

// drainOf is destination id's row of GET .../destinations on n.
func drainOf(t *testing.T, n *Node, id string) map[string]any {
	t.Helper()
	status, body := admin(t, n, "GET", "/v1/clusters/app/destinations", nil)
	if status != 200 {
		t.Fatalf("destinations on %s: %d %v", n.ID(), status, body)
	}
	for _, d := range body["destinations"].([]any) {
		if d := d.(map[string]any); d["id"] == id {
			return d
		}
	}
	t.Fatalf("no destination %s on %s: %v", id, n.ID(), body)
	return nil
}

// A write retried with the same request id answers with what the first try
// committed, on the leader and through a follower, and a node that answers
// a write shows it on its next read.
func TestWriteAnswersWhatWasCommittedAndTheAnsweringNodeShowsIt(t *testing.T) {
	tc := newTestCluster(t, 2)
	tc.form(3)
	cases := []struct {
		desc string
		via  func() *Node
	}{
		{desc: "on the leader", via: tc.waitLeader},
		{desc: "through a follower (forwarded)", via: tc.follower},
	}
	for i, c := range cases {
		t.Run(c.desc, func(t *testing.T) {
			n := c.via()
			hdr := map[string]string{hdrRequestID: "rotate-retry-" + string(rune('a'+i))}
			status, first := adminWith(t, n, "POST", "/v1/keyring/rotate", hdr, nil)
			if status != 200 {
				t.Fatalf("rotate: %d %v", status, first)
			}
			if _, ok := keyIDs(t, n)[first["id"].(string)]; !ok {
				t.Fatalf("%s answered rotate with key %v but does not list it", n.ID(), first["id"])
			}
			status, again := adminWith(t, n, "POST", "/v1/keyring/rotate", hdr, nil)
			if status != 200 || again["id"] != first["id"] {
				t.Fatalf("rotate retried with the same request id answered %d %v, want the committed key %v", status, again, first["id"])
			}
			if ids := keyIDs(t, n); len(ids) == 0 {
				t.Fatal("no keys")
			}

			hdr = map[string]string{hdrRequestID: "drain-retry-" + string(rune('a'+i))}
			status, first = adminWith(t, n, "POST", "/v1/clusters/app/destinations/d1/drain", hdr, nil)
			if status != 200 || first["draining"] != true {
				t.Fatalf("drain: %d %v", status, first)
			}
			// The node that answered shows the drain at once.
			if d := drainOf(t, n, "d1"); d["draining"] != true || d["drain_deadline"] != first["drain_deadline"] {
				t.Fatalf("%s answered drain %v, then reads %v", n.ID(), first, d)
			}
			status, again = adminWith(t, n, "POST", "/v1/clusters/app/destinations/d1/drain", hdr, nil)
			if status != 200 || again["drain_deadline"] != first["drain_deadline"] {
				t.Fatalf("drain retried with the same request id answered %d %v, want the committed deadline %v", status, again, first["drain_deadline"])
			}
			status, body := admin(t, n, "DELETE", "/v1/clusters/app/destinations/d1/drain", nil)
			if status != 200 {
				t.Fatalf("undrain: %d %v", status, body)
			}
			if d := drainOf(t, n, "d1"); d["draining"] != false {
				t.Fatalf("%s answered undrain, then reads %v", n.ID(), d)
			}
		})
	}
}

// A removal retried with the same request id answers as the first try did,
// not "no such member", through a follower and after leadership moved: the
// removal is a committed fact every node holds, not the memory of the
// leader that made it.
func TestRemoveRetriedWithTheSameRequestIDAnswersWhatWasCommitted(t *testing.T) {
	tc := newTestCluster(t, 1)
	tc.form(3)
	victim := tc.follower()
	tc.stop(victim.ID())
	testutil.Eventually(t, 20*time.Second, "the stopped node seen failed", func() bool {
		return memberState(tc.waitLeader(), victim.ID()) != "alive"
	})
	via := tc.follower()
	hdr := map[string]string{hdrRequestID: "remove-retry"}
	for i := range 2 {
		status, body := adminWith(t, via, "DELETE", "/v1/members/"+victim.ID(), hdr, nil)
		if status != 200 || body["removed"] != true {
			t.Fatalf("try %d: remove %s through %s: %d %v, want 200 removed", i+1, victim.ID(), via.ID(), status, body)
		}
	}
	// The follower that answered shows the removal.
	if role := raftRole(via, victim.ID()); role != "" {
		t.Fatalf("%s answered the removal, then lists %s as %q", via.ID(), victim.ID(), role)
	}

	// Leadership moves; the retry reaches the new leader, which never
	// saw the first try.
	old := tc.waitLeader()
	if err := old.store.TransferLeadership(); err != nil {
		t.Fatal(err)
	}
	var cur *Node
	testutil.Eventually(t, 20*time.Second, "a new leader", func() bool { cur = tc.leader(); return cur != nil && cur != old })
	for _, n := range []*Node{cur, old} {
		status, body := adminWith(t, n, "DELETE", "/v1/members/"+victim.ID(), hdr, nil)
		if status != 200 || body["removed"] != true {
			t.Fatalf("retry through %s after leadership moved to %s: %d %v, want 200 removed", n.ID(), cur.ID(), status, body)
		}
	}
	// Removing a removed member again is the same fact (DELETE is
	// idempotent); a name that never was a member is not found.
	if status, body := admin(t, cur, "DELETE", "/v1/members/"+victim.ID(), nil); status != 200 || body["removed"] != true {
		t.Fatalf("a new removal of a removed member: %d %v, want 200 removed", status, body)
	}
	if status, _ := admin(t, cur, "DELETE", "/v1/members/nosuch", nil); status != 404 {
		t.Fatalf("removal of a name that never was a member: %d, want 404", status)
	}
	tc.waitIdentical()
}
