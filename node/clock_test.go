package node

import (
	"testing"
	"time"
)

// TestDrainClockIsNeverBehindTheMembersMedian: a drain's deadline counts
// from the later of this node's clock and the median of the members'
// clocks, so a leader whose clock runs behind does not end sessions early,
// and one member far ahead does not move it.
func TestDrainClockIsNeverBehindTheMembersMedian(t *testing.T) {
	real := time.Date(2026, 12, 4, 18, 30, 0, 0, time.UTC)
	cases := []struct {
		desc   string
		now    time.Time
		others []time.Time
		want   time.Time
	}{
		{"alone: its own clock", real, nil, real},
		{"in step with the others: its own clock", real, []time.Time{real.Add(-20 * time.Second), real.Add(-40 * time.Second)}, real},
		{"3 h behind: the members' median", real.Add(-3 * time.Hour), []time.Time{real.Add(-20 * time.Second), real.Add(-40 * time.Second)}, real.Add(-40 * time.Second)},
		{"behind, one other far ahead: still the median, not the outlier", real.Add(-3 * time.Hour), []time.Time{real.Add(2500 * time.Hour), real.Add(-10 * time.Second)}, real.Add(-10 * time.Second)},
		{"ahead: its own clock (the bound on activations and prunes handles ahead)", real.Add(100 * time.Hour), []time.Time{real, real}, real.Add(100 * time.Hour)},
	}
	for _, c := range cases {
		t.Run(c.desc, func(t *testing.T) {
			clocks := append([]time.Time{c.now}, c.others...)
			if got := medianFloor(c.now, clocks); !got.Equal(c.want) {
				t.Fatalf("medianFloor = %s, want %s", got, c.want)
			}
		})
	}
}
