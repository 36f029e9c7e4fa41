package cluster

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

func fresh(id string, expect int) Member {
	return Member{Meta: Meta{ID: id, Expect: expect, RaftAddr: id + ":7000"}, State: StateAlive}
}

func withState(m Member, cid string) Member {
	m.HasState, m.ClusterID = true, cid
	return m
}

func inState(m Member, s State) Member { m.State = s; return m }

func voted(m Member, set string, phase int) Member {
	m.FormSet, m.FormPhase = set, phase
	return m
}

func idList(ms []Member) string {
	var out []string
	for _, m := range ms {
		out = append(out, m.ID)
	}
	return strings.Join(out, ",")
}

func TestBootstrapSetRules(t *testing.T) {
	const abc = "a,b,c"
	c3 := func(id string) Member { return voted(fresh(id, 3), abc, phaseCommitted) }
	a, b, c, d := c3("a"), c3("b"), c3("c"), fresh("d", 3)
	cases := []struct {
		desc    string
		self    Member
		members []Member
		expect  int
		want    string // servers, "" when not ok
	}{
		{"every member committed to the set: bootstrap with it", a, []Member{a, b, c}, 3, abc},
		{"every member of the set decides the same", c, []Member{a, b, c, d}, 3, abc},
		{"self may be missing from the list", b, []Member{a, c}, 3, abc},
		{"a member only proposed: wait", a, []Member{a, b, voted(fresh("c", 3), abc, phaseProposed)}, 3, ""},
		{"a member committed elsewhere: wait", a, []Member{a, b, voted(fresh("c", 3), "b,c,d", phaseCommitted)}, 3, ""},
		{"self only proposed: wait", voted(fresh("a", 3), abc, phaseProposed), []Member{b, c}, 3, ""},
		{"no vote yet: wait", fresh("a", 3), []Member{fresh("b", 3), fresh("c", 3)}, 3, ""},
		{"a member of the set unknown: wait", a, []Member{b}, 3, ""},
		{"a committed member that failed still counts", a, []Member{b, inState(c, StateDead)}, 3, abc},
		{"self has state: never bootstrap again", withState(a, ""), []Member{b, c}, 3, ""},
		{"self has a cluster id: never bootstrap", func() Member { m := a; m.ClusterID = "x"; return m }(), []Member{b, c}, 3, ""},
		{"an alive member has state: wait to be added", a, []Member{b, c, withState(d, "x")}, 3, ""},
		{"an alive member has only a cluster id: wait", a, []Member{b, c, {Meta: Meta{ID: "d", Expect: 3, ClusterID: "x"}, State: StateAlive}}, 3, ""},
		{"a suspect member with state still blocks", a, []Member{b, c, inState(withState(d, "x"), StateSuspect)}, 3, ""},
		{"a dead member with state does not block", a, []Member{b, c, inState(withState(d, "x"), StateDead)}, 3, abc},
		{"a left member with state does not block", a, []Member{b, c, inState(withState(d, "x"), StateLeft)}, 3, abc},
		{"a member of the set with another expect: wait", a, []Member{b, voted(fresh("c", 5), abc, phaseCommitted)}, 3, ""},
		{"self with another expect in its meta: never", voted(fresh("a", 5), abc, phaseCommitted), []Member{b, c}, 3, ""},
		{"a set of the wrong size: never", voted(fresh("a", 3), "a,b", phaseCommitted), []Member{voted(fresh("b", 3), "a,b", phaseCommitted)}, 3, ""},
		{"a member without a raft address yet: wait", a, []Member{b, func() Member { m := c; m.RaftAddr = ""; return m }()}, 3, ""},
		{"expect 1 bootstraps alone once committed", voted(fresh("a", 1), "a", phaseCommitted), nil, 1, "a"},
		{"expect 0 never", fresh("a", 0), []Member{fresh("a", 0)}, 0, ""},
		{"gossip calling self dead changes nothing", a, []Member{inState(a, StateDead), b, c}, 3, abc},
	}
	for _, c := range cases {
		t.Run(c.desc, func(t *testing.T) {
			servers, ok, why := Formation(c.self, c.members, c.expect)
			got := ""
			if ok {
				got = idList(servers)
			} else if servers != nil {
				t.Fatalf("not ok but servers %s", idList(servers))
			} else if why == "" {
				t.Fatal("no reason given")
			}
			if got != c.want {
				t.Fatalf("BootstrapSet = %q (%s), want %q", got, why, c.want)
			}
			s2, ok2 := BootstrapSet(c.self, c.members, c.expect)
			if ok2 != ok || idList(s2) != idList(servers) {
				t.Fatal("BootstrapSet and Formation disagree")
			}
		})
	}
}

func TestFormationVoteRules(t *testing.T) {
	f := func(id string) Member { return fresh(id, 3) }
	cases := []struct {
		desc    string
		self    Member
		members []Member
		want    string // "set/phase"
	}{
		{"fewer than expect seen: no vote", f("a"), []Member{f("b")}, "/0"},
		{"expect fresh nodes seen: propose the lowest ids", f("b"), []Member{f("d"), f("c"), f("a")}, "a,b,c/1"},
		{"not among the lowest ids: propose them, never commit", f("d"), []Member{voted(f("a"), "a,b,c", 1), voted(f("b"), "a,b,c", 1), voted(f("c"), "a,b,c", 1)}, "a,b,c/1"},
		{"every member proposes the set: commit", voted(f("a"), "a,b,c", 1), []Member{voted(f("b"), "a,b,c", 1), voted(f("c"), "a,b,c", 2)}, "a,b,c/2"},
		{"one member proposes another set: stay proposed", voted(f("a"), "a,b,c", 1), []Member{voted(f("b"), "a,b,c", 1), voted(f("c"), "b,c,d", 1), voted(f("d"), "a,b,c", 1)}, "a,b,c/1"},
		{"a node outside the set proposes another: stay proposed", voted(f("a"), "a,b,c", 1), []Member{voted(f("b"), "a,b,c", 1), voted(f("c"), "a,b,c", 1), voted(f("d"), "b,c,d", 1)}, "a,b,c/1"},
		{"a node outside the set has not voted yet: stay proposed", voted(f("a"), "a,b,c", 1), []Member{voted(f("b"), "a,b,c", 1), voted(f("c"), "a,b,c", 1), f("d")}, "a,b,c/1"},
		{"every fresh node agrees: commit", voted(f("a"), "a,b,c", 1), []Member{voted(f("b"), "a,b,c", 1), voted(f("c"), "a,b,c", 2), voted(f("d"), "a,b,c", 1)}, "a,b,c/2"},
		{"a committed set is preferred over the lowest ids", f("b"), []Member{f("a"), voted(f("c"), "b,c,d", 2), f("d")}, "b,c,d/1"},
		{"the most committed viable set is preferred", f("e"), []Member{voted(f("a"), "a,f,g", 2), voted(f("b"), "b,c,d", 2), voted(f("c"), "b,c,d", 2), f("d"), f("f"), f("g")}, "b,c,d/1"},
		{"a committed set with a member committed elsewhere is not viable", f("e"), []Member{voted(f("a"), "a,b,c", 2), voted(f("b"), "b,d,e", 2), f("c"), f("d")}, "b,d,e/1"},
		{"no viable committed set: the lowest uncommitted ids", f("e"), []Member{voted(f("a"), "a,b,c", 2), voted(f("b"), "a,b,d", 2), f("c"), f("d")}, "c,d,e/1"},
		{"nodes committed elsewhere do not block a commit", voted(f("c"), "c,d,e", 1), []Member{voted(f("a"), "a,b,c", 2), voted(f("b"), "a,b,d", 2), voted(f("d"), "c,d,e", 1), voted(f("e"), "c,d,e", 1)}, "c,d,e/2"},
		{"a committed vote never changes", voted(f("a"), "a,b,c", 2), []Member{voted(f("b"), "b,c,d", 2), voted(f("c"), "b,c,d", 2), voted(f("d"), "b,c,d", 2)}, "a,b,c/2"},
		{"a proposal naming a dead node is ignored", f("b"), []Member{f("a"), voted(f("c"), "b,c,x", 1), f("d"), inState(f("x"), StateDead)}, "a,b,c/1"},
		{"a malformed proposal is ignored", f("b"), []Member{f("a"), voted(f("c"), "c,b,a", 1)}, "a,b,c/1"},
		{"someone holds state: the vote freezes", voted(f("a"), "a,b,c", 1), []Member{f("b"), withState(f("c"), "x")}, "a,b,c/1"},
		{"self holds state: the vote is over", withState(voted(f("a"), "a,b,c", 2), "x"), []Member{f("b"), f("c")}, "/0"},
		{"self formed after proposing: cleared", withState(voted(f("a"), "a,b,c", 1), "x"), []Member{f("b"), f("c")}, "/0"},
	}
	for _, c := range cases {
		t.Run(c.desc, func(t *testing.T) {
			set, phase := formationVote(c.self, c.members, 3)
			if got := fmt.Sprintf("%s/%d", set, phase); got != c.want {
				t.Fatalf("vote = %s, want %s", got, c.want)
			}
		})
	}
}

// simMeta is one version of a node's formation meta.
type simMeta struct {
	at       time.Duration
	set      string
	phase    int
	hasState bool
}

// formationSimCrash simulates n nodes started with the same
// --bootstrap-expect at random times. Node i first sees node j after a random
// delay, and sees each of j's meta versions after another random delay
// (gossip). Every node votes and evaluates BootstrapSet every 20 ms on its
// view. With crash, one random node crashes at a random time and restarts
// fresh (its vote lost) after 0.5-2 s, unless it already holds state. It
// returns the set each bootstrapping node chose and when the first one did.
func formationSimCrash(r *rand.Rand, n, expect int, crash bool) (map[string]string, time.Duration) {
	ids := make([]string, n)
	start := make([]time.Duration, n)
	hist := make([][]simMeta, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("n%02d", i)
		start[i] = time.Duration(r.IntN(3000)) * time.Millisecond
		hist[i] = []simMeta{{at: start[i]}}
	}
	seen := make([][]time.Duration, n)
	delay := make([][]time.Duration, n)
	for i := range seen {
		seen[i], delay[i] = make([]time.Duration, n), make([]time.Duration, n)
		for j := range seen[i] {
			delay[i][j] = time.Duration(1+r.IntN(400)) * time.Millisecond
			seen[i][j] = max(start[i], start[j]) + time.Duration(r.IntN(1500))*time.Millisecond
		}
	}
	metaAt := func(j int, t time.Duration) simMeta {
		h := hist[j]
		k := 0
		for k+1 < len(h) && h[k+1].at <= t {
			k++
		}
		return h[k]
	}
	toMember := func(j int, sm simMeta) Member {
		m := fresh(ids[j], expect)
		m.FormSet, m.FormPhase, m.HasState = sm.set, sm.phase, sm.hasState
		return m
	}
	horizon := time.Duration(0) // every node sees every other by then
	for i := range seen {
		for j := range seen[i] {
			horizon = max(horizon, seen[i][j]+delay[i][j])
		}
	}
	victim, crashAt, restartAt := -1, time.Duration(-1), time.Duration(-1)
	if crash {
		victim = r.IntN(n)
		crashAt = start[victim] + time.Duration(r.IntN(3000))*time.Millisecond
		restartAt = crashAt + time.Duration(500+r.IntN(1500))*time.Millisecond
		horizon = max(horizon, restartAt+2*time.Second)
	}
	down := func(j int, t time.Duration) bool { return j == victim && t >= crashAt && t < restartAt }
	restarted := false
	chosen := map[string]string{}
	first := time.Duration(-1)
	lastChange := time.Duration(0)
	const step = 20 * time.Millisecond
	for now := time.Duration(0); now < 20*time.Second; now += step {
		if now > horizon && now-lastChange > time.Second {
			break // views complete and every vote still for a second: settled
		}
		if victim >= 0 && !restarted && now >= restartAt {
			restarted = true
			if !hist[victim][len(hist[victim])-1].hasState {
				hist[victim] = append(hist[victim], simMeta{at: now}) // fresh: the vote is lost
				lastChange = now
			}
		}
		for i := range ids {
			if now < start[i] || down(i, now) {
				continue
			}
			cur := hist[i][len(hist[i])-1]
			if cur.hasState {
				continue
			}
			var view []Member
			for j := range ids {
				if j != i && now >= seen[i][j] {
					at := now - delay[i][j]
					var m Member
					if down(j, at) {
						m = toMember(j, metaAt(j, crashAt))
						m.State = StateDead
					} else {
						m = toMember(j, metaAt(j, at))
					}
					view = append(view, m)
				}
			}
			self := toMember(i, cur)
			set, phase := formationVote(self, view, expect)
			self.FormSet, self.FormPhase = set, phase
			if servers, ok := BootstrapSet(self, view, expect); ok {
				chosen[ids[i]] = idList(servers)
				if first < 0 {
					first = now
				}
				hist[i] = append(hist[i], simMeta{at: now, hasState: true})
				lastChange = now
			} else if set != cur.set || phase != cur.phase {
				hist[i] = append(hist[i], simMeta{at: now, set: set, phase: phase})
				lastChange = now
			}
		}
	}
	return chosen, first
}

func TestFormationRandomizedStartsFormOneCluster(t *testing.T) {
	for _, c := range []struct {
		n, expect, trials int
		crash             bool
	}{
		{1, 1, 5, false}, {3, 3, 20, false}, {5, 5, 10, false}, // the documented deployment: expect = nodes
		{4, 3, 20, false}, {5, 3, 30, false}, {7, 5, 10, false}, // more nodes start than expected
		{3, 3, 20, true}, {5, 3, 20, true}, // a node crashes and restarts without its vote
	} {
		t.Run(fmt.Sprintf("%d nodes expect %d crash %v", c.n, c.expect, c.crash), func(t *testing.T) {
			r := rand.New(rand.NewPCG(uint64(c.n), uint64(c.expect)))
			var worst time.Duration
			for trial := range c.trials {
				chosen, first := formationSimCrash(r, c.n, c.expect, c.crash)
				sets := map[string]bool{}
				for _, s := range chosen {
					sets[s] = true
				}
				if len(sets) != 1 {
					t.Fatalf("trial %d: bootstraps %v, want exactly one set", trial, chosen)
				}
				for s := range sets {
					if got := len(strings.Split(s, ",")); got != c.expect {
						t.Fatalf("trial %d: set %s has %d servers", trial, s, got)
					}
				}
				worst = max(worst, first)
			}
			t.Logf("latest first bootstrap: %s of simulated time", worst)
		})
	}
}
