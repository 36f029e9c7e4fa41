package test

import (
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tether-proxy/tether/test/testutil"
)

// TestLeaveCLIExitsZeroOnlyOnceOutOfRaft: on a cluster started with
// --bootstrap-expect 3, `tether leave` is refused at once (exit 1, saying
// why and what to do) and the node stays a voter; `tether leave --force`
// exits 0 once the node is out of the Raft configuration.
func TestLeaveCLIExitsZeroOnlyOnceOutOfRaft(t *testing.T) {
	b1 := testutil.NewBackend(t, "b1")
	e := newClusterEnv(t, cookieConfig(b1))
	nodes := e.form(3)
	target := nodes[2]
	// raftRole is id's role in the leader's view (the one that commits).
	raftRole := func(id string) string {
		_, st := adminJSON(t, "GET", nodes[0].adminURL+"/v1/status")
		leader := nodes[0]
		for _, a := range nodes {
			if a.id == st["leader_id"] {
				leader = a
			}
		}
		_, m := adminJSON(t, "GET", leader.adminURL+"/v1/members")
		rows, _ := m["members"].([]any)
		for _, r := range rows {
			if r := r.(map[string]any); r["id"] == id {
				return r["raft"].(string)
			}
		}
		return "absent"
	}
	testutil.Eventually(t, 30*time.Second, target.id+" a voter", func() bool { return raftRole(target.id) == "voter" })

	cases := []struct {
		desc     string
		args     []string
		wantCode int
		wantOut  []string
		wantRole func(string) bool
	}{
		{desc: "below --bootstrap-expect: refused, exit 1, the node stays a voter",
			args: []string{"leave"}, wantCode: 1,
			wantOut:  []string{"--bootstrap-expect 3", "tether leave --force", "tether remove " + target.id},
			wantRole: func(r string) bool { return r == "voter" }},
		{desc: "--force: exit 0 once out of Raft",
			args: []string{"leave", "--force"}, wantCode: 0,
			wantOut:  []string{"true"},
			wantRole: func(r string) bool { return r == "none" || r == "absent" }},
	}
	for _, c := range cases {
		t.Run(c.desc, func(t *testing.T) {
			start := time.Now()
			cmd := exec.Command(tetherBin, append(c.args, "--admin", target.adminURL)...)
			out, err := cmd.CombinedOutput()
			code := 0
			if ee, ok := err.(*exec.ExitError); ok {
				code = ee.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			if code != c.wantCode {
				t.Fatalf("tether %v exited %d after %s, want %d: %s", c.args, code, time.Since(start).Round(time.Millisecond), c.wantCode, out)
			}
			for _, w := range c.wantOut {
				if !strings.Contains(string(out), w) {
					t.Errorf("tether %v printed %q, want it to say %q", c.args, out, w)
				}
			}
			if r := raftRole(target.id); !c.wantRole(r) {
				t.Fatalf("after tether %v, %s is %q in the leader's view", c.args, target.id, r)
			}
		})
	}
	if code := target.Wait(30 * time.Second); code != 0 {
		t.Fatalf("the node that left exited %d", code)
	}
}

// runTether runs the CLI and returns its exit code and output.
func runTether(t *testing.T, args ...string) (int, string) {
	t.Helper()
	out, err := exec.Command(tetherBin, args...).CombinedOutput()
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode(), string(out)
	} else if err != nil {
		t.Fatal(err)
	}
	return 0, string(out)
}

// TestLeaveCLIExitsZeroOnlyOnceTheRemovalIsCommitted: with the only other
// voter killed, the leaving node's removal cannot commit (the configuration
// without it is the leader and the killed voter): `tether leave --force`
// exits 1 saying so and the node keeps running, although raft's own view
// on the leaving node drops it at once. Once the voter is back the
// removal commits, `tether leave` run again exits 0, and every node lists
// the node as left.
func TestLeaveCLIExitsZeroOnlyOnceTheRemovalIsCommitted(t *testing.T) {
	if testing.Short() {
		t.Skip("forms a cluster and waits out a leave that cannot commit")
	}
	b1 := testutil.NewBackend(t, "b1")
	e := newClusterEnv(t, cookieConfig(b1))
	nodes := e.form(3)
	var leader string
	testutil.Eventually(t, 30*time.Second, "a leader", func() bool {
		_, st := adminJSON(t, "GET", nodes[0].adminURL+"/v1/status")
		leader, _ = st["leader_id"].(string)
		return leader != ""
	})
	var followers []*clusterAgent
	for _, a := range nodes {
		if a.id != leader {
			followers = append(followers, a)
		}
	}
	leaving, down := followers[0], followers[1]
	down.proc.Signal(syscall.SIGKILL)
	down.proc.Wait(10 * time.Second)

	code, out := runTether(t, "leave", "--force", "--admin", leaving.adminURL)
	if code == 0 || !strings.Contains(out, "not committed") {
		t.Fatalf("tether leave --force with the removal unable to commit exited %d: %s", code, out)
	}
	select {
	case <-leaving.proc.Done():
		t.Fatal("the node stopped although its leave failed")
	default:
	}

	again := e.startNode(down.id, down.dataDir, down.extra...)
	testutil.Eventually(t, 60*time.Second, "tether leave to exit 0 once the voter is back", func() bool {
		code, out = runTether(t, "leave", "--force", "--admin", leaving.adminURL)
		return code == 0
	})
	if code := leaving.proc.Wait(30 * time.Second); code != 0 {
		t.Fatalf("the node that left exited %d", code)
	}
	// Every node that knew it lists it as left; the restarted one never
	// saw it in gossip (it had left before) and does not list it at all.
	// Neither holds it in Raft.
	stay := []*clusterAgent{again}
	for _, a := range nodes {
		if a.id == leader {
			stay = append(stay, a)
		}
	}
	for _, a := range stay {
		testutil.Eventually(t, 20*time.Second, leaving.id+" out of Raft and left on "+a.id, func() bool {
			_, m := adminJSON(t, "GET", a.adminURL+"/v1/members")
			rows, _ := m["members"].([]any)
			for _, r := range rows {
				if r := r.(map[string]any); r["id"] == leaving.id {
					return r["state"] == "left" && r["raft"] == "none"
				}
			}
			return a == again && len(rows) == 2
		})
	}
}
