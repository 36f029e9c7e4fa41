package cluster

import (
	"testing"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/tether-proxy/tether/test/testutil"
)

// TestProbeAcksCarryEachMembersClock: every member learns every other's
// wall clock from the acks of its probes, within the round trip, including
// a clock far off its own; its own is not among them.
func TestProbeAcksCarryEachMembersClock(t *testing.T) {
	offsets := map[string]time.Duration{"n1": 0, "n2": 2500 * time.Hour, "n3": -3 * time.Hour}
	nodes := map[string]*Membership{}
	for _, id := range []string{"n1", "n2", "n3"} {
		off := offsets[id]
		nodes[id] = startNode(t, id, func(c *Config) { c.Clock = func() time.Time { return time.Now().Add(off) } })
	}
	mustJoin(t, nodes["n2"], nodes["n1"])
	mustJoin(t, nodes["n3"], nodes["n1"])
	for id, m := range nodes {
		testutil.Eventually(t, 10*time.Second, id+" to read the others' clocks", func() bool {
			clocks := m.PeerClocks()
			if _, ok := clocks[id]; ok {
				t.Fatalf("%s holds a reading of its own clock", id)
			}
			for other, off := range offsets {
				if other == id {
					continue
				}
				c, ok := clocks[other]
				if !ok {
					return false
				}
				now := time.Now()
				if d := c.At(now).Sub(now.Add(off)); d > time.Second || d < -time.Second {
					t.Fatalf("%s reads %s's clock %s off (offset %s, round trip %s)", id, other, d, off, c.RTT)
				}
			}
			return true
		})
	}
}

// TestPeerClockAdvancesWithTheMonotonicClock: a reading is extrapolated by
// this node's elapsed time, not by any wall clock.
func TestPeerClockAdvancesWithTheMonotonicClock(t *testing.T) {
	seen := time.Now()
	wall := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	c := PeerClock{Wall: wall, Seen: seen}
	if got := c.At(seen.Add(90 * time.Second)); !got.Equal(wall.Add(90 * time.Second)) {
		t.Fatalf("At(seen+90s) = %s, want %s", got, wall.Add(90*time.Second))
	}
}

// FuzzPeerClockPayload: an ack's payload comes from a peer (of any
// release); whatever it holds, reading it never panics and records only a
// well-formed clock.
func FuzzPeerClockPayload(f *testing.F) {
	p := &peerClocks{clock: time.Now, by: map[string]PeerClock{}}
	f.Add(p.AckPayload())
	f.Add([]byte{})
	f.Add([]byte{clockPayloadVersion, 0xff, 0, 0, 0, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		p.NotifyPingComplete(&memberlist.Node{Name: "peer"}, time.Millisecond, b)
		if c, ok := p.PeerClocks()["peer"]; ok && (c.Wall.IsZero() || c.Wall.Before(time.Unix(0, 0))) {
			t.Fatalf("recorded %v from %x", c, b)
		}
	})
}
