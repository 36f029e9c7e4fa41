//go:build chaosclock

package clustertime

import (
	"os"
	"strings"
	"sync"
	"time"
)

// The fault test (test/chaos) builds tether with -tags chaosclock and jumps
// one node's wall clock by writing a Go duration ("2500h", "-3h", "0") to
// the file named by TETHER_CHAOS_CLOCK_FILE. Only the wall clock moves
// (Clock.Wall: the node's vote in the cluster time and the clock it gossips),
// as in an NTP step: elapsed times, measured with time.Now's monotonic
// reading, do not jump, and the data path keeps time.Now. Product builds
// have no such hook (offset_default.go).

var chaosClock struct {
	sync.Mutex
	read   time.Time
	offset time.Duration
}

func wallOffset() time.Duration {
	path := os.Getenv("TETHER_CHAOS_CLOCK_FILE")
	if path == "" {
		return 0
	}
	chaosClock.Lock()
	defer chaosClock.Unlock()
	if time.Since(chaosClock.read) < 100*time.Millisecond {
		return chaosClock.offset
	}
	chaosClock.read = time.Now()
	b, err := os.ReadFile(path)
	if err != nil {
		chaosClock.offset = 0
		return 0
	}
	d, err := time.ParseDuration(strings.TrimSpace(string(b)))
	if err != nil {
		d = 0
	}
	chaosClock.offset = d
	return d
}
