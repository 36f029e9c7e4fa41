package test

import (
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/tether-proxy/tether/test/testutil"
)

// TestLeaveCLIExitsZeroOnlyOnceOutOfRaft: on a cluster started with
// --bootstrap-expect 3, `tether leave` is refused at once (exit 1, saying
// why and what to do) and the node stays a voter; `tether leave --force`
// exits 0 once the node is out of the Raft configuration.
func TestLeaveCLIExitsZeroOnlyOnceOutOfRaft(t *testing.T) {
	b1 := newBackend(t, "b1")
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
