package gcfloor

import (
	"context"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"slices"
	"time"
)

// The collector's default goal is twice the live heap. A proxy's live heap is
// small (a few MB with hundreds of connections) while every request
// allocates, so at tens of thousands of requests a second the collector ran
// dozens of times a second: GOGC=800 took 9 % off the CPU per request in the
// race's ka-1k (proxy/DESIGN.md, "The runtime"). A fixed higher GOGC would
// also multiply a large heap's goal (10,000 idle connections are ~200 MB
// live), and a fixed floor keeps an idle node, or one after a burst, at the
// floor's size for good: the collector's goal is what the runtime keeps
// resident, and with nothing allocating no collection comes to lower it.
//
// So the floor follows the load: it is the heap the last few seconds'
// allocation rate fills in floorSpan (at most MaxFloor), so that under load a
// collection comes about every floorSpan whatever the rate, and an idle node
// is collected at Go's default goal. While the live heap is below the floor,
// GOGC is raised so that the next goal is the floor; at or above it GOGC
// stays at 100. When the load has gone (the floor fell below an eighth of
// MaxFloor for the whole window after it was at a quarter or more), the node
// collects twice (the first collection moves sync.Pool contents, a burst's
// buffers among them, aside; the second drops them) and gives the free
// memory back to the operating system (debug.FreeOSMemory), once per load,
// at most once per releaseEvery: a burst leaves behind what its connections
// hold, not its peak. A GOGC in the environment is the operator's choice and
// turns all this off; GOMEMLIMIT still caps the heap either way.

// MaxFloor is the largest heap-goal floor Tune keeps.
const MaxFloor = 64 << 20

const (
	gcTuneEvery  = time.Second
	maxGCPercent = 1000 // a near-empty heap still collects before it grows 11×
	// floorSpan: under load the floor is what floorSpan of allocation
	// fills, so collections come about this often.
	floorSpan = 2 * time.Second
	// rateWindow ticks of allocation rate: the floor follows their
	// largest, so a lull of a second does not drop it.
	rateWindow = 5
	// releaseEvery bounds how often a node gives memory back.
	releaseEvery = 10 * time.Second
)

// gcPercentFor is the GOGC that puts the goal of a live heap at floor,
// never below the default 100 nor above maxGCPercent.
func gcPercentFor(live, floor uint64) int {
	if live >= floor/2 {
		return 100
	}
	if live == 0 {
		return maxGCPercent
	}
	p := int(100 * (floor - live) / live)
	return min(max(p, 100), maxGCPercent)
}

// floorFor is the floor for an allocation rate (bytes per second): what
// floorSpan of it fills, at most MaxFloor.
func floorFor(rate float64) uint64 {
	f := rate * floorSpan.Seconds()
	if f >= MaxFloor {
		return MaxFloor
	}
	return uint64(max(f, 0))
}

// gcTuner is Tune's state from one tick to the next.
type gcTuner struct {
	cur         int       // the GOGC set
	rates       []float64 // the last rateWindow ticks' allocation rates
	allocs      uint64    // cumulative allocated bytes at the last tick
	at          time.Time
	lastRelease time.Time
	// loaded: the floor reached MaxFloor/4 since the last release.
	loaded bool
	// release gives memory back (releaseMemory; a test's counter).
	release func()
}

// heapStats is what a tick reads from the runtime.
type heapStats struct {
	live   uint64 // marked live by the last collection
	allocs uint64 // cumulative bytes allocated
}

// tick takes the tuner one step at now with s, returning the GOGC to set
// (0: unchanged) and whether to give memory back.
func (g *gcTuner) tick(now time.Time, s heapStats) (gogc int, release bool) {
	if dt := now.Sub(g.at).Seconds(); dt > 0 && !g.at.IsZero() {
		g.rates = append(g.rates, float64(s.allocs-g.allocs)/dt)
		if len(g.rates) > rateWindow {
			g.rates = g.rates[1:]
		}
	}
	g.allocs, g.at = s.allocs, now
	peak := 0.0
	if len(g.rates) > 0 {
		peak = slices.Max(g.rates)
	}
	floor := floorFor(peak)
	if floor >= MaxFloor/4 {
		g.loaded = true
	}
	quiet := floor < MaxFloor/8 && len(g.rates) == rateWindow
	if quiet && g.loaded && now.Sub(g.lastRelease) >= releaseEvery {
		g.lastRelease, g.loaded = now, false
		release = true
	}
	// SetGCPercent stops the world briefly: only on a real change.
	if p := gcPercentFor(s.live, floor); p < g.cur*9/10 || p > g.cur*11/10 {
		g.cur = p
		gogc = p
	}
	return gogc, release
}

// Tune keeps the heap-goal floor until ctx ends, then puts GOGC back. It
// is process-wide: the binary calls it once (cmd/tether), never a node, since
// tests run several nodes in one process. It returns false, doing nothing,
// when GOGC is set in the environment.
func Tune(ctx context.Context) bool {
	if _, set := os.LookupEnv("GOGC"); set {
		return false
	}
	s := readHeap()
	// Until a rate is known, the full floor: a node starts into its load.
	g := &gcTuner{cur: gcPercentFor(s.live, MaxFloor), allocs: s.allocs, at: time.Now(), release: releaseMemory}
	prev := debug.SetGCPercent(g.cur)
	go func() {
		t := time.NewTicker(gcTuneEvery)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				debug.SetGCPercent(prev)
				return
			case <-t.C:
			}
			p, release := g.tick(time.Now(), readHeap())
			if p != 0 {
				debug.SetGCPercent(p)
			}
			if release {
				g.release()
			}
		}
	}()
	return true
}

// releaseMemory collects twice, the second time giving the free memory
// back to the operating system.
func releaseMemory() {
	runtime.GC()
	debug.FreeOSMemory()
}

var heapMetrics = []string{"/gc/heap/live:bytes", "/gc/heap/allocs:bytes"}

// readHeap reads the runtime's heap figures (0 where one is unknown).
func readHeap() heapStats {
	ss := make([]metrics.Sample, len(heapMetrics))
	for i, n := range heapMetrics {
		ss[i].Name = n
	}
	metrics.Read(ss)
	v := func(i int) uint64 {
		if ss[i].Value.Kind() != metrics.KindUint64 {
			return 0
		}
		return ss[i].Value.Uint64()
	}
	return heapStats{live: v(0), allocs: v(1)}
}

// liveHeap is the heap marked live by the last collection (0 before one).
func liveHeap() uint64 { return readHeap().live }
