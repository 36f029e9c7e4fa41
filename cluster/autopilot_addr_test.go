package cluster

import "testing"

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
