package healthgossip

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tether-proxy/tether/cluster"
	"github.com/tether-proxy/tether/test/testutil"
)

const healthTag = 9

// healthNode is one in-process node: its membership and health gossip.
type healthNode struct {
	id string
	m  *cluster.Membership
	h  *Health

	mu      sync.Mutex
	changes map[hkey]int
}

func (n *healthNode) changed(c, d string) int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.changes[hkey{c, d}]
}

func startHealthNode(t *testing.T, id string, opts Options) *healthNode {
	t.Helper()
	return startHealthNodeWith(t, id, nil, opts)
}

func startHealthNodeWith(t *testing.T, id string, edit func(*cluster.Config), opts Options) *healthNode {
	t.Helper()
	n := &healthNode{id: id, changes: map[hkey]int{}}
	n.m = startNode(t, id, edit)
	user := opts.OnChange
	opts.OnChange = func(c, d string) {
		n.mu.Lock()
		n.changes[hkey{c, d}]++
		n.mu.Unlock()
		if user != nil {
			user(c, d)
		}
	}
	if opts.Digest == 0 {
		opts.Digest = 200 * time.Millisecond // one Local probe interval
	}
	h, err := New(n.m, healthTag, opts)
	if err != nil {
		t.Fatalf("New %s: %v", id, err)
	}
	n.h = h
	t.Cleanup(h.Close)
	return n
}

// healthCluster starts n joined nodes h0..h(n-1) and waits until every
// node's health sees all of them alive.
func healthCluster(t *testing.T, n int, opts Options) []*healthNode {
	t.Helper()
	var ns []*healthNode
	for i := range n {
		x := startHealthNode(t, fmt.Sprintf("h%d", i), opts)
		if i > 0 {
			mustJoin(t, x.m, ns[0].m)
		}
		ns = append(ns, x)
	}
	waitAlive(t, ns, n)
	return ns
}

func waitAlive(t *testing.T, ns []*healthNode, want int) {
	t.Helper()
	testutil.Eventually(t, 10*time.Second, fmt.Sprintf("every node's health sees %d alive", want), func() bool {
		for _, x := range ns {
			if len(x.h.Probers("c", "probe-all", 1000)) != want {
				return false
			}
		}
		return true
	})
}

// agree waits until every node in ns has the same view of (c, d), equal to want.
func agree(t *testing.T, ns []*healthNode, c, d string, fanout int, want Verdict, within time.Duration) {
	t.Helper()
	testutil.Eventually(t, within, fmt.Sprintf("every node sees %s/%s %s", c, d, want), func() bool {
		for _, x := range ns {
			if x.h.View(c, d, fanout) != want {
				return false
			}
		}
		return true
	})
}

func byID(ns []*healthNode, id string) *healthNode {
	for _, x := range ns {
		if x.id == id {
			return x
		}
	}
	return nil
}

func without(ns []*healthNode, id string) []*healthNode {
	var out []*healthNode
	for _, x := range ns {
		if x.id != id {
			out = append(out, x)
		}
	}
	return out
}

func TestMajorityOfCurrentProbers(t *testing.T) {
	const (
		U = VerdictUnknown
		H = VerdictHealthy
		X = VerdictUnhealthy
	)
	for _, c := range []struct {
		desc string
		in   []Verdict
		want Verdict
	}{
		{"no prober: unknown", nil, U},
		{"no prober has spoken: unknown", []Verdict{U, U, U}, U},
		{"one prober of one says unhealthy: unhealthy", []Verdict{X}, X},
		{"one prober of one says healthy: healthy", []Verdict{H}, H},
		{"two of three unhealthy: unhealthy", []Verdict{X, X, H}, X},
		{"two of three unhealthy, third silent: unhealthy", []Verdict{X, U, X}, X},
		{"one of three unhealthy, others healthy: healthy", []Verdict{X, H, H}, H},
		{"one of three unhealthy, others silent: not a majority, unknown", []Verdict{X, U, U}, U},
		{"one unhealthy one healthy one silent: no majority, unknown", []Verdict{X, H, U}, U},
		{"a tie of two: unknown", []Verdict{X, H}, U},
		{"both of two unhealthy: unhealthy", []Verdict{X, X}, X},
		{"three of five unhealthy: unhealthy", []Verdict{X, X, X, H, H}, X},
		{"two of five unhealthy, two healthy: unknown", []Verdict{X, X, H, H, U}, U},
	} {
		if got := majority(c.in); got != c.want {
			t.Errorf("%s: majority(%v) = %s, want %s", c.desc, c.in, got, c.want)
		}
	}
}

func TestRendezvousProbers(t *testing.T) {
	alive := []string{"a", "b", "c", "d", "e", "f"}
	for _, c := range []struct {
		desc   string
		alive  []string
		fanout int
		want   int
	}{
		{"fanout below the alive count: fanout probers", alive, 3, 3},
		{"fanout above the alive count: every alive node", alive[:2], 3, 2},
		{"fanout 0 counts as 1", alive, 0, 1},
		{"no alive node: none", nil, 3, 0},
	} {
		got := rendezvous(c.alive, "cl", "d1", c.fanout)
		if len(got) != c.want {
			t.Errorf("%s: %v", c.desc, got)
		}
	}
	// the same set on every node gives the same probers; a node that is not a
	// prober leaving changes nothing; a prober leaving is replaced by the next
	moved := 0
	for i := range 200 {
		d := fmt.Sprintf("dest-%d", i)
		p := rendezvous(alive, "cl", d, 3)
		shuffled := slices.Clone(alive)
		rand.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
		slices.Sort(shuffled)
		if q := rendezvous(shuffled, "cl", d, 3); !slices.Equal(p, q) {
			t.Fatalf("%s: %v then %v", d, p, q)
		}
		full := rendezvous(alive, "cl", d, len(alive))
		gone := full[len(full)-1] // the lowest score
		rest := slices.DeleteFunc(slices.Clone(alive), func(s string) bool { return s == gone })
		if q := rendezvous(rest, "cl", d, 3); !slices.Equal(p, q) {
			t.Fatalf("%s: removing non-prober %s moved %v to %v", d, gone, p, q)
		}
		rest = slices.DeleteFunc(slices.Clone(alive), func(s string) bool { return s == p[0] })
		if q := rendezvous(rest, "cl", d, 3); !slices.Equal(q, full[1:4]) {
			t.Fatalf("%s: removing prober %s gave %v, want %v", d, p[0], q, full[1:4])
		}
		if p[0] == "a" {
			moved++
		}
	}
	// each node is the first prober of about 1/6 of destinations
	if moved < 15 || moved > 60 {
		t.Fatalf("node a is first prober of %d of 200 destinations", moved)
	}
}

func TestHealthViewIsTheMajorityOnEveryNode(t *testing.T) {
	ns := healthCluster(t, 5, Options{})
	const c, d, fanout = "web", "d1", 3
	probers := ns[0].h.Probers(c, d, fanout)
	if len(probers) != fanout {
		t.Fatalf("probers %v", probers)
	}
	for _, x := range ns {
		if got := x.h.Probers(c, d, fanout); !slices.Equal(got, probers) {
			t.Fatalf("%s: probers %v, %s has %v", x.id, got, ns[0].id, probers)
		}
		if x.h.ShouldProbe(c, d, fanout) != slices.Contains(probers, x.id) {
			t.Fatalf("%s: ShouldProbe disagrees with Probers %v", x.id, probers)
		}
	}
	agree(t, ns, c, d, fanout, VerdictUnknown, time.Second)

	var other string
	for _, x := range ns {
		if !slices.Contains(probers, x.id) {
			other = x.id
		}
	}
	// a node that is not a prober does not count
	byID(ns, other).h.Report(c, d, VerdictUnhealthy)
	testutil.Eventually(t, 3*time.Second, "the non-prober's verdict reached everyone", func() bool {
		for _, x := range ns {
			if len(x.h.Verdicts(c, d)) != 1 {
				return false
			}
		}
		return true
	})
	agree(t, ns, c, d, fanout, VerdictUnknown, time.Second)

	steps := []struct {
		desc   string
		prober int
		v      Verdict
		want   Verdict
	}{
		{"one of three probers healthy: no majority", 0, VerdictHealthy, VerdictUnknown},
		{"two of three healthy: healthy", 1, VerdictHealthy, VerdictHealthy},
		{"one of three turns unhealthy: still healthy", 2, VerdictUnhealthy, VerdictHealthy},
		{"two of three unhealthy: unhealthy", 0, VerdictUnhealthy, VerdictUnhealthy},
		{"back to healthy on one: healthy again", 0, VerdictHealthy, VerdictHealthy},
	}
	for _, s := range steps {
		byID(ns, probers[s.prober]).h.Report(c, d, s.v)
		testutil.Eventually(t, 3*time.Second, s.desc, func() bool {
			for _, x := range ns {
				if x.h.View(c, d, fanout) != s.want {
					return false
				}
				vs := x.h.Verdicts(c, d)
				i := slices.IndexFunc(vs, func(p ProberVerdict) bool { return p.Node == probers[s.prober] })
				if i < 0 || vs[i].Verdict != s.v {
					return false
				}
			}
			return true
		})
	}
	for _, x := range ns {
		if x.changed(c, d) == 0 {
			t.Fatalf("%s: OnChange never called for %s/%s", x.id, c, d)
		}
	}
}

// TestProberDeathTakeover: when the only prober of a destination fails or
// leaves, the next node by rendezvous score becomes its prober on every
// node, the dead prober's verdict is ignored and the new one's counts.
func TestProberDeathTakeover(t *testing.T) {
	for _, leave := range []bool{false, true} {
		name := map[bool]string{false: "crash", true: "leave"}[leave]
		t.Run(name, func(t *testing.T) {
			ns := healthCluster(t, 4, Options{})
			const c, d, fanout = "web", "d1", 1
			full := ns[0].h.Probers(c, d, 4)
			p, next := byID(ns, full[0]), full[1]
			if !p.h.ShouldProbe(c, d, fanout) {
				t.Fatalf("%s does not probe", p.id)
			}
			p.h.Report(c, d, VerdictUnhealthy)
			agree(t, ns, c, d, fanout, VerdictUnhealthy, 3*time.Second)

			rest := without(ns, p.id)
			if leave {
				if err := p.m.Leave(2 * time.Second); err != nil {
					t.Fatal(err)
				}
			}
			p.h.Close()
			p.m.Shutdown()
			testutil.Eventually(t, 10*time.Second, "the survivors see the prober gone", func() bool {
				for _, x := range rest {
					if stateOf(x.m, p.id) != cluster.StateDead && stateOf(x.m, p.id) != cluster.StateLeft {
						return false
					}
				}
				return true
			})
			gone := time.Now()
			// within one probe interval (Local: 200 ms) of memberlist noticing
			testutil.Eventually(t, 2*time.Second, "the next node took over on every survivor", func() bool {
				for _, x := range rest {
					if got := x.h.Probers(c, d, fanout); !slices.Equal(got, []string{next}) {
						return false
					}
				}
				return byID(rest, next).h.ShouldProbe(c, d, fanout)
			})
			t.Logf("takeover %s after memberlist noticed", time.Since(gone).Round(time.Millisecond))
			// the dead prober's verdict is still held, and ignored
			agree(t, rest, c, d, fanout, VerdictUnknown, time.Second)
			if vs := rest[0].h.Verdicts(c, d); len(vs) != 1 || vs[0].Node != p.id {
				t.Fatalf("verdicts %v", vs)
			}
			byID(rest, next).h.Report(c, d, VerdictHealthy)
			agree(t, rest, c, d, fanout, VerdictHealthy, 3*time.Second)
		})
	}
}

// TestStaleDeltaNeverOverridesNewer feeds one prober's versions in every
// arrival order: the newest wins, whatever came before or after it.
func TestStaleDeltaNeverOverridesNewer(t *testing.T) {
	x := startHealthNode(t, "solo", Options{})
	k := hkey{"web", "d1"}
	verdicts := []Verdict{VerdictUnhealthy, VerdictHealthy, VerdictUnhealthy, VerdictHealthy}
	deltas := make([][]byte, len(verdicts))
	for i, v := range verdicts {
		deltas[i] = encodeDelta("flappy", k, hentry{v: v, ver: uint64(100 + i), at: int64(i)}, sum{})
	}
	perms := permutations(len(deltas))
	for _, perm := range perms {
		x.h.Forget(k.cluster, k.dest)
		for _, i := range perm {
			x.h.onMsg(deltas[i])
		}
		vs := x.h.Verdicts(k.cluster, k.dest)
		if len(vs) != 1 || vs[0].Version != 103 || vs[0].Verdict != VerdictHealthy {
			t.Fatalf("arrival order %v: %v, want version 103 healthy", perm, vs)
		}
	}
	// and by push/pull: an older state never undoes a newer delta
	x.h.mergeState(stateOf1("flappy", k, hentry{v: VerdictUnhealthy, ver: 101}), false)
	if vs := x.h.Verdicts(k.cluster, k.dest); vs[0].Version != 103 {
		t.Fatalf("after an old push/pull: %v", vs)
	}
	if len(perms) != 24 {
		t.Fatalf("%d permutations", len(perms))
	}
}

func stateOf1(p string, k hkey, e hentry) []byte {
	b := []byte{healthStateVersion, 1}
	b = appendStr(b, k.cluster)
	b = appendStr(b, k.dest)
	b = append(b, 1)
	b = appendStr(b, p)
	return appendVerdict(b, e)
}

func permutations(n int) [][]int {
	if n == 0 {
		return [][]int{{}}
	}
	var out [][]int
	for _, p := range permutations(n - 1) {
		for i := 0; i <= len(p); i++ {
			q := append(append(append([]int{}, p[:i]...), n-1), p[i:]...)
			out = append(out, q)
		}
	}
	return out
}

// TestFlappingProberConvergesOnItsLastVerdict: a prober flapping fast ends
// with its last verdict on every node (named broadcasts replace the queued
// stale ones; versions order the rest).
func TestFlappingProberConvergesOnItsLastVerdict(t *testing.T) {
	ns := healthCluster(t, 3, Options{})
	const c, d, fanout = "web", "flap", 1
	p := byID(ns, ns[0].h.Probers(c, d, fanout)[0])
	v := VerdictHealthy
	for i := range 41 {
		v = []Verdict{VerdictHealthy, VerdictUnhealthy}[i%2]
		p.h.Report(c, d, v)
		time.Sleep(time.Duration(rand.IntN(3)) * time.Millisecond) // not a wait: flapping at random speed
	}
	if v != VerdictHealthy {
		t.Fatal("test: the last verdict should be healthy")
	}
	agree(t, ns, c, d, fanout, VerdictHealthy, 3*time.Second)
	want := p.h.Verdicts(c, d)[0].Version
	testutil.Eventually(t, 3*time.Second, "every node holds the last version", func() bool {
		for _, x := range ns {
			vs := x.h.Verdicts(c, d)
			if len(vs) != 1 || vs[0].Version != want {
				return false
			}
		}
		return true
	})
}

// TestLostDeltaHealsByDigest: a node that lost every copy of a delta (its
// incoming deltas are dropped) learns the verdict from the prober's digest
// and a pull, within about one digest interval.
func TestLostDeltaHealsByDigest(t *testing.T) {
	ns := healthCluster(t, 3, Options{})
	const c, d, fanout = "web", "d1", 1
	p := byID(ns, ns[0].h.Probers(c, d, fanout)[0])
	deaf := without(ns, p.id)[0]
	drop := func(kind byte) bool { return kind == kindDelta }
	deaf.h.dropIn.Store(&drop)
	deaf.h.dropState.Store(true) // push/pull would heal it too, every 2 s
	p.h.Report(c, d, VerdictUnhealthy)
	start := time.Now()
	agree(t, ns, c, d, fanout, VerdictUnhealthy, 3*time.Second)
	if deaf.h.pulls.Load() == 0 {
		t.Fatal("healed without a pull")
	}
	t.Logf("healed after %s (digest every 200 ms)", time.Since(start).Round(time.Millisecond))
	// and Forget on the prober reaches the others' copy of its verdict
	p.h.Forget(c, d)
	testutil.Eventually(t, 3*time.Second, "the prober's forgotten verdict dropped everywhere", func() bool {
		for _, x := range ns {
			if len(x.h.Verdicts(c, d)) != 0 {
				return false
			}
		}
		return true
	})
}

func TestHealthEncodingFitsABroadcast(t *testing.T) {
	id := strings.Repeat("n", 128)
	name := strings.Repeat("x", 256)
	b := encodeDelta(id, hkey{name, name}, hentry{v: VerdictUnhealthy, ver: ^uint64(0), at: -1 << 62}, sum{^uint64(0), ^uint64(0)})
	if len(b) > cluster.MaxBroadcast {
		t.Fatalf("a delta with 128-byte node id and 256-byte names is %d bytes, more than %d", len(b), cluster.MaxBroadcast)
	}
	m, err := decodeMsg(b)
	if err != nil || m.prober != id || m.key.dest != name || m.entry.ver != ^uint64(0) || m.entry.at != -1<<62 {
		t.Fatalf("round trip: %+v %v", m, err)
	}
}

func FuzzHealthDecode(f *testing.F) {
	k := hkey{"web", "d1"}
	e := hentry{v: VerdictHealthy, ver: 7, at: 1700000000000000000}
	f.Add(encodeDelta("n1", k, e, sum{1, 42}))
	f.Add(append([]byte{kindDigest}, appendSum(appendStr(nil, "n1"), sum{3, 9})...))
	f.Add(appendStr([]byte{kindPull}, "n2"))
	f.Add(appendEntry(append(appendStr([]byte{kindFull}, "n1"), 7, 1), k, e))
	f.Add(stateOf1("n1", k, e))
	f.Add([]byte{kindFull, 2, 'n', '1', 7, 0xff, 0xff, 0xff, 0xff, 0x0f})
	f.Fuzz(func(t *testing.T, b []byte) {
		if m, err := decodeMsg(b); err == nil {
			if m.prober == "" {
				t.Fatal("decoded a message without a node")
			}
			if m.entry.v > VerdictUnhealthy {
				t.Fatalf("decoded verdict %d", m.entry.v)
			}
		}
		if st, err := decodeState(b); err == nil {
			for _, x := range st {
				if x.prober == "" || x.entry.v > VerdictUnhealthy {
					t.Fatalf("bad entry %+v", x)
				}
			}
		}
	})
}

// sameVerdicts reports whether every node holds the same verdicts
// (node, verdict, version) about a destination.
func sameVerdicts(ns []*healthNode, c, d string) bool {
	want := fmt.Sprint(ns[0].h.Verdicts(c, d))
	for _, x := range ns[1:] {
		if fmt.Sprint(x.h.Verdicts(c, d)) != want {
			return false
		}
	}
	return true
}

// TestPartitionedProber: a prober cut off from the others stops counting on
// their side once memberlist declares it dead (the next node probes in its
// place); what it reported meanwhile reaches everyone after the partition
// heals, and every node converges on the same versions and view.
func TestPartitionedProber(t *testing.T) {
	var tn testNet
	tn.install(t)
	ns := healthCluster(t, 4, Options{})
	const c, d, fanout = "web", "d1", 3
	order := ns[0].h.Probers(c, d, 4)
	p1, p2, p3, q := byID(ns, order[0]), byID(ns, order[1]), byID(ns, order[2]), byID(ns, order[3])
	p1.h.Report(c, d, VerdictHealthy)
	p2.h.Report(c, d, VerdictHealthy)
	p3.h.Report(c, d, VerdictUnhealthy)
	agree(t, ns, c, d, fanout, VerdictHealthy, 3*time.Second)

	tn.partition(1, p1.id)
	rest := without(ns, p1.id)
	testutil.Eventually(t, 10*time.Second, "the majority side sees the prober dead", func() bool {
		for _, x := range rest {
			if stateOf(x.m, p1.id) != cluster.StateDead {
				return false
			}
		}
		return true
	})
	testutil.Eventually(t, 2*time.Second, "the next node probes in its place", func() bool {
		for _, x := range rest {
			if !slices.Equal(x.h.Probers(c, d, fanout), []string{p2.id, p3.id, q.id}) {
				return false
			}
		}
		return true
	})
	// one healthy, one unhealthy, the new prober silent: p1's healthy no longer counts
	agree(t, rest, c, d, fanout, VerdictUnknown, time.Second)
	q.h.Report(c, d, VerdictUnhealthy)
	agree(t, rest, c, d, fanout, VerdictUnhealthy, 3*time.Second)
	// the cut-off prober flaps; nobody hears it
	p1.h.Report(c, d, VerdictUnhealthy)
	p1.h.Report(c, d, VerdictHealthy)
	last := p1.h.Verdicts(c, d)
	agree(t, rest, c, d, fanout, VerdictUnhealthy, 200*time.Millisecond)

	tn.heal()
	if _, err := p1.m.Join([]string{q.m.Addr()}); err != nil {
		t.Fatal(err)
	}
	waitAlive(t, ns, 4)
	testutil.Eventually(t, 5*time.Second, "every node holds the same versions", func() bool { return sameVerdicts(ns, c, d) })
	if got := ns[1].h.Verdicts(c, d); fmt.Sprint(got[slices.IndexFunc(got, func(v ProberVerdict) bool { return v.Node == p1.id })]) !=
		fmt.Sprint(last[slices.IndexFunc(last, func(v ProberVerdict) bool { return v.Node == p1.id })]) {
		t.Fatalf("after healing: %v; the prober's last verdict was %v", got, last)
	}
	// probers p1 (healthy), p2 (healthy), p3 (unhealthy): healthy everywhere
	agree(t, ns, c, d, fanout, VerdictHealthy, time.Second)
}

// BenchmarkHealthView is one View among 50 alive nodes with fanout 3 (a
// node re-reads every destination's view after a membership change).
func BenchmarkHealthView(b *testing.B) {
	h := &Health{dests: map[hkey]map[string]hentry{}, probers: map[string]*proberState{}, dirty: map[hkey]struct{}{}}
	for i := range 50 {
		h.alive = append(h.alive, fmt.Sprintf("tether-%02d", i))
	}
	k := hkey{"cluster-1", "dest-001"}
	for _, p := range rendezvous(h.alive, k.cluster, k.dest, 3) {
		h.putLocked(p, k, hentry{v: VerdictHealthy, ver: 1})
	}
	b.ReportAllocs()
	for b.Loop() {
		if h.View(k.cluster, k.dest, 3) != VerdictHealthy {
			b.Fatal("view")
		}
	}
}

func BenchmarkHealthDecodeDelta(b *testing.B) {
	msg := encodeDelta("tether-07", hkey{"cluster-1", "dest-001"}, hentry{v: VerdictUnhealthy, ver: 1764583200000000000, at: 1764583200000000000}, sum{60, 0x1234})
	b.ReportAllocs()
	for b.Loop() {
		if _, err := decodeMsg(msg); err != nil {
			b.Fatal(err)
		}
	}
}

// TestEffectiveFallsBackToOwnVerdictWithoutMajority: without a majority of
// the current probers a prober acts on its own verdict and a non-prober on
// unknown; with a majority every node acts on the view.
func TestEffectiveFallsBackToOwnVerdictWithoutMajority(t *testing.T) {
	ns := healthCluster(t, 3, Options{})
	const c, d, fanout = "web", "d1", 2
	probers := ns[0].h.Probers(c, d, fanout)
	var other *healthNode
	for _, x := range ns {
		if !slices.Contains(probers, x.id) {
			other = x
		}
	}
	p0, p1 := byID(ns, probers[0]), byID(ns, probers[1])
	held := func(n int) func() bool {
		return func() bool {
			for _, x := range ns {
				if len(x.h.Verdicts(c, d)) != n {
					return false
				}
			}
			return true
		}
	}
	p0.h.Report(c, d, VerdictUnhealthy)
	p1.h.Report(c, d, VerdictHealthy)
	testutil.Eventually(t, 3*time.Second, "both verdicts everywhere", held(2))
	for _, s := range []struct {
		desc string
		x    *healthNode
		want Verdict
	}{
		{"the prober saying unhealthy goes by its own verdict", p0, VerdictUnhealthy},
		{"the prober saying healthy goes by its own verdict", p1, VerdictHealthy},
		{"a node that does not probe has no verdict of its own: unknown", other, VerdictUnknown},
	} {
		if got := s.x.h.Effective(c, d, fanout); got != s.want {
			t.Errorf("%s: Effective = %s, want %s (view %s)", s.desc, got, s.want, s.x.h.View(c, d, fanout))
		}
	}
	p1.h.Report(c, d, VerdictUnhealthy)
	testutil.Eventually(t, 3*time.Second, "every node acts on the majority", func() bool {
		for _, x := range ns {
			if x.h.Effective(c, d, fanout) != VerdictUnhealthy {
				return false
			}
		}
		return true
	})
	// A stale verdict of a node that no longer probes is not its fallback.
	other.h.Report(c, d, VerdictHealthy)
	testutil.Eventually(t, 3*time.Second, "three verdicts everywhere", held(3))
	if got := other.h.Effective(c, d, fanout); got != VerdictUnhealthy {
		t.Fatalf("non-prober: Effective = %s, want the majority's unhealthy", got)
	}
}
