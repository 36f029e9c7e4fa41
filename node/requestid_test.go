package node

import (
	"strings"
	"testing"
	"time"

	"github.com/tether-proxy/tether/test/testutil"
)

// TestClusterRequestIDIsBoundToItsRequest: a request id a write used is
// refused (409 naming it) for any other request (another destination,
// method, command), on the leader and through a follower, and the other
// request does not happen on any node; the same request with the same id
// is a retry answered with what the first try committed. Removals bind
// their id too.
func TestClusterRequestIDIsBoundToItsRequest(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-node")
	}
	tc := newTestCluster(t, 3)
	tc.form(3)
	refused := func(what string, status int, body map[string]any, id string) {
		t.Helper()
		msg, _ := body["error"].(string)
		if status != 409 || !strings.Contains(msg, `"`+id+`"`) || !strings.Contains(msg, "another request") {
			t.Fatalf("%s with a request id used for another request: %d %v; want 409 naming %s", what, status, body, id)
		}
	}
	cases := []struct {
		desc     string
		via      func() *Node
		id       string
		dest     string // drained with id
		reuseFor string // another destination, refused with id
	}{
		{"on the leader", tc.waitLeader, "R-leader", "d1", "d2"},
		{"through a follower", tc.follower, "R-follower", "d2", "d3"},
	}
	for _, c := range cases {
		n := c.via()
		hdr := map[string]string{hdrRequestID: c.id}
		drain := func(dest string) string { return "/v1/clusters/app/destinations/" + dest + "/drain" }
		status, first := adminWith(t, n, "POST", drain(c.dest), hdr, nil)
		if status != 200 {
			t.Fatalf("%s: drain %s: %d %v", c.desc, c.dest, status, first)
		}
		status, body := adminWith(t, n, "POST", drain(c.reuseFor), hdr, nil)
		refused(c.desc+": drain "+c.reuseFor, status, body, c.id)
		status, body = adminWith(t, n, "DELETE", drain(c.dest), hdr, nil)
		refused(c.desc+": undrain "+c.dest, status, body, c.id)
		keys := len(keyIDs(t, n))
		status, body = adminWith(t, n, "POST", "/v1/keyring/rotate", hdr, nil)
		refused(c.desc+": rotate", status, body, c.id)
		_, kr := admin(t, n, "GET", "/v1/keyring", nil)
		active, _ := kr["active_key_id"].(string)
		status, body = adminWith(t, n, "POST", "/v1/keyring/"+active+"/revoke", hdr, nil)
		refused(c.desc+": revoke", status, body, c.id)
		status, body = adminWith(t, n, "POST", "/v1/secrets/install", hdr, map[string]string{"secret": "a-second-cluster-secret-0123456789abcdef"})
		refused(c.desc+": secret install", status, body, c.id)
		if got := len(keyIDs(t, n)); got != keys {
			t.Fatalf("%s: %d keys after a refused rotation and revocation, want %d", c.desc, got, keys)
		}
		// The same request again is a retry: the first answer.
		status, again := adminWith(t, n, "POST", drain(c.dest), hdr, nil)
		if status != 200 || again["drain_deadline"] != first["drain_deadline"] {
			t.Fatalf("%s: retry of the drain: %d %v; want 200 with the first deadline %v", c.desc, status, again, first["drain_deadline"])
		}
		for _, m := range tc.live() {
			if on, _ := m.proxy.Cluster("app").Destination(c.reuseFor).Draining(); on && c.reuseFor == "d3" {
				t.Fatalf("%s: %s draining on %s after a refused drain", c.desc, c.reuseFor, m.ID())
			}
		}
	}
	for _, m := range tc.live() {
		if on, _ := m.proxy.Cluster("app").Destination("d3").Draining(); on {
			t.Fatalf("d3 draining on %s: only refused drains named it", m.ID())
		}
	}

	// Removal: a failed node removed with an id another write used is
	// refused; with its own id it is removed, and that id is bound to it.
	tc.stop("n3")
	l := tc.waitLeader()
	testutil.Eventually(t, 20*time.Second, "n3 dead in the leader's gossip", func() bool {
		for _, m := range l.members.Members() {
			if m.ID == "n3" {
				return !m.Alive()
			}
		}
		return true
	})
	f := tc.follower()
	status, body := adminWith(t, f, "DELETE", "/v1/members/n3", map[string]string{hdrRequestID: "R-leader"}, nil)
	refused("remove n3", status, body, "R-leader")
	if r := raftRole(l, "n3"); r != "voter" {
		t.Fatalf("n3 is %q after a refused removal, want voter", r)
	}
	rm := map[string]string{hdrRequestID: "R-remove"}
	status, body = adminWith(t, f, "DELETE", "/v1/members/n3", rm, nil)
	if status != 200 || body["removed"] != true {
		t.Fatalf("remove n3: %d %v", status, body)
	}
	status, body = adminWith(t, f, "POST", "/v1/clusters/app/destinations/d3/drain", rm, nil)
	refused("drain with a removal's id", status, body, "R-remove")
	status, body = adminWith(t, f, "DELETE", "/v1/members/n3", rm, nil)
	if status != 200 || body["removed"] != true {
		t.Fatalf("retry of the removal: %d %v; want 200 removed", status, body)
	}
}
