package cluster

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

const leaderIdx = 100

var pol = Policy{MaxVoters: 5, Expect: 3, ReapTimeout: 72 * time.Hour, MaxLag: 10, Stabilization: 10 * time.Second}

func v(id string) RaftServer  { return RaftServer{ID: id, Address: id + ":7000", Voter: true} }
func nv(id string) RaftServer { return RaftServer{ID: id, Address: id + ":7000"} }

// mem is a member in state s since ago before t0, caught up.
func mem(id string, s State, ago time.Duration) Member {
	return Member{Meta: Meta{ID: id, RaftAddr: id + ":7000", Durable: leaderIdx}, State: s, Since: t0.Add(-ago)}
}

func healthyMem(id string) Member { return mem(id, StateAlive, time.Hour) }

func behind(m Member) Member { m.Durable = leaderIdx - 11; return m }

func planString(as []Action) string {
	var out []string
	for _, a := range as {
		s := a.Kind.String() + " " + a.ID
		if a.Kind == AddNonvoter || a.Kind == Promote {
			s += "@" + a.Address
		}
		out = append(out, s)
	}
	return strings.Join(out, "; ")
}

func healthyAll(ids ...string) []Member {
	var ms []Member
	for _, id := range ids {
		ms = append(ms, healthyMem(id))
	}
	return ms
}

func TestPlanRules(t *testing.T) {
	cases := []struct {
		desc    string
		servers []RaftServer
		members []Member
		p       *Policy
		want    string
	}{
		{"in step: nothing to do",
			[]RaftServer{v("a"), v("b"), v("c")}, healthyAll("a", "b", "c"), nil, ""},
		{"an alive member not in the configuration is added as a non-voter at its raft address",
			[]RaftServer{v("a"), v("b"), v("c")}, append(healthyAll("a", "b", "c"), mem("d", StateAlive, 0)), nil,
			"add-nonvoter d@d:7000"},
		{"a member of another cluster is not added",
			[]RaftServer{v("a")}, []Member{func() Member { m := healthyMem("a"); m.ClusterID = "c1"; return m }(), func() Member { m := healthyMem("x"); m.ClusterID = "c2"; return m }()}, nil, ""},
		{"a member holding our cluster id is added",
			[]RaftServer{v("a")}, []Member{func() Member { m := healthyMem("a"); m.ClusterID = "c1"; return m }(), func() Member { m := healthyMem("x"); m.ClusterID = "c1"; return m }()}, nil, "add-nonvoter x@x:7000"},
		{"a member without a raft address is not added",
			[]RaftServer{v("a")}, []Member{healthyMem("a"), {Meta: Meta{ID: "x"}, State: StateAlive}}, nil, ""},
		{"a suspect member is not added yet",
			[]RaftServer{v("a")}, []Member{healthyMem("a"), mem("x", StateSuspect, 0)}, nil, ""},
		{"healthy non-voters are promoted while voters < MaxVoters",
			[]RaftServer{v("a"), v("b"), v("c"), nv("d"), nv("e"), nv("f")}, healthyAll("a", "b", "c", "d", "e", "f"), nil,
			"promote d@d:7000; promote e@e:7000"},
		{"promotion keeps the number of voters odd",
			[]RaftServer{v("a"), v("b"), v("c"), nv("d")}, healthyAll("a", "b", "c", "d"), nil, ""},
		{"a standalone leader with two healthy non-voters promotes both",
			[]RaftServer{v("a"), nv("b"), nv("c")}, healthyAll("a", "b", "c"), nil, "promote b@b:7000; promote c@c:7000"},
		{"a non-voter alive for less than Stabilization is not promoted",
			[]RaftServer{v("a"), nv("b"), nv("c")}, []Member{healthyMem("a"), healthyMem("b"), mem("c", StateAlive, 5*time.Second)}, nil, ""},
		{"a non-voter more than MaxLag behind is not promoted",
			[]RaftServer{v("a"), nv("b"), nv("c")}, []Member{healthyMem("a"), healthyMem("b"), behind(healthyMem("c"))}, nil, ""},
		{"a non-voter exactly MaxLag behind is caught up",
			[]RaftServer{v("a"), nv("b"), nv("c")}, []Member{healthyMem("a"), healthyMem("b"), func() Member { m := healthyMem("c"); m.Durable = leaderIdx - 10; return m }()}, nil,
			"promote b@b:7000; promote c@c:7000"},
		{"a voter that left is removed",
			[]RaftServer{v("a"), v("b"), v("c"), v("d"), v("e")}, append(healthyAll("a", "b", "c", "d"), mem("e", StateLeft, time.Second)), nil,
			"remove e"},
		{"a non-voter that left is removed",
			[]RaftServer{v("a"), v("b"), v("c"), nv("d")}, append(healthyAll("a", "b", "c"), mem("d", StateLeft, time.Second)), nil,
			"remove d"},
		{"a failed server is kept until ReapTimeout",
			[]RaftServer{v("a"), v("b"), v("c"), nv("d")}, append(healthyAll("a", "b", "c"), mem("d", StateDead, 71*time.Hour)), nil, ""},
		{"a server failed longer than ReapTimeout is removed",
			[]RaftServer{v("a"), v("b"), v("c"), nv("d")}, append(healthyAll("a", "b", "c"), mem("d", StateDead, 73*time.Hour)), nil, "remove d"},
		{"self is never removed, even reported left",
			[]RaftServer{v("a"), v("b"), v("c"), v("d"), v("e")}, append(healthyAll("b", "c", "d", "e"), mem("a", StateLeft, time.Hour)), nil, ""},
		{"voter removals per round keep a quorum: at most (voters-1)/2, the longest failed first",
			[]RaftServer{v("a"), v("b"), v("c"), v("d"), v("e")},
			append(healthyAll("a", "b"), mem("c", StateDead, 80*time.Hour), mem("d", StateDead, 90*time.Hour), mem("e", StateDead, 100*time.Hour)),
			&Policy{MaxVoters: 5, Expect: 1}, "remove e; remove d"},
		{"non-voters are removed first and without the quorum limit",
			[]RaftServer{v("a"), v("b"), v("c"), nv("d"), nv("e"), nv("f")},
			append(healthyAll("a", "b"), mem("c", StateLeft, 0), mem("d", StateLeft, 0), mem("e", StateDead, 80*time.Hour), mem("f", StateLeft, 0)),
			&Policy{MaxVoters: 5, Expect: 1}, "remove d; remove e; remove f; remove c"},
		{"voters are never removed below Expect",
			[]RaftServer{v("a"), v("b"), v("c")}, append(healthyAll("a", "b"), mem("c", StateLeft, 0)), nil, ""},
		{"a single-voter leader removes its left non-voters",
			[]RaftServer{v("a"), nv("b")}, []Member{healthyMem("a"), mem("b", StateLeft, 0)}, &Policy{}, "remove b"},
		{"a failed voter is replaced by a healthy caught-up non-voter: promote, then demote",
			[]RaftServer{v("a"), v("b"), v("c"), nv("d")}, append(healthyAll("a", "b", "d"), mem("c", StateDead, time.Minute)), nil,
			"promote d@d:7000; demote c"},
		{"a failed voter stays when no non-voter is healthy",
			[]RaftServer{v("a"), v("b"), v("c"), nv("d")}, append(healthyAll("a", "b"), mem("c", StateDead, time.Minute), behind(healthyMem("d"))), nil, ""},
		{"a suspect voter is not replaced",
			[]RaftServer{v("a"), v("b"), v("c"), nv("d")}, append(healthyAll("a", "b", "d"), mem("c", StateSuspect, time.Minute)), nil, ""},
		{"a suspect non-voter is not promoted",
			[]RaftServer{v("a"), nv("b"), nv("c")}, append(healthyAll("a", "b"), mem("c", StateSuspect, time.Hour)), nil, ""},
		{"a left voter that cannot be removed (Expect) is replaced",
			[]RaftServer{v("a"), v("b"), v("c"), nv("d")}, append(healthyAll("a", "b", "d"), mem("c", StateLeft, 0)), nil,
			"promote d@d:7000; demote c"},
		{"extra voters are demoted: failed first, then the highest ids, never self",
			[]RaftServer{v("a"), v("b"), v("c"), v("d"), v("e"), v("f"), v("g")},
			append(healthyAll("a", "c", "d", "e", "f", "g"), mem("b", StateDead, time.Minute)), &Policy{MaxVoters: 5, Expect: 1, ReapTimeout: time.Hour},
			"demote b; demote g"},
		{"the leader holding the highest id keeps its vote",
			[]RaftServer{v("a"), v("b"), v("c"), v("d"), v("e"), v("f"), v("g")},
			healthyAll("a", "b", "c", "d", "e", "f", "g"), &Policy{MaxVoters: 5, Expect: 1},
			"demote f; demote e"},
		{"an even number of voters with a failed one: the failed one is demoted",
			[]RaftServer{v("a"), v("b"), v("c"), v("d")}, append(healthyAll("a", "b", "d"), mem("c", StateDead, time.Minute)), nil,
			"demote c"},
		{"an even number of healthy voters stays",
			[]RaftServer{v("a"), v("b"), v("c"), v("d")}, healthyAll("a", "b", "c", "d"), nil, ""},
		{"an odd number of voters keeps a failed one until it can be replaced",
			[]RaftServer{v("a"), v("b"), v("c")}, append(healthyAll("a", "b"), mem("c", StateDead, time.Minute)), nil, ""},
		{"a raft server unknown to gossip is failed since now: neither replaced nor reaped by one call",
			[]RaftServer{v("a"), v("b"), v("c"), nv("d")}, healthyAll("a", "b", "d"), &Policy{MaxVoters: 3, Expect: 1, ReapTimeout: time.Nanosecond},
			""},
		{"a changed raft address updates a non-voter",
			[]RaftServer{v("a"), v("b"), v("c"), {ID: "d", Address: "old:7000"}}, healthyAll("a", "b", "c", "d"), nil,
			"add-nonvoter d@d:7000"},
		{"a changed raft address updates a voter, keeping its vote",
			[]RaftServer{v("a"), v("b"), {ID: "c", Address: "old:7000", Voter: true}}, healthyAll("a", "b", "c"), nil,
			"promote c@c:7000"},
		{"a new member reusing a failed server's address: the stale server goes first",
			[]RaftServer{v("a"), v("b"), v("c"), {ID: "old", Address: "d:7000"}},
			append(healthyAll("a", "b", "c", "d"), mem("old", StateDead, time.Minute)), nil,
			"remove old; add-nonvoter d@d:7000"},
		{"a new member reusing a live server's address waits",
			[]RaftServer{v("a"), v("b"), v("c"), {ID: "old", Address: "d:7000"}},
			append(healthyAll("a", "b", "c", "d"), func() Member { m := healthyMem("old"); m.RaftAddr = "d:7000"; return m }()), nil, ""},
	}
	for _, c := range cases {
		t.Run(c.desc, func(t *testing.T) {
			p := pol
			if c.p != nil {
				p = *c.p
			}
			self := "a"
			if strings.HasPrefix(c.desc, "the leader holding the highest id") {
				self = "g"
			}
			got := planString(Plan(self, c.servers, c.members, leaderIdx, p, t0))
			if got != c.want {
				t.Fatalf("Plan:\n got %q\nwant %q", got, c.want)
			}
		})
	}
}

func TestAutopilotReportsRemovals(t *testing.T) {
	var removed []string
	ap := Autopilot{OnRemove: func(id string) { removed = append(removed, id) }}
	f := newFakeRaft(v("a"), v("b"), v("c"), nv("d"))
	members := append(healthyAll("a", "b", "c"), mem("d", StateLeft, 0))
	if err := ap.Reconcile(f, "a", members, leaderIdx, pol, t0, nil); err != nil || fmt.Sprint(removed) != "[d]" {
		t.Fatalf("removed %v, %v", removed, err)
	}
}

func TestAutopilotReapsServersUnknownToGossip(t *testing.T) {
	var ap Autopilot
	servers := []RaftServer{v("a"), v("b"), v("c"), nv("x")}
	members := healthyAll("a", "b", "c")
	for _, c := range []struct {
		at   time.Duration
		want string
	}{
		{0, ""},
		{71 * time.Hour, ""},
		{73 * time.Hour, "remove x"},
	} {
		got := planString(Plan("a", servers, ap.Members(servers, members, t0.Add(c.at)), leaderIdx, pol, t0.Add(c.at)))
		if got != c.want {
			t.Fatalf("at +%s: %q, want %q", c.at, got, c.want)
		}
	}
	// once gossip describes it again, the memory is dropped
	ap.Members(servers, append(members, healthyMem("x")), t0)
	if len(ap.first) != 0 {
		t.Fatalf("memory kept: %v", ap.first)
	}
}

// fakeRaft applies actions with hashicorp/raft's semantics: AddVoter on a
// server updates its address and makes it a voter; AddNonvoter on a voter
// only updates its address.
type fakeRaft struct {
	leader  bool
	term    uint64
	servers map[string]RaftServer
	calls   []string
	fail    string // a call that fails
	// uniqueAddrs: refuse a server at an address another server holds,
	// as the store does.
	uniqueAddrs bool
}

func (f *fakeRaft) taken(id, addr string) error {
	for _, s := range f.servers {
		if f.uniqueAddrs && s.ID != id && s.Address == addr {
			return fmt.Errorf("%s claims %s, which %s holds", id, addr, s.ID)
		}
	}
	return nil
}

var _ Raft = (*fakeRaft)(nil)

func newFakeRaft(ss ...RaftServer) *fakeRaft {
	f := &fakeRaft{leader: true, servers: map[string]RaftServer{}}
	for _, s := range ss {
		f.servers[s.ID] = s
	}
	return f
}

func (f *fakeRaft) call(s string) error {
	f.calls = append(f.calls, s)
	if s == f.fail {
		return errors.New("raft says no")
	}
	return nil
}
func (f *fakeRaft) IsLeader() bool { return f.leader }
func (f *fakeRaft) Term() uint64   { return f.term }
func (f *fakeRaft) Servers() ([]RaftServer, error) {
	var out []RaftServer
	for _, s := range f.servers {
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}
func (f *fakeRaft) AddVoter(id, addr string) error {
	if err := f.call("addvoter " + id); err != nil {
		return err
	}
	if err := f.taken(id, addr); err != nil {
		return err
	}
	f.servers[id] = RaftServer{ID: id, Address: addr, Voter: true}
	return nil
}
func (f *fakeRaft) AddNonvoter(id, addr string) error {
	if err := f.call("addnonvoter " + id); err != nil {
		return err
	}
	if err := f.taken(id, addr); err != nil {
		return err
	}
	s := f.servers[id]
	f.servers[id] = RaftServer{ID: id, Address: addr, Voter: s.Voter}
	return nil
}
func (f *fakeRaft) DemoteVoter(id string) error {
	if err := f.call("demote " + id); err != nil {
		return err
	}
	s := f.servers[id]
	s.Voter = false
	f.servers[id] = s
	return nil
}
func (f *fakeRaft) RemoveServer(id string) error {
	if err := f.call("remove " + id); err != nil {
		return err
	}
	delete(f.servers, id)
	return nil
}

func TestReconcileAppliesThePlanOnTheLeaderOnly(t *testing.T) {
	members := append(healthyAll("a", "b", "d"), mem("c", StateDead, time.Minute))
	f := newFakeRaft(v("a"), v("b"), v("c"), nv("d"))
	f.leader = false
	if err := Reconcile(f, "a", members, leaderIdx, pol, t0, nil); err != nil || len(f.calls) != 0 {
		t.Fatalf("follower: %v, calls %v", err, f.calls)
	}
	f.leader = true
	f.fail = "demote c"
	err := Reconcile(f, "a", members, leaderIdx, pol, t0, nil)
	if err == nil || !strings.Contains(err.Error(), "demote c") || fmt.Sprint(f.calls) != "[addvoter d demote c]" {
		t.Fatalf("failing step: %v, calls %v", err, f.calls)
	}
	f.fail, f.calls = "", nil
	if err := Reconcile(f, "a", members, leaderIdx, pol, t0, nil); err != nil || fmt.Sprint(f.calls) != "[demote c]" {
		t.Fatalf("next round: %v, calls %v", err, f.calls)
	}
}

// fleet simulates gossip and Raft for n nodes under the planner.
type fleet struct {
	t       *testing.T
	raft    *fakeRaft
	members map[string]Member
	now     time.Time
	leader  string
	p       Policy
}

func newFleet(t *testing.T, n int, p Policy) *fleet {
	f := &fleet{t: t, members: map[string]Member{}, now: t0, p: p, leader: "n01"}
	var boot []RaftServer
	for i := 1; i <= n; i++ {
		id := fmt.Sprintf("n%02d", i)
		f.members[id] = Member{Meta: Meta{ID: id, RaftAddr: id + ":7000", Durable: leaderIdx}, State: StateAlive, Since: t0}
		if i <= p.Expect {
			boot = append(boot, v(id))
		}
	}
	f.raft = newFakeRaft(boot...)
	return f
}

func (f *fleet) list() []Member {
	var out []Member
	for _, m := range f.members {
		out = append(out, m)
	}
	return sortedMembers(out)
}

func (f *fleet) set(id string, s State) {
	m := f.members[id]
	m.State, m.Since = s, f.now
	f.members[id] = m
}

// round runs one reconciliation and checks the invariants of every plan.
func (f *fleet) round() []Action {
	f.t.Helper()
	servers, _ := f.raft.Servers()
	plan := Plan(f.leader, servers, f.list(), leaderIdx, f.p, f.now)
	voters := 0
	for _, s := range servers {
		if s.Voter {
			voters++
		}
	}
	removedVoters := 0
	for _, a := range plan {
		if a.ID == f.leader && (a.Kind == Remove || a.Kind == Demote) {
			f.t.Fatalf("plan touches the leader: %s", a)
		}
		if a.Kind == Remove && f.raft.servers[a.ID].Voter {
			removedVoters++
		}
	}
	if removedVoters > (voters-1)/2 {
		f.t.Fatalf("plan removes %d of %d voters: %s", removedVoters, voters, planString(plan))
	}
	if err := apply(f.raft, plan, nil, nil); err != nil {
		f.t.Fatal(err)
	}
	after, _ := f.raft.Servers()
	left := 0
	for _, s := range after {
		if s.Voter {
			left++
		}
	}
	if left < min(voters, f.p.Expect) {
		f.t.Fatalf("voters went from %d to %d, below Expect %d: %s", voters, left, f.p.Expect, planString(plan))
	}
	f.now = f.now.Add(time.Second)
	return plan
}

// settle runs rounds until a plan is empty.
func (f *fleet) settle() {
	f.t.Helper()
	for range 20 {
		if len(f.round()) == 0 {
			return
		}
	}
	f.t.Fatal("reconciliation does not settle")
}

// voters returns the live and the failed voters.
func (f *fleet) voters() (live, failed int) {
	for _, s := range f.raft.servers {
		if !s.Voter {
			continue
		}
		if f.members[s.ID].Alive() {
			live++
		} else {
			failed++
		}
	}
	return live, failed
}

func TestPlanFleet(t *testing.T) {
	for _, n := range []int{7, 20} {
		t.Run(fmt.Sprintf("%d nodes", n), func(t *testing.T) {
			p := Policy{MaxVoters: 5, Expect: 3, ReapTimeout: time.Hour, MaxLag: 10, Stabilization: 10 * time.Second}
			f := newFleet(t, n, p)
			f.now = t0.Add(time.Minute) // everyone alive past Stabilization
			f.settle()
			if live, failed := f.voters(); live != 5 || failed != 0 || len(f.raft.servers) != n {
				t.Fatalf("formed: %d live voters, %d failed, %d servers; want 5, 0, %d", live, failed, len(f.raft.servers), n)
			}
			// two voters die: healthy non-voters take their places
			var dead []string
			for _, s := range sortedServers(f.raft.servers) {
				if s.Voter && s.ID != f.leader && len(dead) < 2 {
					dead = append(dead, s.ID)
					f.set(s.ID, StateDead)
				}
			}
			f.now = f.now.Add(DefaultVoterGrace) // replaced only after the grace
			f.settle()
			if live, failed := f.voters(); live != 5 || failed != 0 {
				t.Fatalf("after %v died: %d live voters, %d failed voters; want 5, 0", dead, live, failed)
			}
			if len(f.raft.servers) != n {
				t.Fatalf("dead servers removed before the reap timeout: %d servers", len(f.raft.servers))
			}
			// after the reap timeout they are removed
			f.now = f.now.Add(2 * time.Hour)
			f.settle()
			if len(f.raft.servers) != n-2 {
				t.Fatalf("after the reap timeout: %d servers, want %d", len(f.raft.servers), n-2)
			}
			// a voter leaves: removed, and replaced when a non-voter is left
			var leaving string
			for _, s := range sortedServers(f.raft.servers) {
				if s.Voter && s.ID != f.leader {
					leaving = s.ID
					break
				}
			}
			f.set(leaving, StateLeft)
			f.settle()
			want := min(5, n-3)
			if live, failed := f.voters(); live != want || failed != 0 || len(f.raft.servers) != n-3 {
				t.Fatalf("after %s left: %d live voters, %d failed, %d servers; want %d, 0, %d", leaving, live, failed, len(f.raft.servers), want, n-3)
			}
			// a new node joins: added as a non-voter, never a sixth voter
			f.members["z"] = Member{Meta: Meta{ID: "z", RaftAddr: "z:7000", Durable: leaderIdx}, State: StateAlive, Since: f.now}
			f.now = f.now.Add(time.Minute)
			f.settle()
			if s, ok := f.raft.servers["z"]; !ok || (s.Voter && want == 5) {
				t.Fatalf("new node: %+v, %v", s, ok)
			}
		})
	}
}

func sortedServers(m map[string]RaftServer) []RaftServer {
	var out []RaftServer
	for _, s := range m {
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

func TestPolicyValidate(t *testing.T) {
	cases := []struct {
		desc string
		p    Policy
		ok   bool
	}{
		{"defaults", Policy{}, true},
		{"odd voters", Policy{MaxVoters: 3}, true},
		{"even voters refused", Policy{MaxVoters: 4}, false},
		{"negative expect refused", Policy{Expect: -1}, false},
		{"negative reap refused", Policy{ReapTimeout: -time.Second}, false},
		{"negative voter grace refused", Policy{VoterGrace: -time.Second}, false},
		{"expect above the voters refused", Policy{MaxVoters: 3, Expect: 5}, false},
		{"expect 7 above the default voters refused", Policy{Expect: 7}, false},
		{"expect at the voters", Policy{MaxVoters: 5, Expect: 5}, true},
	}
	for _, c := range cases {
		if err := c.p.Validate(); (err == nil) != c.ok {
			t.Errorf("%s: Validate() = %v", c.desc, err)
		}
	}
}

// TestVoterReplacedOnlyAfterGrace: a voter is replaced (or, in an even
// count, demoted) only once it has been failed for the grace period: a
// blip of a few seconds changes nothing even when a non-voter waits.
func TestVoterReplacedOnlyAfterGrace(t *testing.T) {
	cases := []struct {
		desc    string
		servers []RaftServer
		members []Member
		want    string
	}{
		{"a voter dead 5 s (a blip) stays a voter while a healthy non-voter waits",
			[]RaftServer{v("a"), v("b"), v("c"), nv("d")}, append(healthyAll("a", "b", "d"), mem("c", StateDead, 5*time.Second)), ""},
		{"a voter dead 14 s stays a voter",
			[]RaftServer{v("a"), v("b"), v("c"), nv("d")}, append(healthyAll("a", "b", "d"), mem("c", StateDead, 14*time.Second)), ""},
		{"a voter dead 15 s is replaced",
			[]RaftServer{v("a"), v("b"), v("c"), nv("d")}, append(healthyAll("a", "b", "d"), mem("c", StateDead, 15*time.Second)),
			"promote d@d:7000; demote c"},
		{"an even count with a voter dead 5 s: it is not demoted yet",
			[]RaftServer{v("a"), v("b"), v("c"), v("d")}, append(healthyAll("a", "b", "d"), mem("c", StateDead, 5*time.Second)), ""},
		{"an even count with a voter dead 15 s: it is demoted",
			[]RaftServer{v("a"), v("b"), v("c"), v("d")}, append(healthyAll("a", "b", "d"), mem("c", StateDead, 15*time.Second)), "demote c"},
		{"a voter unknown to gossip is not replaced by one call",
			[]RaftServer{v("a"), v("b"), v("c"), nv("d")}, healthyAll("a", "b", "d"), ""},
		{"a left voter is replaced at once: leaving is no blip",
			[]RaftServer{v("a"), v("b"), v("c"), nv("d")}, append(healthyAll("a", "b", "d"), mem("c", StateLeft, 0)), "promote d@d:7000; demote c"},
	}
	for _, c := range cases {
		t.Run(c.desc, func(t *testing.T) {
			got := planString(Plan("a", c.servers, c.members, leaderIdx, pol, t0))
			if got != c.want {
				t.Fatalf("Plan:\n got %q\nwant %q", got, c.want)
			}
		})
	}
}

// TestFreshLeaderKeepsVotersItHasNotRelearnt: a newly elected leader (a new
// term) counts a voter's failure from its election at the earliest: voters
// it has not yet heard of through gossip, and voters gossip reports failed
// since long ago, keep their vote for the grace period after the election.
func TestFreshLeaderKeepsVotersItHasNotRelearnt(t *testing.T) {
	var ap Autopilot
	f := newFakeRaft(v("a"), v("b"), v("c"), v("e"), v("x"), nv("d"), nv("f"))
	f.term = 7
	// The leader's gossip knows a, d and f; b and c are not re-learnt yet,
	// e is reported dead for an hour, x is unknown for good.
	members := append(healthyAll("a", "d", "f"), mem("e", StateDead, time.Hour))
	steps := []struct {
		desc  string
		at    time.Duration
		ms    []Member
		calls string
	}{
		{"at the election nothing changes", 0, members, "[]"},
		{"5 s later b and c are re-learnt", 5 * time.Second, append(members, healthyMem("b"), healthyMem("c")), "[]"},
		{"14 s after the election still nothing", 14 * time.Second, append(members, healthyMem("b"), healthyMem("c")), "[]"},
		{"15 s after the election e and x are replaced", 15 * time.Second, append(members, healthyMem("b"), healthyMem("c")),
			"[addvoter d demote e addvoter f demote x]"},
	}
	for _, s := range steps {
		f.calls = nil
		if err := ap.Reconcile(f, "a", s.ms, leaderIdx, pol, t0.Add(s.at), nil); err != nil {
			t.Fatalf("%s: %v", s.desc, err)
		}
		if got := fmt.Sprint(f.calls); got != s.calls {
			t.Fatalf("%s: calls %s, want %s", s.desc, got, s.calls)
		}
	}
	// A new term (another election) starts the grace again.
	f = newFakeRaft(v("a"), v("b"), v("c"), nv("d"))
	f.term = 8
	ms := append(healthyAll("a", "b", "d"), mem("c", StateDead, time.Hour))
	f.calls = nil
	if err := ap.Reconcile(f, "a", ms, leaderIdx, pol, t0.Add(20*time.Second), nil); err != nil || len(f.calls) != 0 {
		t.Fatalf("re-elected: calls %v, %v; want none within the grace", f.calls, err)
	}
	if err := ap.Reconcile(f, "a", ms, leaderIdx, pol, t0.Add(35*time.Second), nil); err != nil || fmt.Sprint(f.calls) != "[addvoter d demote c]" {
		t.Fatalf("after the grace: calls %v, %v", f.calls, err)
	}
}
