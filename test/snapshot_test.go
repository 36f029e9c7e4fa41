package test

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tether-proxy/tether/test/testutil"
)

// formNamed starts n nodes named prefix1..prefixN with --bootstrap-expect
// n, each joining those before, and waits until each is ready.
func (e *clusterEnv) formNamed(prefix string, n int) []*clusterAgent {
	var out []*clusterAgent
	var join []string
	for i := 1; i <= n; i++ {
		extra := []string{"--bootstrap-expect", fmt.Sprint(n)}
		if len(join) > 0 {
			extra = append(extra, "--join", strings.Join(join, ","))
		}
		a := e.startNode(fmt.Sprintf("%s%d", prefix, i), "", extra...)
		join = append(join, a.gossip)
		out = append(out, a)
	}
	for _, a := range out {
		testutil.Eventually(e.t, 30*time.Second, a.id+" ready", func() bool {
			st, _, _ := testutil.Get(e.t, http.DefaultClient, a.adminURL+"/readyz", nil)
			return st == 200
		})
	}
	return out
}

// TestSnapshotSaveAndRestoreIntoAnotherCluster: the state saved from one
// cluster (its keyring and drains) is restored into a new cluster with
// other node ids and addresses and the same secret; a cookie sealed by the
// old cluster then opens on every node of the new one. A corrupt or
// foreign file is refused before anything changes.
func TestSnapshotSaveAndRestoreIntoAnotherCluster(t *testing.T) {
	b1, b2 := testutil.NewBackend(t, "b1"), testutil.NewBackend(t, "b2")
	old := newClusterEnv(t, cookieConfig(b1, b2))
	n1 := old.startNode("old-1", "")
	testutil.Eventually(t, 30*time.Second, "old-1 ready", func() bool {
		st, _, _ := testutil.Get(t, http.DefaultClient, n1.adminURL+"/readyz", nil)
		return st == 200
	})
	st, hdr, _ := testutil.Get(t, http.DefaultClient, n1.proxyURL+"/", nil)
	if st != 200 || hdr.Get("Set-Cookie") == "" {
		t.Fatalf("first request: %d %v", st, hdr)
	}
	cookie, backend := strings.Split(hdr.Get("Set-Cookie"), ";")[0], hdr.Get("X-Demo-Backend")
	other := map[string]string{"b1": "b2", "b2": "b1"}[backend]
	if code, out := run(t, nil, "drain", "app", other, "--admin", n1.adminURL); code != 0 {
		t.Fatalf("drain: %s", out)
	}
	file := filepath.Join(t.TempDir(), "cluster.snapshot")
	if code, out := run(t, nil, "snapshot", "save", file, "--admin", n1.adminURL); code != 0 || !strings.Contains(out, "1 drain,") {
		t.Fatalf("snapshot save: %d %s", code, out)
	}
	if fi, err := os.Stat(file); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("snapshot file: %v %v", fi, err)
	}

	// A new cluster: other node ids, other addresses, the same secret.
	fresh := newClusterEnv(t, cookieConfig(b1, b2))
	testutil.WriteFile(t, fresh.Secret, "an-e2e-cluster-secret-0123456789abcdef")
	nodes := fresh.formNamed("new-", 3)
	opens := func(a *clusterAgent) bool {
		req, _ := http.NewRequest("GET", a.proxyURL+"/", nil)
		req.Header.Set("Cookie", cookie)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200 && resp.Header.Get("Set-Cookie") == "" && resp.Header.Get("X-Demo-Backend") == backend
	}
	if opens(nodes[0]) {
		t.Fatal("the new cluster opens the old cluster's cookie before the restore: the test proves nothing")
	}

	// Refused before anything changes: a corrupt file, a file that is no
	// snapshot, and no confirmation.
	raw, _ := os.ReadFile(file)
	corrupt := filepath.Join(t.TempDir(), "corrupt.snapshot")
	i := strings.Index(string(raw), `"body": "`) + len(`"body": "`) + 40
	bad := []byte(string(raw))
	if bad[i] == 'A' { // another valid base64 character: the state decodes, its checksum fails
		bad[i] = 'B'
	} else {
		bad[i] = 'A'
	}
	testutil.WriteFile(t, corrupt, string(bad))
	notSnap := filepath.Join(t.TempDir(), "tether.json")
	testutil.WriteFile(t, notSnap, cookieConfig(b1))
	follower := nodes[2]
	for _, tc := range []struct {
		desc, file string
		args       []string
		want       string
	}{
		{"a corrupt file", corrupt, []string{"--yes"}, "the file is corrupt"},
		{"a file that is no snapshot", notSnap, []string{"--yes"}, "not a tether snapshot file"},
		{"no confirmation", file, nil, "pass --yes"},
	} {
		code, out := run(t, nil, append([]string{"snapshot", "restore", tc.file, "--admin", follower.adminURL}, tc.args...)...)
		if code == 0 || !strings.Contains(out, tc.want) {
			t.Fatalf("%s: exit %d, want an error with %q:\n%s", tc.desc, code, tc.want, out)
		}
	}
	if opens(nodes[0]) {
		t.Fatal("a refused restore changed the state")
	}

	// Restored through a follower (it forwards to the leader).
	if code, out := run(t, nil, "snapshot", "restore", file, "--yes", "--admin", follower.adminURL); code != 0 || !strings.Contains(out, "restored") {
		t.Fatalf("snapshot restore: %d %s", code, out)
	}
	for _, a := range nodes {
		testutil.Eventually(t, 20*time.Second, "the old cookie opens on "+a.id, func() bool { return opens(a) })
		_, d := adminJSON(t, "GET", a.adminURL+"/v1/clusters/app/destinations")
		draining := false
		for _, x := range d["destinations"].([]any) {
			if m := x.(map[string]any); m["id"] == other && m["draining"] == true {
				draining = true
			}
		}
		if !draining {
			t.Errorf("%s: %s not draining after the restore: %v", a.id, other, d)
		}
	}
	// The new cluster keeps its own membership.
	if code, out := run(t, nil, "members", "--admin", nodes[0].adminURL); code != 0 || strings.Count(out, "voter") != 3 || strings.Contains(out, "old-1") {
		t.Fatalf("members after the restore: %d\n%s", code, out)
	}
}
