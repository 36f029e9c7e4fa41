package gcfloor

import (
	"context"
	"os"
	"runtime/debug"
	"runtime/metrics"
	"testing"
	"time"

	"github.com/tether-proxy/tether/test/testutil"
)

func TestGCPercentFor(t *testing.T) {
	const MiB = 1 << 20
	for _, c := range []struct {
		live uint64
		want int
	}{
		{0, maxGCPercent},       // before the first collection
		{1 * MiB, maxGCPercent}, // 6,300 wanted, capped
		{8 * MiB, 700},          // goal 8 × 8 = 64 MiB
		{16 * MiB, 300},         // goal 64 MiB
		{MaxFloor / 2, 100},     // the default already reaches the floor
		{MaxFloor/2 + 1, 100},   // above: the default
		{200 * MiB, 100},        // 10,000 idle connections: untouched
		{MaxFloor * 100, 100},
	} {
		if got := gcPercentFor(c.live, MaxFloor); got != c.want {
			t.Errorf("gcPercentFor(%d) = %d, want %d", c.live, got, c.want)
		}
		if g := c.live * uint64(100+gcPercentFor(c.live, MaxFloor)) / 100; c.live > 0 && c.live <= MaxFloor/2 && gcPercentFor(c.live, MaxFloor) < maxGCPercent && g != MaxFloor {
			t.Errorf("live %d: goal %d, want the floor %d", c.live, g, uint64(MaxFloor))
		}
	}
}

// TestFloorFollowsTheLoad: under load the floor is what floorSpan of
// allocation fills (at most MaxFloor), it stays up through a lull shorter
// than the window, and once the load has gone GOGC is back at the default
// and the node gives memory back, once per load, not again within
// releaseEvery, never under load and never without a load before.
func TestFloorFollowsTheLoad(t *testing.T) {
	const MiB = 1 << 20
	g := &gcTuner{cur: 100}
	now := time.Unix(1000, 0)
	var allocs uint64
	live := uint64(8 * MiB)
	step := func(rate uint64) (int, bool) {
		now = now.Add(time.Second)
		allocs += rate
		return g.tick(now, heapStats{live: live, allocs: allocs})
	}
	if p, rel := step(0); p != 0 || rel {
		t.Fatalf("first tick (no rate yet): GOGC %d, release %v", p, rel)
	}
	for range 2 * rateWindow {
		if _, rel := step(0); rel {
			t.Fatal("released on a node that never had a load")
		}
	}
	// 100 MB/s: the whole floor, 64 MiB over a live 8 MiB.
	if p, rel := step(100 * MiB); p != 700 || rel {
		t.Fatalf("under load: GOGC %d, release %v; want 700 and no release", p, rel)
	}
	// 8 MiB/s: the floor is 16 MiB, but the window still holds the load.
	for i := range rateWindow - 1 {
		if p, rel := step(8 * MiB); p != 0 || rel {
			t.Fatalf("lull second %d: GOGC %d, release %v; want unchanged", i, p, rel)
		}
	}
	// The load has left the window: 16 MiB over 8 MiB live is the default.
	if p, rel := step(8 * MiB); p != 100 || rel {
		t.Fatalf("moderate load: GOGC %d, release %v; want 100 and no release (not quiet)", p, rel)
	}
	for range rateWindow - 1 {
		if _, rel := step(0); rel {
			t.Fatal("released while the window still held a load")
		}
	}
	if _, rel := step(0); !rel {
		t.Fatal("quiet after a load: no release")
	}
	first := now
	// A second burst at once: quiet again 5 s later, but released only
	// releaseEvery after the first release.
	step(200 * MiB)
	var at []time.Time
	for range 3 * rateWindow {
		if _, rel := step(0); rel {
			at = append(at, now)
		}
	}
	if len(at) != 1 || at[0].Sub(first) != releaseEvery {
		t.Fatalf("second burst: released at %v after the first, want once, %v after", at, releaseEvery)
	}
	if floorFor(1e12) != MaxFloor || floorFor(0) != 0 || floorFor(4*MiB) != 8*MiB {
		t.Fatalf("floorFor: %d %d %d", floorFor(1e12), floorFor(0), floorFor(4*MiB))
	}
}

func gogc(t *testing.T) int {
	t.Helper()
	s := []metrics.Sample{{Name: "/gc/gogc:percent"}}
	metrics.Read(s)
	return int(s[0].Value.Uint64())
}

func TestTuneGCLeavesAnOperatorsGOGC(t *testing.T) {
	t.Setenv("GOGC", "150")
	before := gogc(t)
	if Tune(context.Background()) {
		t.Fatal("Tune ran with GOGC set in the environment")
	}
	if got := gogc(t); got != before {
		t.Fatalf("GOGC changed from %d to %d", before, got)
	}
}

func TestTuneGCLiftsASmallHeapAndRestores(t *testing.T) {
	if v, set := os.LookupEnv("GOGC"); set {
		os.Unsetenv("GOGC")
		t.Cleanup(func() { os.Setenv("GOGC", v) })
	}
	prev := debug.SetGCPercent(100)
	t.Cleanup(func() { debug.SetGCPercent(prev) })

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if !Tune(ctx) {
		t.Fatal("Tune did nothing without GOGC in the environment")
	}
	// This test binary's live heap is far below the floor.
	if live := liveHeap(); live >= MaxFloor/2 {
		t.Skipf("live heap %d is not small here", live)
	}
	if got := gogc(t); got <= 100 {
		t.Fatalf("GOGC = %d with a small live heap, want it raised", got)
	}
	cancel()
	testutil.Eventually(t, 5*time.Second, "GOGC back to 100 after ctx ends", func() bool { return gogc(t) == 100 })
}
