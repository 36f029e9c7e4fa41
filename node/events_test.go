package node

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"net"
	"net/http"
	"net/url"
	"reflect"
	"runtime"
	"sort"
	"strings"
	"testing"
	"time"

	adminapi "github.com/tether-proxy/tether/node/admin"
	"github.com/tether-proxy/tether/proxy/upstream"
	"github.com/tether-proxy/tether/test/testutil"
)

// sseStream is a reader of GET /v1/events.
type sseStream struct {
	resp *http.Response
	sc   *bufio.Scanner
	ch   chan sseEvent
}

type sseEvent struct {
	id, typ string
	ev      Event
}

func openEvents(t *testing.T, n *Node, token, lastID string) (*sseStream, int) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+n.AdminAddr().String()+"/v1/events", nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if lastID != "" {
		req.Header.Set("Last-Event-ID", lastID)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); resp.Body.Close() })
	if resp.StatusCode != 200 {
		return nil, resp.StatusCode
	}
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("Content-Type %q, want text/event-stream", ct)
	}
	s := &sseStream{resp: resp, sc: bufio.NewScanner(resp.Body), ch: make(chan sseEvent, 1024)}
	s.sc.Buffer(make([]byte, 1<<20), 1<<20)
	go func() {
		defer close(s.ch)
		var cur sseEvent
		for s.sc.Scan() {
			line := s.sc.Text()
			switch {
			case line == "":
				if cur.typ != "" {
					s.ch <- cur
				}
				cur = sseEvent{}
			case strings.HasPrefix(line, "id: "):
				cur.id = strings.TrimPrefix(line, "id: ")
			case strings.HasPrefix(line, "event: "):
				cur.typ = strings.TrimPrefix(line, "event: ")
			case strings.HasPrefix(line, "data: "):
				if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &cur.ev); err != nil {
					t.Errorf("event data is not JSON: %v: %s", err, line)
				}
			}
		}
	}()
	return s, 200
}

// next returns the next event matching match, within the deadline.
func (s *sseStream) next(t *testing.T, what string, match func(sseEvent) bool) sseEvent {
	t.Helper()
	timeout := time.After(20 * time.Second)
	for {
		select {
		case e, ok := <-s.ch:
			if !ok {
				t.Fatalf("stream ended waiting for %s", what)
			}
			if match(e) {
				return e
			}
		case <-timeout:
			t.Fatalf("no %s event within 20 s", what)
		}
	}
}

func TestEventsStreamNeedsTheTokenAndDeliversChanges(t *testing.T) {
	n, call := startNode(t, "tok")
	if _, status := openEvents(t, n, "", ""); status != 401 {
		t.Fatalf("GET /v1/events without the token = %d, want 401", status)
	}
	if _, status := openEvents(t, n, "wrong", ""); status != 401 {
		t.Fatalf("GET /v1/events with a wrong token = %d, want 401", status)
	}
	s, status := openEvents(t, n, "tok", "")
	if status != 200 {
		t.Fatalf("GET /v1/events = %d", status)
	}
	hello := s.next(t, "hello", func(e sseEvent) bool { return true })
	if hello.typ != EventHello || hello.ev.Node != "t1" || hello.ev.Data["boot"] == "" || hello.id != "" {
		t.Fatalf("first event %+v, want a hello from t1 without an id", hello)
	}

	if st, _ := call("POST", "/v1/clusters/app/destinations/d1/drain"); st != 200 {
		t.Fatalf("drain: %d", st)
	}
	drain := s.next(t, "drain", func(e sseEvent) bool { return e.typ == EventDrain })
	if drain.ev.Data["destination"] != "d1" || drain.ev.Data["draining"] != true || drain.ev.Data["deadline"] == nil || drain.ev.Node != "t1" || drain.ev.Time.IsZero() || drain.id == "" {
		t.Fatalf("drain event %+v", drain)
	}
	st, rotated := call("POST", "/v1/keyring/rotate")
	if st != 200 {
		t.Fatalf("rotate: %d", st)
	}
	s.next(t, "key installed", func(e sseEvent) bool {
		return e.typ == EventKey && e.ev.Data["id"] == rotated["id"] && e.ev.Data["state"] == "installed"
	})
	s.next(t, "key active", func(e sseEvent) bool {
		return e.typ == EventKey && e.ev.Data["id"] == rotated["id"] && e.ev.Data["state"] == "active"
	})
	stats := s.next(t, "stats", func(e sseEvent) bool { return e.typ == EventStats && e.id == "" && e.ev.Data["clusters"] != nil })
	if durable, _ := stats.ev.Data["durable_index"].(map[string]any); stats.ev.Data["applied_index"] == nil || durable["t1"] == nil {
		t.Fatalf("stats event without the applied and durable indexes: %v", stats.ev.Data)
	}

	// A new stream is replayed the recorded events; with the drain's id
	// as Last-Event-ID, only what came after it.
	all, _ := openEvents(t, n, "tok", "")
	all.next(t, "replayed drain", func(e sseEvent) bool { return e.id == drain.id })
	after, _ := openEvents(t, n, "tok", drain.id)
	first := after.next(t, "first replayed after the drain", func(e sseEvent) bool { return e.typ != EventHello })
	if first.typ != EventKey || first.ev.Data["state"] != "installed" {
		t.Fatalf("first event replayed after Last-Event-ID %s: %+v, want the key installed", drain.id, first)
	}
}

func TestEventsStalledReaderDoesNotStallTheNode(t *testing.T) {
	n, call := startNode(t, "")
	// A reader that sends the request and never reads a byte.
	c, err := net.Dial("tcp", n.AdminAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "GET /v1/events HTTP/1.1\r\nHost: %s\r\n\r\n", n.AdminAddr())
	testutil.Eventually(t, 10*time.Second, "the stalled reader subscribed", func() bool { return n.ev.bus.Subscribers() == 1 })

	big := strings.Repeat("x", 4096)
	done := make(chan struct{})
	go func() {
		// Far more than a socket buffer and the subscriber buffer.
		for i := 0; i < 4000; i++ {
			n.ev.bus.Publish(EventHealth, time.Now(), map[string]any{"pad": big})
		}
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("publishing blocked on a stalled reader")
	}
	testutil.Eventually(t, 10*time.Second, "the stalled reader cut off", func() bool { return n.ev.bus.Subscribers() == 0 })
	// The node still serves, and a new reader gets the next change.
	if st, _ := call("GET", "/v1/status"); st != 200 {
		t.Fatalf("status after a stalled reader: %d", st)
	}
	s, _ := openEvents(t, n, "", "")
	if st, _ := call("POST", "/v1/clusters/app/destinations/d2/drain"); st != 200 {
		t.Fatalf("drain: %d", st)
	}
	s.next(t, "drain after the stall", func(e sseEvent) bool { return e.typ == EventDrain && e.ev.Data["destination"] == "d2" })
}

func TestEventsStreamEndsWhenTheNodeStops(t *testing.T) {
	n, _ := startNode(t, "")
	s, _ := openEvents(t, n, "", "")
	s.next(t, "hello", func(e sseEvent) bool { return e.typ == EventHello })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	start := time.Now()
	n.Shutdown(ctx)
	// The admin server's shutdown does not wait out its 2 s grace for an
	// open stream: the stream ends as the node stops.
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("shutdown took %v with a stream open", d)
	}
	timeout := time.After(10 * time.Second)
	for {
		select {
		case _, ok := <-s.ch:
			if !ok {
				return
			}
		case <-timeout:
			t.Fatal("the stream stayed open after the node stopped")
		}
	}
}

func TestEventsEmitDiffNamesEveryChange(t *testing.T) {
	n := &Node{ev: eventState{bus: adminapi.NewBus("n1")}}
	t0 := time.Now()
	a := observed{
		leader:  "n1",
		members: map[string]memberView{"n1": {ID: "n1", State: "alive", Raft: "voter"}, "n2": {ID: "n2", State: "alive", Raft: "voter"}, "n3": {ID: "n3", State: "alive", Raft: "nonvoter"}},
		keys:    map[string]string{"k1": "active", "k0": "inactive"},
		drains:  map[string]drainObs{"app/d2": {deadline: t0.Add(-time.Second)}},
		health:  map[string][2]string{"app/d1": {"healthy", "healthy"}},
	}
	b := observed{
		leader:  "n2",
		members: map[string]memberView{"n1": {ID: "n1", State: "alive", Raft: "voter"}, "n2": {ID: "n2", State: "suspect", Raft: "voter"}, "n3": {ID: "n3", State: "alive", Raft: "voter"}, "n4": {ID: "n4", State: "alive", Raft: "none"}},
		keys:    map[string]string{"k1": "inactive", "k2": "active"},
		drains:  map[string]drainObs{"app/d1": {deadline: t0.Add(time.Minute)}, "app/d2": {deadline: t0.Add(-time.Second), drained: true}},
		health:  map[string][2]string{"app/d1": {"unhealthy", "healthy"}},
	}
	n.emitDiff(a, b, t0)
	var got []string
	for _, e := range n.ev.bus.Recent() {
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
	if len(n.ev.bus.Recent()) != len(want) {
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
		members: map[string]memberView{"n1": {ID: "n1", State: "alive", Raft: "voter"}},
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
	n := &Node{ev: eventState{bus: adminapi.NewBus("n1")}}
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
	if got := len(n.ev.bus.Recent()); got != 0 {
		t.Fatalf("an unchanged round made %d events", got)
	}
	changed := b
	changed.healthReused = false
	changed.health = maps.Clone(a.health)
	changed.health["big/d00042"] = [2]string{"unhealthy", "unknown"}
	n.emitDiff(a, changed, t0)
	ev := n.ev.bus.Recent()
	if len(ev) != 1 || ev[0].Type != EventHealth || ev[0].Data["destination"] != "d00042" || ev[0].Data["state"] != "unhealthy" {
		t.Fatalf("a health change made %+v", ev)
	}
}

// BenchmarkEmitDiffIdle10k is the change watcher's round on an idle node
// with 10,000 destinations (twice a second): "reused" as it runs,
// "walked" as it ran before the diff skipped an unchanged health map.
func BenchmarkEmitDiffIdle10k(b *testing.B) {
	n := &Node{ev: eventState{bus: adminapi.NewBus("n1")}}
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
