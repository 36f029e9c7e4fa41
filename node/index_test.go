package node

import (
	"bytes"
	"io"
	"net/http"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/tether-proxy/tether/keyring"
	"github.com/tether-proxy/tether/test/testutil"
)

// adminIndexed calls a node's admin API and returns the answer's
// X-Tether-Index too (-1: none).
func adminIndexed(t *testing.T, n *Node, method, path string, hdr map[string]string) (int, int64, http.Header, map[string]any) {
	t.Helper()
	resp := adminSend(t, n, method, path, hdr, nil)
	idx := int64(-1)
	if v := resp.Header.Get(hdrIndex); v != "" {
		i, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			t.Fatalf("%s %s on %s: X-Tether-Index %q", method, path, n.ID(), v)
		}
		idx = i
	}
	return resp.StatusCode, idx, resp.Header, jsonMap(resp)
}

// TestClusterAnswersCarryTheIndexOfWhatTheyName: revoking the active key
// through a follower names a replacement installed after the revocation;
// the answer's X-Tether-Index is where the replacement is installed, and
// the follower holds it when it answers. Reads carry the index they
// reflect and wait for one a client asks for (read-your-writes on a node
// that just restarted), or answer 503 once the wait is over.
func TestClusterAnswersCarryTheIndexOfWhatTheyName(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-node")
	}
	tc := newTestCluster(t, 2)
	tc.startThree(func(_ int, n *Node) { manual(n) })
	round := func(what string, done func() bool) {
		t.Helper()
		testutil.Eventually(t, 30*time.Second, what, func() bool {
			if l := tc.leader(); l != nil {
				l.lead.Round(time.Now())
			}
			return done()
		})
	}
	activeEverywhere := func(id *string) func() bool {
		return func() bool {
			a := ""
			for _, n := range tc.live() {
				got := n.ring.ActiveKeyID(time.Now())
				if got == "" || (a != "" && got != a) {
					return false
				}
				a = got
			}
			if *id == "" || a == *id {
				*id = a
				return true
			}
			return false
		}
	}
	var k1, k2 string
	round("a first key active on every node", activeEverywhere(&k1))
	l := tc.waitLeader()
	status, body := adminWrite(t, l, "POST", "/v1/keyring/rotate", nil)
	if status != 200 {
		t.Fatalf("rotate: %d %v", status, body)
	}
	k2, _ = body["id"].(string)
	round("the rotated key active on every node", activeEverywhere(&k2))

	// Revoke k2 through a follower: k1 takes over, k3 is installed after.
	f := tc.follower()
	status, idx, _, body := adminIndexed(t, f, "POST", "/v1/keyring/"+k2+"/revoke", nil)
	k3, _ := body["replacement_id"].(string)
	if status != 200 || body["active_key_id"] != k1 || k3 == "" {
		t.Fatalf("revoke %s via %s: %d %v; want %s active and a replacement", k2, f.ID(), status, body, k1)
	}
	l = tc.waitLeader()
	pIndex, ok := l.lead.PendingIndex(k3)
	if !ok {
		t.Fatalf("the leader has no pending entry for the replacement %s", k3)
	}
	if idx < int64(pIndex) {
		t.Fatalf("the revocation answered with X-Tether-Index %d, but the replacement %s it names is installed at index %d", idx, k3, pIndex)
	}
	if !slices.ContainsFunc(f.ring.List(time.Now()), func(md keyring.Metadata) bool { return md.ID == k3 }) {
		t.Fatalf("%s answered the revocation naming %s, which it does not hold", f.ID(), k3)
	}

	// Every read carries the index it reflects, at least the one asked for.
	for _, path := range []string{"/v1/status", "/v1/members", "/v1/keyring", "/v1/clusters", "/v1/clusters/app/destinations", "/v1/secrets"} {
		for _, n := range tc.live() {
			status, got, _, body := adminIndexed(t, n, "GET", path+"?index="+strconv.FormatInt(idx, 10), nil)
			if status != 200 || got < idx {
				t.Fatalf("GET %s?index=%d on %s: %d, X-Tether-Index %d; want 200 at %d or later: %v", path, idx, n.ID(), status, got, idx, body)
			}
		}
	}

	// Read-your-writes on a node that has just restarted.
	cfg := tc.cfgs["n3"]
	if tc.nodes["n3"] == tc.leader() {
		cfg = tc.cfgs["n2"]
	}
	tc.stop(cfg.NodeID)
	status, drainIdx, _, body := adminIndexed(t, tc.waitLeader(), "POST", "/v1/clusters/app/destinations/d1/drain", map[string]string{hdrRequestID: "ryw-drain"})
	if status != 200 || drainIdx <= 0 {
		t.Fatalf("drain d1: %d index %d %v", status, drainIdx, body)
	}
	back := tc.start(cfg)
	// It comes back on a new Raft port: the leader's round moves it there
	// (no round runs by itself here); it catches up from then on.
	round(back.ID()+" at its new Raft address", func() bool {
		servers, err := tc.waitLeader().store.Servers()
		if err != nil {
			return false
		}
		for _, s := range servers {
			if s.ID == back.ID() {
				return s.Address == back.store.Addr()
			}
		}
		return false
	})
	status, got, _, body := adminIndexed(t, back, "GET", "/v1/clusters/app/destinations", map[string]string{hdrIndex: strconv.FormatInt(drainIdx, 10)})
	if status != 200 || got < drainIdx {
		t.Fatalf("destinations on %s (restarted) at index %d: %d, X-Tether-Index %d: %v", back.ID(), drainIdx, status, got, body)
	}
	draining := false
	for _, d := range body["destinations"].([]any) {
		if d := d.(map[string]any); d["id"] == "d1" {
			draining = d["draining"] == true
		}
	}
	if !draining {
		t.Fatalf("%s answered at index %d (asked %d) without the drain committed at %d: %v", back.ID(), got, drainIdx, drainIdx, body)
	}

	// An index this node does not reach in time: 503 with its own.
	f = tc.follower()
	f.readWait = 200 * time.Millisecond
	far := strconv.FormatUint(f.store.AppliedIndex()+1_000_000, 10)
	status, got, h, body := adminIndexed(t, f, "GET", "/v1/keyring", map[string]string{hdrIndex: far})
	if status != http.StatusServiceUnavailable || got < 0 || h.Get("Retry-After") == "" || body["applied_index"] == nil {
		t.Fatalf("keyring at index %s on %s: %d, X-Tether-Index %d, %v; want 503 with its applied index", far, f.ID(), status, got, body)
	}
	if status, _, _, body := adminIndexed(t, f, "GET", "/v1/keyring?index=soon", nil); status != http.StatusBadRequest {
		t.Fatalf("keyring?index=soon: %d %v, want 400", status, body)
	}
}

// TestClusterRestoreThroughAFollowerAnswersOnceItHoldsTheRestoredState: a
// backup restored through a follower answers with the index at which the
// restored state is applied, and the follower holds that state when it
// answers (a drain made after the backup is gone).
func TestClusterRestoreThroughAFollowerAnswersOnceItHoldsTheRestoredState(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-node")
	}
	tc := newTestCluster(t, 2)
	tc.form(3)
	l := tc.waitLeader()
	resp, err := http.Get("http://" + l.AdminAddr().String() + "/v1/snapshot")
	if err != nil {
		t.Fatal(err)
	}
	backup, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("snapshot: %d %v", resp.StatusCode, err)
	}
	status, drainIdx, _, body := adminIndexed(t, l, "POST", "/v1/clusters/app/destinations/d1/drain", nil)
	if status != 200 {
		t.Fatalf("drain d1: %d %v", status, body)
	}
	f := tc.follower()
	req, _ := http.NewRequest("POST", "http://"+f.AdminAddr().String()+"/v1/snapshot/restore", bytes.NewReader(backup))
	req.Header.Set("Content-Type", "application/json")
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	idx, _ := strconv.ParseInt(resp.Header.Get(hdrIndex), 10, 64)
	if resp.StatusCode != 200 || idx <= drainIdx {
		t.Fatalf("restore via %s: %d, X-Tether-Index %q, %s; want 200 with an index after the drain's %d", f.ID(), resp.StatusCode, resp.Header.Get(hdrIndex), b, drainIdx)
	}
	if got := f.store.AppliedIndex(); got < uint64(idx) {
		t.Fatalf("%s answered the restore at index %d having applied %d", f.ID(), idx, got)
	}
	if d := f.store.Drains(); len(d) != 0 {
		t.Fatalf("%s answered the restore still holding the drain made after the backup: %v", f.ID(), d)
	}
}
