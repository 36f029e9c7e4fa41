package cluster

import (
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/tether-proxy/tether/test/testutil"
)

// TestMeasureFailureDetection measures, with LAN timing (the default), how
// long after a crash both survivors of a 3-node cluster see the node
// suspect and dead. It only runs when asked:
//
//	TETHER_MEASURE=20 go test -run TestMeasureFailureDetection -v ./cluster/
func TestMeasureFailureDetection(t *testing.T) {
	trials, _ := strconv.Atoi(os.Getenv("TETHER_MEASURE"))
	if trials <= 0 {
		t.Skip("set TETHER_MEASURE=N to measure N crashes")
	}
	lan := func(c *Config) { c.Timing = LAN }
	var suspect, dead []time.Duration
	for range trials {
		n1, n2, n3 := startNode(t, "n1", lan), startNode(t, "n2", lan), startNode(t, "n3", lan)
		mustJoin(t, n2, n1)
		mustJoin(t, n3, n1)
		testutil.Eventually(t, 10*time.Second, "3 alive", func() bool { return aliveIDs(n1) == "n1,n2,n3" && aliveIDs(n2) == "n1,n2,n3" })
		killed := time.Now()
		n3.Shutdown()
		var s time.Duration
		testutil.Eventually(t, 30*time.Second, "n3 dead on both", func() bool {
			if s == 0 && (stateOf(n1, "n3") != StateAlive || stateOf(n2, "n3") != StateAlive) {
				s = time.Since(killed)
			}
			return stateOf(n1, "n3") == StateDead && stateOf(n2, "n3") == StateDead
		})
		dead = append(dead, time.Since(killed))
		suspect = append(suspect, s)
		n1.Shutdown()
		n2.Shutdown()
	}
	pct := func(ds []time.Duration, p float64) time.Duration {
		ds = slices.Clone(ds)
		slices.Sort(ds)
		return ds[int(p*float64(len(ds)-1)+0.5)].Round(10 * time.Millisecond)
	}
	t.Logf("%d crashes, LAN timing: first suspect p50 %s p99 %s; dead on both p50 %s p99 %s max %s",
		trials, pct(suspect, .5), pct(suspect, .99), pct(dead, .5), pct(dead, .99), pct(dead, 1))
}
