package test

import (
	"fmt"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tether-proxy/tether/test/testutil"
)

// memberRow is member id's row of GET /v1/members on a.
func memberRow(t *testing.T, a *clusterAgent, id string) map[string]any {
	t.Helper()
	_, m := adminJSON(t, "GET", a.adminURL+"/v1/members")
	rows, _ := m["members"].([]any)
	for _, r := range rows {
		if r := r.(map[string]any); r["id"] == id {
			return r
		}
	}
	return nil
}

// ready says whether a's /readyz answers 200.
func ready(t *testing.T, a *clusterAgent) bool {
	st, _, _ := testutil.Get(t, http.DefaultClient, a.adminURL+"/readyz", nil)
	return st == 200
}

// TestANodeStartedWithALiveNodesIDSaysItIsTaken: a new node started with
// the id of a live member stops, exit non-zero, naming the id and the
// address that holds it; the live member keeps its place and says another
// process claimed its id. A member restarted on a new address, with or
// without its state, is the same node moving: it keeps its id.
func TestANodeStartedWithALiveNodesIDSaysItIsTaken(t *testing.T) {
	e := newClusterEnv(t, cookieConfig(testutil.NewBackend(t, "b1")))
	n1 := e.startNode("n1", "")
	n2 := e.startNode("n2", "", "--join", n1.gossip)
	testutil.Eventually(t, 60*time.Second, "n2 ready", func() bool { return ready(t, n2) })

	dup := start(t, nil, "agent", "--config", e.Config, "--node-id", "n2", "--data-dir", t.TempDir(), "--admin-addr", "127.0.0.1:0",
		"--raft-addr", testutil.FreeAddr(t), "--gossip-addr", testutil.FreeAddr(t), "--cluster-secret-file", e.Secret, "--no-access-log", "--join", n1.gossip)
	code := dup.Wait(60 * time.Second)
	out := dup.Stderr.String()
	want := fmt.Sprintf(`node id "n2" is taken: a live node at %s`, n2.gossip)
	if code == 0 || !strings.Contains(out, want) {
		t.Fatalf("a second node under id n2: exit %d, want non-zero and %q in:\n%s", code, want, out)
	}
	if !ready(t, n2) {
		t.Fatal("the live n2 is not ready after the duplicate tried its id")
	}
	if row := memberRow(t, n1, "n2"); row == nil || row["address"] != n2.gossip || row["state"] != "alive" {
		t.Fatalf("n1 sees n2 as %v, want alive at %s", row, n2.gossip)
	}
	testutil.Eventually(t, 10*time.Second, "n2 to say another process claimed its id", func() bool {
		return len(linesWith(t, n2.proc, "another process was started with this node's id; it holds no cluster state and stops", nil)) > 0
	})
	for _, m := range logRecords(t, "n1", n1.proc) {
		if strings.HasPrefix(fmt.Sprint(m["msg"]), "Conflicting address") && m["level"] != "DEBUG" {
			t.Errorf("n1 logs memberlist's conflict line: %v", m)
		}
	}

	// The same node moving: stopped, then started on new addresses, once
	// with its state and once without (a replaced disk).
	for _, tc := range []struct {
		desc    string
		dataDir string
	}{
		{"with its state", n2.dataDir},
		{"without state", ""},
	} {
		t.Run("restarted on a new address "+tc.desc, func(t *testing.T) {
			old := e.agents["n2"]
			old.Signal(syscall.SIGTERM)
			if code := old.Wait(30 * time.Second); code != 0 {
				t.Fatalf("n2 stop: exit %d", code)
			}
			e.ForgetAddrs("n2")
			moved := e.startNode("n2", tc.dataDir, "--join", n1.gossip)
			testutil.Eventually(t, 60*time.Second, "n2 alive at its new address on n1", func() bool {
				select {
				case <-moved.Done():
					t.Fatalf("n2 restarted on a new address stopped: %v\n%s", moved.Err(), moved.Stderr.String())
				default:
				}
				row := memberRow(t, n1, "n2")
				return row != nil && row["address"] == moved.gossip && row["state"] == "alive" && ready(t, moved)
			})
		})
	}
}
