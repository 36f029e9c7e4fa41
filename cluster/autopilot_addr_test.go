package cluster

import (
	"testing"
	"time"
)

// TestPlanNeverMovesAServerOntoALiveServersAddress: a known member that now
// advertises the Raft address a live server holds (pod IP reuse, every
// node on :7000) is left where it is: the store would refuse the move and
// the rest of the plan would never run. The address moves once the holder
// is gone.
func TestPlanNeverMovesAServerOntoALiveServersAddress(t *testing.T) {
	claim := func(m Member, addr string) Member { m.RaftAddr = addr; return m }
	cases := []struct {
		desc    string
		servers []RaftServer
		members []Member
		want    string
	}{
		{"a voter claiming a live voter's address: nothing moves",
			[]RaftServer{v("a"), v("b"), v("c")},
			[]Member{healthyMem("a"), healthyMem("b"), claim(healthyMem("c"), "b:7000")}, ""},
		{"a voter moving to a free address: updated in place",
			[]RaftServer{v("a"), v("b"), v("c")},
			[]Member{healthyMem("a"), healthyMem("b"), claim(healthyMem("c"), "c2:7000")}, "promote c@c2:7000"},
	}
	for _, c := range cases {
		t.Run(c.desc, func(t *testing.T) {
			if got := planString(Plan("a", c.servers, c.members, leaderIdx, pol, t0)); got != c.want {
				t.Errorf("plan %q, want %q", got, c.want)
			}
		})
	}
}

// TestPlanMovesOntoAFailedServersAddressAfterTheGrace: a member that
// advertises the Raft address of a failed server (a node restarted on the
// address of one that died: pod IP reuse, every node on :7000) takes it
// once that server has been failed for the voter grace: the holder is
// removed first (Raft refuses two servers at one address), even when that
// leaves fewer voters than --bootstrap-expect for the moment, since the
// claimant takes its place. Before the grace nothing is tried: the add
// would be refused and stop the rest of the round.
func TestPlanMovesOntoAFailedServersAddressAfterTheGrace(t *testing.T) {
	claim := func(m Member, addr string) Member { m.RaftAddr = addr; return m }
	expect3 := Policy{MaxVoters: 5, Expect: 3, ReapTimeout: 72 * time.Hour, MaxLag: 10, Stabilization: 10 * time.Second}
	cases := []struct {
		desc    string
		servers []RaftServer
		members []Member
		want    string
	}{
		{"a new member on a voter's address, the voter failed past the grace, voters = expect: the voter goes, the member comes",
			[]RaftServer{v("a"), v("b"), v("c")},
			[]Member{healthyMem("a"), healthyMem("b"), mem("c", StateDead, time.Minute), claim(healthyMem("d"), "c:7000")},
			"remove c; add-nonvoter d@c:7000"},
		{"a new member on a voter's address, the voter failed within the grace: nothing yet",
			[]RaftServer{v("a"), v("b"), v("c")},
			[]Member{healthyMem("a"), healthyMem("b"), mem("c", StateDead, 5*time.Second), claim(healthyMem("d"), "c:7000")},
			""},
		{"a non-voter moving onto a failed voter's address past the grace: the voter goes, the move is made, the mover fills the vote at its new address",
			[]RaftServer{v("a"), v("b"), v("c"), nv("d")},
			[]Member{healthyMem("a"), healthyMem("b"), mem("c", StateDead, time.Minute), claim(healthyMem("d"), "c:7000")},
			"remove c; add-nonvoter d@c:7000; promote d@c:7000"},
		{"a non-voter moving onto a failed voter's address within the grace: nothing yet",
			[]RaftServer{v("a"), v("b"), v("c"), nv("d")},
			[]Member{healthyMem("a"), healthyMem("b"), mem("c", StateDead, 5*time.Second), claim(healthyMem("d"), "c:7000")},
			""},
		{"a voter moving onto a failed non-voter's address: the non-voter goes at once",
			[]RaftServer{v("a"), v("b"), v("c"), nv("d")},
			[]Member{healthyMem("a"), healthyMem("b"), claim(healthyMem("c"), "d:7000"), mem("d", StateDead, 5*time.Second)},
			"remove d; promote c@d:7000"},
		{"a member moving onto a suspect voter's address: the holder may be alive, nothing moves",
			[]RaftServer{v("a"), v("b"), v("c"), nv("d")},
			[]Member{healthyMem("a"), healthyMem("b"), mem("c", StateSuspect, time.Minute), claim(healthyMem("d"), "c:7000")},
			""},
		{"a member claiming the leader's address: the leader stays",
			[]RaftServer{v("a"), v("b"), v("c")},
			[]Member{healthyMem("a"), healthyMem("b"), healthyMem("c"), claim(healthyMem("d"), "a:7000")},
			""},
	}
	for _, c := range cases {
		t.Run(c.desc, func(t *testing.T) {
			if got := planString(Plan("a", c.servers, c.members, leaderIdx, expect3, t0)); got != c.want {
				t.Fatalf("plan %q, want %q", got, c.want)
			}
		})
	}
}

// TestAddressMoveOntoAFailedVoterCompletesWithBootstrapExpectEqualToVoters
// runs the rounds a leader would: three voters formed with
// --bootstrap-expect 3, one fails and a node restarts on its address. Raft
// (the fake refuses an address another server holds, as the store does)
// ends with three voters, the new node at the address, within the grace
// and a few rounds.
func TestAddressMoveOntoAFailedVoterCompletesWithBootstrapExpectEqualToVoters(t *testing.T) {
	p := Policy{MaxVoters: 3, Expect: 3, ReapTimeout: 72 * time.Hour, MaxLag: 10, Stabilization: 2 * time.Second}
	for _, c := range []struct {
		desc    string
		servers []RaftServer
	}{
		{"a new node", []RaftServer{v("a"), v("b"), v("c")}},
		{"a non-voter moving", []RaftServer{v("a"), v("b"), v("c"), nv("d")}},
	} {
		t.Run(c.desc, func(t *testing.T) {
			const newID = "d"
			f := newFakeRaft(c.servers...)
			f.uniqueAddrs = true
			members := map[string]Member{"a": healthyMem("a"), "b": healthyMem("b"), "c": mem("c", StateDead, 0)}
			m := healthyMem(newID)
			m.RaftAddr = "c:7000"
			members[newID] = m
			var ap Autopilot
			var last error // a leader logs a failed step and plans again next round
			now := t0
			deadline := t0.Add(DefaultVoterGrace + time.Minute)
			for ; now.Before(deadline); now = now.Add(time.Second) {
				var ms []Member
				for _, m := range members {
					ms = append(ms, m)
				}
				if err := ap.Reconcile(f, "a", ms, leaderIdx, p, now, nil); err != nil {
					last = err
				}
				if s, ok := f.servers[newID]; ok && s.Address == "c:7000" && s.Voter {
					break
				}
			}
			s, ok := f.servers[newID]
			if !ok || s.Address != "c:7000" || !s.Voter {
				t.Fatalf("after %s: %s is %+v (in configuration: %v), want a voter at c:7000; configuration %v; last failed step: %v", now.Sub(t0), newID, s, ok, f.servers, last)
			}
			if _, ok := f.servers["c"]; ok {
				t.Fatalf("the failed c is still in the configuration: %v", f.servers)
			}
			if took := now.Sub(t0); took < DefaultVoterGrace {
				t.Fatalf("moved after %s, before the voter grace %s", took, DefaultVoterGrace)
			}
		})
	}
}
