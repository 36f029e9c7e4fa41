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

// TestDrainAnswersOnceEveryLiveNodeAppliedIt: the answer to a drain (and
// an undrain) on the leader means every node acts on it: right after it, no
// follower shows the old state or sends a new session to the draining
// destination. A live node that cannot apply it within 2 s (stopped here)
// is named in the answer, and tether drain exits non-zero naming it.
func TestDrainAnswersOnceEveryLiveNodeAppliedIt(t *testing.T) {
	b1, b2 := testutil.NewBackend(t, "b1"), testutil.NewBackend(t, "b2")
	e := newClusterEnv(t, cookieConfig(b1, b2))
	nodes := e.form(3)
	var leader *clusterAgent
	var followers []*clusterAgent
	testutil.Eventually(t, 30*time.Second, "a leader", func() bool {
		leader, followers = nil, nil
		for _, a := range nodes {
			_, st := adminJSON(t, "GET", a.adminURL+"/v1/status")
			if st["raft_state"] == "Leader" {
				leader = a
			} else {
				followers = append(followers, a)
			}
		}
		return leader != nil
	})
	drainURL := leader.adminURL + "/v1/clusters/app/destinations/b1/drain"
	for round := 0; round < 5; round++ {
		for _, on := range []bool{true, false} {
			method := map[bool]string{true: "POST", false: "DELETE"}[on]
			st, body := adminJSON(t, method, drainURL)
			if st != 200 {
				t.Fatalf("%s drain: %d %v", method, st, body)
			}
			for _, f := range followers {
				if got := destRow(t, f, "b1")["draining"]; got != on {
					t.Fatalf("round %d: right after the %s answer, %s shows b1 draining=%v", round, method, f.id, got)
				}
				if !on {
					continue
				}
				for i := 0; i < 2; i++ {
					if _, h, _ := testutil.Get(t, http.DefaultClient, f.proxyURL+"/", nil); h.Get("X-Demo-Backend") == "b1" {
						t.Fatalf("round %d: right after the drain answer, %s sent a new session to the draining b1", round, f.id)
					}
				}
			}
			if applied, _ := body["applied_by"].([]any); fmt.Sprint(body["not_applied_by"]) != "[]" || len(applied) != 3 {
				t.Fatalf("%s drain answer: %v, want all three nodes in applied_by", method, body)
			}
		}
	}

	// A live node that cannot apply it in time is named.
	stopped := followers[0]
	stopped.Signal(syscall.SIGSTOP)
	defer stopped.Signal(syscall.SIGCONT)
	began := time.Now()
	st, body := adminJSON(t, "POST", drainURL)
	if st != 200 || fmt.Sprint(body["not_applied_by"]) != fmt.Sprintf("[%s]", stopped.id) || !strings.Contains(fmt.Sprint(body["warning"]), stopped.id) {
		t.Fatalf("drain with %s stopped: %d %v", stopped.id, st, body)
	}
	if took := time.Since(began); took < 2*time.Second {
		t.Errorf("the drain answered after %v, before its 2 s wait for %s", took, stopped.id)
	}
	code, out := run(t, nil, "drain", "app", "b2", "--admin", leader.adminURL)
	if code == 0 || !strings.Contains(out, stopped.id) || !strings.Contains(out, "had not applied it") {
		t.Fatalf("tether drain with %s stopped: exit %d\n%s", stopped.id, code, out)
	}
	stopped.Signal(syscall.SIGCONT)
	testutil.Eventually(t, 30*time.Second, stopped.id+" to catch up", func() bool {
		return destRow(t, stopped, "b2")["draining"] == true
	})
	if code, out := run(t, nil, "drain", "app", "b2", "--undo", "--admin", followers[1].adminURL); code != 0 {
		t.Fatalf("undrain through a follower once every node runs: exit %d\n%s", code, out)
	}
}
