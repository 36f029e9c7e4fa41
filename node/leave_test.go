package node

import (
	"strings"
	"testing"
	"time"

	"github.com/tether-proxy/tether/store"
	"github.com/tether-proxy/tether/test/testutil"
)

// tether leave on a cluster formed with --bootstrap-expect 3 would never
// take the node out of Raft: it is refused at once, naming the flag and
// what to do; --force takes the node out, and only then answers success.
func TestLeaveSucceedsOnlyOutOfRaftAndRefusesBelowBootstrapExpect(t *testing.T) {
	tc := newTestCluster(t, 1)
	tc.form(3)
	f := tc.follower()
	start := time.Now()
	status, body := admin(t, f, "POST", "/v1/leave", nil)
	if status != 409 {
		t.Fatalf("leave below --bootstrap-expect: %d %v, want 409", status, body)
	}
	msg, _ := body["error"].(string)
	for _, want := range []string{"--bootstrap-expect 3", "--force", "tether remove " + f.ID()} {
		if !strings.Contains(msg, want) {
			t.Errorf("refusal %q does not say %q", msg, want)
		}
	}
	if took := time.Since(start); took > 3*time.Second {
		t.Errorf("refusal took %s: it should come before anything changes", took)
	}
	if role := raftRole(tc.waitLeader(), f.ID()); role != "voter" {
		t.Fatalf("after a refused leave %s is %q, want still a voter", f.ID(), role)
	}
	select {
	case <-f.Done():
		t.Fatal("a refused leave stopped the node")
	default:
	}

	status, body = admin(t, f, "POST", "/v1/leave?force=true", nil)
	if status != 200 || body["left"] != true {
		t.Fatalf("leave --force: %d %v", status, body)
	}
	// Answered success: the node is out of the leader's configuration now.
	if role := raftRole(tc.waitLeader(), f.ID()); role != "" {
		t.Fatalf("leave answered left, but %s is still %q in the leader's configuration", f.ID(), role)
	}
	select {
	case <-f.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the node did not stop after leaving")
	}
}

func TestLeavePlanRefusesWhatWouldNotLeaveRaftOrWouldStallIt(t *testing.T) {
	three := []store.Server{{ID: "a", Voter: true}, {ID: "b", Voter: true}, {ID: "c", Voter: true}}
	five := append(append([]store.Server{}, three...), store.Server{ID: "d", Voter: true}, store.Server{ID: "e", Voter: true})
	all := map[string]bool{"a": true, "b": true, "c": true, "d": true, "e": true}
	cases := []struct {
		desc    string
		leader  string
		servers []store.Server
		up      map[string]bool
		expect  int
		force   bool
		want    string // "" allowed, else a part of the refusal
	}{
		{desc: "five voters, expect 3: allowed", leader: "b", servers: five, up: all, expect: 3},
		{desc: "three voters, expect 3: below bootstrap-expect", leader: "b", servers: three, up: all, expect: 3, want: "--bootstrap-expect 3"},
		{desc: "three voters, expect 3, forced: allowed", leader: "b", servers: three, up: all, expect: 3, force: true},
		{desc: "three voters, no expect (joined): allowed", leader: "b", servers: three, up: all},
		{desc: "three voters, one dead: the two left would lack a quorum", leader: "a", servers: three,
			up: map[string]bool{"a": true, "b": false, "c": true}, want: "below the quorum of 2"},
		{desc: "three voters, one dead, forced: allowed", leader: "a", servers: three,
			up: map[string]bool{"a": true, "b": false, "c": true}, force: true},
		{desc: "no leader: refused even forced", servers: three, up: all, force: true, want: "no Raft leader"},
		{desc: "the only voter: refused even forced", leader: "a", servers: []store.Server{{ID: "c", Voter: true}},
			up: all, force: true, want: "only voter"},
		{desc: "a non-voter: allowed below expect", leader: "a",
			servers: append(append([]store.Server{}, three[:2]...), store.Server{ID: "c"}), up: all, expect: 3},
		{desc: "not in Raft: allowed", leader: "a", servers: three[:2], up: all, expect: 3},
	}
	for _, c := range cases {
		t.Run(c.desc, func(t *testing.T) {
			err := leavePlan("c", c.leader, c.servers, c.up, c.expect, c.force)
			switch {
			case c.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
				t.Fatalf("got %v, want a refusal saying %q", err, c.want)
			}
		})
	}
}

// tether leave answers success (the CLI's exit 0) only once the node's
// removal is committed: raft's view on the leaving node drops it as soon
// as the removal is in its log, committed or not. With the only other
// voter down, the removal cannot commit: the leave fails, saying so, and
// the node keeps running; once the voter is back the removal commits and
// the leave, run again, succeeds.
func TestLeaveSucceedsOnlyOnceTheRemovalIsCommitted(t *testing.T) {
	if testing.Short() {
		t.Skip("a slow in-process cluster test (over 5 s); make test runs it")
	}
	tc := newTestCluster(t, 1)
	tc.form(3)
	leader := tc.waitLeader()
	var followers []*Node
	for _, n := range tc.live() {
		if n != leader {
			followers = append(followers, n)
		}
	}
	leaving, down := followers[0], followers[1]
	// The configuration without the leaving node is {leader, down}: it
	// commits only with down's vote.
	downCfg := tc.cfgs[down.ID()]
	downCfg.RaftAddr = down.store.Addr() // it comes back where the others reach it
	tc.stop(down.ID())
	status, body := admin(t, leaving, "POST", "/v1/leave?force=true", nil)
	if status == 200 {
		t.Fatalf("leave answered %d %v while its removal could not commit (the other voter is down)", status, body)
	}
	if msg, _ := body["error"].(string); !strings.Contains(msg, "not committed") || !strings.Contains(msg, "tether remove "+leaving.ID()) {
		t.Errorf("leave failed with %d %q: want it to say the removal is not committed and what to do", status, msg)
	}
	select {
	case <-leaving.Done():
		t.Fatal("the node stopped although its leave failed")
	default:
	}

	// The voter comes back: the removal commits; the leave run again
	// answers success and the node stops.
	tc.start(downCfg)
	testutil.Eventually(t, 60*time.Second, "a leave that succeeds once the voter is back", func() bool {
		status, body = admin(t, leaving, "POST", "/v1/leave?force=true", nil)
		return status == 200 && body["left"] == true
	})
	select {
	case <-leaving.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the node did not stop after leaving")
	}
	tc.stop(leaving.ID())
	testutil.Eventually(t, 20*time.Second, leaving.ID()+" out of the committed configuration on every node", func() bool {
		for _, n := range tc.live() {
			if _, ok := n.store.RemovedAt(leaving.ID()); !ok || raftRole(n, leaving.ID()) != "" {
				return false
			}
		}
		return true
	})
	tc.waitSettled()
	tc.waitIdentical()
}
