package healthgossip

import (
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tether-proxy/tether/cluster"
	"github.com/tether-proxy/tether/test/testutil"
)

// TestHealthScale is the health gossip simulation of `make bench-health`: N
// in-process nodes with real memberlist (LAN timing, the default) on loopback
// and D destinations, probed by fanout 3. It measures the time from the
// probers' verdicts until every node's view agrees (p50/p99), the bytes each
// node writes to the network per second (all gossip, counted by the test
// transport) idle and while verdicts change, and checks that every
// destination has exactly min(fanout, N) probers whatever N is. It only runs
// when asked:
//
//	TETHER_BENCH_HEALTH=1 go test -run TestHealthScale -v -timeout 20m ./cluster/healthgossip/
//
// TETHER_BENCH_HEALTH_NODES (default "5,50"), _DESTS (1000), _CHANGES (20).
func TestHealthScale(t *testing.T) {
	if os.Getenv("TETHER_BENCH_HEALTH") == "" {
		t.Skip("set TETHER_BENCH_HEALTH=1 to run the health gossip simulation")
	}
	sizes := []int{5, 50}
	if s := os.Getenv("TETHER_BENCH_HEALTH_NODES"); s != "" {
		sizes = nil
		for _, f := range strings.Split(s, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n < 1 {
				t.Fatalf("TETHER_BENCH_HEALTH_NODES: %q is not a node count", f)
			}
			sizes = append(sizes, n)
		}
	}
	dests := envInt(t, "TETHER_BENCH_HEALTH_DESTS", 1000)
	changes := envInt(t, "TETHER_BENCH_HEALTH_CHANGES", 20)
	for _, n := range sizes {
		t.Run(fmt.Sprintf("%d nodes", n), func(t *testing.T) { simulateHealth(t, n, dests, changes) })
	}
}

func envInt(t *testing.T, name string, def int) int {
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 {
		t.Fatalf("%s: %q is not a positive number", name, s)
	}
	return n
}

// tracker records when each node's view of one destination reaches want.
type tracker struct {
	mu   sync.Mutex
	key  hkey
	want Verdict
	t0   time.Time
	at   map[string]time.Duration
}

func simulateHealth(t *testing.T, n, numDests, changes int) {
	const fanout = 3
	var tn testNet
	tn.install(t)
	var cur atomic.Pointer[tracker]
	ns := make([]*healthNode, n)
	lan := func(c *cluster.Config) { c.Timing = cluster.LAN }
	for i := range n {
		id := fmt.Sprintf("n%02d", i)
		var self atomic.Pointer[healthNode]
		onChange := func(c, d string) {
			tr, x := cur.Load(), self.Load()
			if tr == nil || x == nil || tr.key != (hkey{c, d}) {
				return
			}
			if x.h.View(c, d, fanout) == tr.want {
				tr.mu.Lock()
				if _, ok := tr.at[x.id]; !ok {
					tr.at[x.id] = time.Since(tr.t0)
				}
				tr.mu.Unlock()
			}
		}
		ns[i] = startHealthNodeWith(t, id, lan, Options{OnChange: onChange})
		self.Store(ns[i])
		if i > 0 {
			mustJoin(t, ns[i].m, ns[0].m)
		}
	}
	start := time.Now()
	testutil.Eventually(t, 2*time.Minute, "every node sees every node alive", func() bool {
		for _, x := range ns {
			if len(x.h.Probers("c", "all", n)) != n {
				return false
			}
		}
		return true
	})
	t.Logf("%d nodes alive everywhere %s after the last join", n, time.Since(start).Round(time.Millisecond))

	var keys []hkey
	for i := range numDests {
		keys = append(keys, hkey{fmt.Sprintf("cluster-%d", i%10), fmt.Sprintf("dest-%03d", i/10)})
	}
	// probe load: exactly min(fanout, n) nodes probe each destination once
	// the nodes' alive sets agree (under load a node may briefly suspect and
	// drop another, and see a different set for a moment)
	var bad string
	defer func() {
		if t.Failed() && bad != "" {
			t.Logf("probe load: %s", bad)
		}
	}()
	testutil.Eventually(t, 30*time.Second, "every destination has fanout probers", func() bool {
		bad = ""
		for _, k := range keys {
			probing := 0
			for _, x := range ns {
				if x.h.ShouldProbe(k.cluster, k.dest, fanout) {
					probing++
				}
			}
			if probing != min(fanout, n) {
				bad = fmt.Sprintf("%v: %d nodes probe, want %d", k, probing, min(fanout, n))
				return false
			}
		}
		return true
	})
	t.Logf("probe load: every one of %d destinations has exactly %d probers", len(keys), min(fanout, n))

	sent := func() (wire, queued uint64) {
		for _, x := range ns {
			wire += tn.sent(x.id)
			queued += x.h.Stats().BytesSent
		}
		return
	}
	perNode := func(b uint64, d time.Duration) float64 { return float64(b) / float64(n) / d.Seconds() }
	// one push/pull interval (15 s LAN; memberlist doubles it above 32 nodes)
	idle := 15 * time.Second
	if n > 32 {
		idle = 30 * time.Second
	}
	// after a join each node re-announces itself every 2 s for 30 s
	time.Sleep(time.Until(start.Add(32 * time.Second))) // not a wait for a condition: let the joins' announcements end
	w0, _ := sent()
	time.Sleep(idle) // not a wait for a condition: the measurement window
	w1, _ := sent()
	base := perNode(w1-w0, idle)
	t.Logf("baseline, no verdicts yet: %.0f B/s per node on the wire (memberlist alone, plus empty digests)", base)

	// every prober reports healthy; all nodes learn every view
	start = time.Now()
	for _, x := range ns {
		for _, k := range keys {
			if x.h.ShouldProbe(k.cluster, k.dest, fanout) {
				x.h.Report(k.cluster, k.dest, VerdictHealthy)
			}
		}
	}
	testutil.Eventually(t, 3*time.Minute, "every node sees every destination healthy", func() bool {
		for _, x := range ns {
			for _, k := range keys {
				if x.h.View(k.cluster, k.dest, fanout) != VerdictHealthy {
					return false
				}
			}
		}
		return true
	})
	t.Logf("initial fill: %d verdicts everywhere after %s", len(keys)*min(fanout, n), time.Since(start).Round(time.Millisecond))

	// idle: digests, memberlist's probes and gossip, push/pull
	time.Sleep(3 * time.Second) // not a wait for a condition: let the fill's retransmissions drain
	w0, q0 := sent()
	time.Sleep(idle) // not a wait for a condition: the measurement window
	w1, q1 := sent()
	t.Logf("idle with %d verdicts: %.0f B/s per node on the wire (all gossip, compressed push/pull), %.0f B/s per node of health messages handed to memberlist (once each, uncompressed)",
		len(keys)*min(fanout, n), perNode(w1-w0, idle), perNode(q1-q0, idle))

	// changes, one at a time: every prober of a destination flips its verdict
	var lat []time.Duration
	window := time.Now()
	w0, q0 = sent()
	for i := range changes {
		k := keys[rand.IntN(len(keys))]
		old := ns[0].h.View(k.cluster, k.dest, fanout)
		want := VerdictUnhealthy
		if old == VerdictUnhealthy {
			want = VerdictHealthy
		}
		tr := &tracker{key: k, want: want, at: map[string]time.Duration{}, t0: time.Now()}
		cur.Store(tr)
		for _, p := range ns[0].h.Probers(k.cluster, k.dest, fanout) {
			byIDs(ns, p).h.Report(k.cluster, k.dest, want)
		}
		done := testutil.Until(15*time.Second, func() bool {
			tr.mu.Lock()
			defer tr.mu.Unlock()
			return len(tr.at) == n
		})
		tr.mu.Lock()
		if !done {
			t.Fatalf("change %d (%v → %s): only %d of %d nodes agree after 15 s", i, k, want, len(tr.at), n)
		}
		var worst time.Duration
		for _, d := range tr.at {
			worst = max(worst, d)
		}
		tr.mu.Unlock()
		lat = append(lat, worst)
	}
	cur.Store(nil)
	span := time.Since(window)
	w1, q1 = sent()
	slices.Sort(lat)
	t.Logf("%d changes: all %d nodes agree after p50 %s, p99 %s, max %s", changes, n,
		pct(lat, 50), pct(lat, 99), lat[len(lat)-1].Round(time.Millisecond))
	t.Logf("during changes: %.0f B/s per node on the wire, %.0f B/s per node of health messages queued",
		perNode(w1-w0, span), perNode(q1-q0, span))
	var pulls uint64
	for _, x := range ns {
		pulls += x.h.pulls.Load()
	}
	t.Logf("pulls (a node finding a prober's checksum differs): %d over the whole run", pulls)
}

func byIDs(ns []*healthNode, id string) *healthNode { return byID(ns, id) }

func pct(sorted []time.Duration, p int) time.Duration {
	i := (len(sorted)*p + 99) / 100
	return sorted[max(0, min(i, len(sorted))-1)].Round(time.Millisecond)
}
