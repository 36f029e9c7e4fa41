package node

import (
	"context"
	"os"
	"runtime/debug"
	"runtime/metrics"
	"time"
)

// The collector's default goal is twice the live heap. A proxy's live heap is
// small (a few MB with hundreds of connections) while every request
// allocates, so at tens of thousands of requests a second the collector ran
// dozens of times a second: GOGC=800 took 9 % off the CPU per request in the
// race's ka-1k (proxy/DESIGN.md, "The runtime"). A fixed higher GOGC would
// also multiply a large heap's goal (10,000 idle connections are ~200 MB
// live), so the floor only lifts the goal of a small heap: while the live
// heap is below GCFloor, GOGC is raised so that the next goal is GCFloor; at
// or above it GOGC stays at 100. A GOGC in the environment is the operator's
// choice and turns the floor off; GOMEMLIMIT still caps the heap either way.

// GCFloor is the smallest heap goal TuneGC keeps.
const GCFloor = 64 << 20

const (
	gcTuneEvery  = time.Second
	maxGCPercent = 1000 // a near-empty heap still collects before it grows 11×
)

// gcPercentFor is the GOGC that puts the goal of a live heap at GCFloor,
// never below the default 100 nor above maxGCPercent.
func gcPercentFor(live uint64) int {
	if live == 0 {
		return maxGCPercent
	}
	if live >= GCFloor/2 {
		return 100
	}
	p := int(100 * (GCFloor - live) / live)
	return min(max(p, 100), maxGCPercent)
}

// TuneGC keeps the heap-goal floor until ctx ends, then puts GOGC back. It
// is process-wide: the binary calls it once (cmd/tether), never a Node, since
// tests run several nodes in one process. It returns false, doing nothing,
// when GOGC is set in the environment.
func TuneGC(ctx context.Context) bool {
	if _, set := os.LookupEnv("GOGC"); set {
		return false
	}
	cur := gcPercentFor(liveHeap())
	prev := debug.SetGCPercent(cur)
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
			// SetGCPercent stops the world briefly: only on a real change.
			if p := gcPercentFor(liveHeap()); p < cur*9/10 || p > cur*11/10 {
				debug.SetGCPercent(p)
				cur = p
			}
		}
	}()
	return true
}

// liveHeap is the heap marked live by the last collection (0 before one).
func liveHeap() uint64 {
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return s[0].Value.Uint64()
}
