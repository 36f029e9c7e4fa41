package leader

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tether-proxy/tether/cluster"
	"github.com/tether-proxy/tether/store"
)

func TestKeyLaggardsHoldUpAliveAndSuspectMembersAndPassOverOnlyFailedOnes(t *testing.T) {
	member := func(id string, st cluster.State, durable uint64) cluster.Member {
		return cluster.Member{Meta: cluster.Meta{ID: id, Durable: durable}, State: st}
	}
	cases := []struct {
		desc        string
		members     []cluster.Member
		wantLacking []string
		wantFailed  []string
	}{
		{desc: "every member holds it", members: []cluster.Member{member("a", cluster.StateAlive, 9), member("b", cluster.StateSuspect, 9)}},
		{desc: "an alive member lacks it", members: []cluster.Member{member("a", cluster.StateAlive, 9), member("b", cluster.StateAlive, 4)}, wantLacking: []string{"b"}},
		{desc: "a suspect member lacks it: it holds the key up too", members: []cluster.Member{member("a", cluster.StateAlive, 9), member("b", cluster.StateSuspect, 4)}, wantLacking: []string{"b"}},
		{desc: "a dead member lacks it: passed over after the bound", members: []cluster.Member{member("a", cluster.StateAlive, 9), member("c", cluster.StateDead, 1)}, wantFailed: []string{"c"}},
		{desc: "a member that left is not counted", members: []cluster.Member{member("a", cluster.StateAlive, 9), member("d", cluster.StateLeft, 0)}},
		{desc: "a member that cannot persist is passed over at once", members: []cluster.Member{member("a", cluster.StateAlive, 9),
			{Meta: cluster.Meta{ID: "e", Durable: 1, NoPersist: true}, State: cluster.StateAlive}}},
		{desc: "a member that stopped applying (it needs a newer tether) is passed over at once", members: []cluster.Member{member("a", cluster.StateAlive, 9),
			{Meta: cluster.Meta{ID: "f", Durable: 5, Stopped: 6}, State: cluster.StateAlive}}},
	}
	for _, c := range cases {
		t.Run(c.desc, func(t *testing.T) {
			lacking, failed := laggardsOf(c.members, func(m cluster.Member) uint64 { return m.Durable }, 9)
			if !slices.Equal(lacking, c.wantLacking) || !slices.Equal(failed, c.wantFailed) {
				t.Fatalf("lacking %v failed %v, want %v %v", lacking, failed, c.wantLacking, c.wantFailed)
			}
		})
	}
}

// TestGateCountsEveryRaftServer: the gate's rule over one view of the Raft
// configuration and gossip.
func TestGateCountsEveryRaftServer(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	drain := store.SetDrain{Cluster: "app", Destination: "d1", Deadline: now}
	clock := store.SetClock{At: now}
	full, old := string(store.Commands), "1111001" // old: no SetDrain, no ClearDrain
	member := func(id, set string, st cluster.State) cluster.Member {
		return cluster.Member{Meta: cluster.Meta{ID: id, Commands: set, Version: "v"}, State: st}
	}
	servers := []store.Server{{ID: "n1"}, {ID: "n2"}, {ID: "n3"}}
	for _, tc := range []struct {
		name    string
		cmd     store.Command
		servers []store.Server
		members []cluster.Member
		refuse  []string // substrings of the refusal; none: allowed
	}{
		{"every server current", drain, servers,
			[]cluster.Member{member("n1", full, cluster.StateAlive), member("n2", full, cluster.StateAlive), member("n3", full, cluster.StateDead)}, nil},
		{"alive server behind", drain, servers,
			[]cluster.Member{member("n1", full, cluster.StateAlive), member("n2", full, cluster.StateAlive), member("n3", old, cluster.StateAlive)},
			[]string{"n3 (version v", "SetDrain v1"}},
		{"dead server behind", drain, servers,
			[]cluster.Member{member("n1", full, cluster.StateAlive), member("n2", full, cluster.StateAlive), member("n3", old, cluster.StateDead)},
			[]string{"n3 (dead, a Raft server that would stop at it once started", "SetDrain v1"}},
		{"left member out of Raft does not count", drain, servers[:2],
			[]cluster.Member{member("n1", full, cluster.StateAlive), member("n2", full, cluster.StateAlive), member("n3", old, cluster.StateLeft)}, nil},
		{"alive member not yet in Raft counts", drain, servers[:2],
			[]cluster.Member{member("n1", full, cluster.StateAlive), member("n2", full, cluster.StateAlive), member("n4", old, cluster.StateAlive)},
			[]string{"n4 (version v"}},
		{"unknown server: a baseline command passes", drain, servers,
			[]cluster.Member{member("n1", full, cluster.StateAlive), member("n2", full, cluster.StateAlive)}, nil},
		{"unknown server: a newer command is refused", clock, servers,
			[]cluster.Member{member("n1", full, cluster.StateAlive), member("n2", full, cluster.StateAlive)},
			[]string{"n3 (a Raft server that is down and whose command set is unknown", "tether remove n3", "SetClock v1"}},
		{"this node's own set is the store's to check", drain, servers,
			[]cluster.Member{member("n1", old, cluster.StateAlive), member("n2", full, cluster.StateAlive), member("n3", full, cluster.StateAlive)}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := gateCheck(tc.cmd, "n1", tc.servers, tc.members)
			if len(tc.refuse) == 0 {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if err == nil || !errors.Is(err, store.ErrUnsupported) {
				t.Fatalf("got %v, want ErrUnsupported", err)
			}
			for _, s := range tc.refuse {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("refusal %q does not say %q", err, s)
				}
			}
		})
	}
}
