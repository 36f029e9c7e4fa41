package admin

import (
	"fmt"
	"maps"
	"math"
	"net/url"
	"reflect"
	"runtime"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tether-proxy/tether/proxy/upstream"
)

func TestEventsEmitDiffNamesEveryChange(t *testing.T) {
	n := &API{Bus: NewBus("n1")}
	t0 := time.Now()
	a := observed{
		leader:  "n1",
		members: map[string]Member{"n1": {ID: "n1", State: "alive", Raft: "voter"}, "n2": {ID: "n2", State: "alive", Raft: "voter"}, "n3": {ID: "n3", State: "alive", Raft: "nonvoter"}},
		keys:    map[string]string{"k1": "active", "k0": "inactive"},
		drains:  map[string]drainObs{"app/d2": {deadline: t0.Add(-time.Second)}},
		health:  map[string][2]string{"app/d1": {"healthy", "healthy"}},
	}
	b := observed{
		leader:  "n2",
		members: map[string]Member{"n1": {ID: "n1", State: "alive", Raft: "voter"}, "n2": {ID: "n2", State: "suspect", Raft: "voter"}, "n3": {ID: "n3", State: "alive", Raft: "voter"}, "n4": {ID: "n4", State: "alive", Raft: "none"}},
		keys:    map[string]string{"k1": "inactive", "k2": "active"},
		drains:  map[string]drainObs{"app/d1": {deadline: t0.Add(time.Minute)}, "app/d2": {deadline: t0.Add(-time.Second), drained: true}},
		health:  map[string][2]string{"app/d1": {"unhealthy", "healthy"}},
	}
	n.emitDiff(a, b, t0)
	var got []string
	for _, e := range n.Bus.Recent() {
		d := e.Data
		got = append(got, fmt.Sprintf("%s %v %v %v %v", e.Type, d["id"], d["change"], d["state"], d["previous"]))
	}
	want := []string{
		"leader <nil> <nil> <nil> n1",
		"member n2 state suspect alive",
		"member n3 raft alive <nil>",
		"member n4 joined alive <nil>",
		"key k0 <nil> pruned inactive",
		"key k1 <nil> inactive active",
		"key k2 <nil> active ",
		"drain <nil> <nil> draining <nil>",
		"drain <nil> <nil> drained <nil>",
		"health <nil> <nil> unhealthy healthy",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("events:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	// No change, no event.
	n.emitDiff(b, b, t0)
	if len(n.Bus.Recent()) != len(want) {
		t.Fatal("an unchanged view produced events")
	}
}

type fakeClusters map[string]*upstream.Cluster

func (f fakeClusters) ClusterIDs() []string {
	ids := make([]string, 0, len(f))
	for id := range f {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}

func (f fakeClusters) Cluster(id string) *upstream.Cluster { return f[id] }

// The watcher's health map is built again only when a health changed or
// the clusters did: an unchanged round over 10,000 destinations costs no
// work per destination.
func TestObserveHealthRebuildsOnlyOnChange(t *testing.T) {
	u, _ := url.Parse("http://10.0.0.1:8080/")
	var dests []*upstream.Destination
	for i := range 10000 {
		dests = append(dests, upstream.NewDestination(fmt.Sprintf("d%05d", i), u, nil, "", nil))
	}
	src := fakeClusters{"big": upstream.NewCluster("big", dests),
		"small": upstream.NewCluster("small", []*upstream.Destination{upstream.NewDestination("s1", u, nil, "", nil)})}
	round := func(prev *observed) observed {
		var o observed
		o.health, o.healthGen, o.healthClusters, o.healthReused = observeHealth(src, prev)
		return o
	}
	same := func(a, b map[string][2]string) bool {
		return reflect.ValueOf(a).UnsafePointer() == reflect.ValueOf(b).UnsafePointer()
	}
	first := round(nil)
	if len(first.health) != 10001 || first.health["small/s1"] != [2]string{"unknown", "unknown"} {
		t.Fatalf("first round: %d entries, small/s1 %v", len(first.health), first.health["small/s1"])
	}
	second := round(&first)
	if !same(first.health, second.health) || !second.healthReused || first.healthReused {
		t.Fatalf("an unchanged round built the map again (reused: first %v, second %v)", first.healthReused, second.healthReused)
	}
	if n := testing.AllocsPerRun(20, func() { round(&second) }); n > 3 {
		t.Errorf("an unchanged round allocates %.0f times", n)
	}
	dests[42].SetLocalHealth(upstream.Unhealthy)
	third := round(&second)
	if same(second.health, third.health) || third.healthReused || third.health["big/d00042"][0] != "unhealthy" {
		t.Fatalf("a local health change was not seen: %v", third.health["big/d00042"])
	}
	src["small"].Destinations[0].SetActiveHealth(upstream.Healthy)
	fourth := round(&third)
	if fourth.health["small/s1"][1] != "healthy" {
		t.Fatalf("a cluster health change was not seen: %v", fourth.health["small/s1"])
	}
	src["small"] = upstream.NewCluster("small", []*upstream.Destination{upstream.NewDestination("s2", u, nil, "", nil)})
	fifth := round(&fourth)
	if _, ok := fifth.health["small/s2"]; !ok || len(fifth.health) != 10001 {
		t.Fatalf("a reloaded cluster was not seen: %d entries", len(fifth.health))
	}
}

// idleViews is two rounds of a node with n destinations and nothing
// changed, as observe makes them: b took a's health map again.
func idleViews(n int) (a, b observed) {
	health := make(map[string][2]string, n)
	for i := range n {
		health[fmt.Sprintf("big/d%05d", i)] = [2]string{"healthy", "unknown"}
	}
	a = observed{
		leader:  "n1",
		members: map[string]Member{"n1": {ID: "n1", State: "alive", Raft: "voter"}},
		keys:    map[string]string{"k1": "active"},
		drains:  map[string]drainObs{},
		health:  health,
	}
	b = a
	b.healthReused = true
	return a, b
}

// An idle round of a node with 10,000 destinations does no work per
// destination: the diff skips the health map it took again (it sorted
// the union of both maps' 10,000 keys every 500 ms, a megabyte of
// garbage and 1.7 % of the data path's core). A health change still
// makes its event.
func TestEmitDiffSkipsUnchangedHealth(t *testing.T) {
	n := &API{Bus: NewBus("n1")}
	a, b := idleViews(10000)
	t0 := time.Now()
	var before, after runtime.MemStats
	least := uint64(math.MaxUint64)
	for range 5 { // the least of five: another test's goroutine may allocate meanwhile
		runtime.ReadMemStats(&before)
		n.emitDiff(a, b, t0)
		runtime.ReadMemStats(&after)
		least = min(least, after.TotalAlloc-before.TotalAlloc)
	}
	if least > 16<<10 {
		t.Errorf("an unchanged round over 10,000 destinations allocated %d bytes", least)
	}
	if got := len(n.Bus.Recent()); got != 0 {
		t.Fatalf("an unchanged round made %d events", got)
	}
	changed := b
	changed.healthReused = false
	changed.health = maps.Clone(a.health)
	changed.health["big/d00042"] = [2]string{"unhealthy", "unknown"}
	n.emitDiff(a, changed, t0)
	ev := n.Bus.Recent()
	if len(ev) != 1 || ev[0].Type != EventHealth || ev[0].Data["destination"] != "d00042" || ev[0].Data["state"] != "unhealthy" {
		t.Fatalf("a health change made %+v", ev)
	}
}

// BenchmarkEmitDiffIdle10k is the change watcher's round on an idle node
// with 10,000 destinations (twice a second): "reused" as it runs,
// "walked" as it ran before the diff skipped an unchanged health map.
func BenchmarkEmitDiffIdle10k(b *testing.B) {
	n := &API{Bus: NewBus("n1")}
	x, y := idleViews(10000)
	t0 := time.Now()
	b.Run("reused", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			n.emitDiff(x, y, t0)
		}
	})
	y.healthReused = false
	b.Run("walked", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			n.emitDiff(x, y, t0)
		}
	})
}

// trafficTotals reads the data path's request counters by cluster and
// destination (skipping a series without either) and its affinity outcomes
// by cluster, whatever other labels the series carry.
func TestTrafficTotalsReadTheDataPathCounters(t *testing.T) {
	a, _, _, _ := newTestAPI(t)
	reqs := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tether_requests_total"}, []string{"cluster", "code", "destination"})
	aff := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tether_affinity_requests_total"}, []string{"cluster", "outcome"})
	a.Registry.MustRegister(reqs, aff)
	reqs.WithLabelValues("app", "200", "d1").Add(3)
	reqs.WithLabelValues("app", "502", "d1").Add(1)
	reqs.WithLabelValues("app", "200", "d2").Add(2)
	reqs.WithLabelValues("app", "503", "").Add(7)
	aff.WithLabelValues("app", "routed").Add(4)
	aff.WithLabelValues("app", "no_session").Add(1)
	requests, affinity := a.trafficTotals()
	if got := fmt.Sprint(requests); got != "map[app/d1:4 app/d2:2]" {
		t.Errorf("requests %s, want map[app/d1:4 app/d2:2]", got)
	}
	if got := fmt.Sprint(affinity); got != "map[app:map[no_session:1 routed:4]]" {
		t.Errorf("affinity %s, want map[app:map[no_session:1 routed:4]]", got)
	}
}
