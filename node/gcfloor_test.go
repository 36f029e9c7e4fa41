package node

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
		{GCFloor / 2, 100},      // the default already reaches the floor
		{GCFloor/2 + 1, 100},    // above: the default
		{200 * MiB, 100},        // 10,000 idle connections: untouched
		{GCFloor * 100, 100},
	} {
		if got := gcPercentFor(c.live); got != c.want {
			t.Errorf("gcPercentFor(%d) = %d, want %d", c.live, got, c.want)
		}
		if g := c.live * uint64(100+gcPercentFor(c.live)) / 100; c.live > 0 && c.live <= GCFloor/2 && gcPercentFor(c.live) < maxGCPercent && g != GCFloor {
			t.Errorf("live %d: goal %d, want the floor %d", c.live, g, uint64(GCFloor))
		}
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
	if TuneGC(context.Background()) {
		t.Fatal("TuneGC ran with GOGC set in the environment")
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
	if !TuneGC(ctx) {
		t.Fatal("TuneGC did nothing without GOGC in the environment")
	}
	// This test binary's live heap is far below the floor.
	if live := liveHeap(); live >= GCFloor/2 {
		t.Skipf("live heap %d is not small here", live)
	}
	if got := gogc(t); got <= 100 {
		t.Fatalf("GOGC = %d with a small live heap, want it raised", got)
	}
	cancel()
	testutil.Eventually(t, 5*time.Second, "GOGC back to 100 after ctx ends", func() bool { return gogc(t) == 100 })
}
