//go:build unix

package keyring

import (
	"syscall"
	"testing"
	"time"
)

// reportCPU adds a cpu-ns/op metric (process CPU time per operation, GC
// included): on a shared, loaded machine wall-clock ns/op also counts the
// time spent waiting for a core.
func reportCPU(b *testing.B) func() {
	start := cpuTime()
	return func() {
		if b.N > 0 {
			b.ReportMetric(float64((cpuTime()-start).Nanoseconds())/float64(b.N), "cpu-ns/op")
		}
	}
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
