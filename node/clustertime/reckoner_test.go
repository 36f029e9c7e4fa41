package clustertime

import (
	"testing"
	"time"
)

// TestClusterTimeIsTheMedianAndNoOneClockMovesIt drives a Reckoner with
// a fake monotonic clock: each step is a moment (elapsed since the first),
// the votes as offsets from the real time then, and the cluster time it
// must read (as an offset from the real time).
func TestClusterTimeIsTheMedianAndNoOneClockMovesIt(t *testing.T) {
	type step struct {
		at       time.Duration
		votes    []time.Duration
		clocks   int // clocks that should vote (0: every vote is in)
		want     time.Duration
		notReady bool
	}
	h, s := time.Hour, time.Second
	cases := []struct {
		desc  string
		steps []step
	}{
		{"three clocks in step: their median", []step{{0, []time.Duration{0, 500 * time.Millisecond, -300 * time.Millisecond}, 0, 0, false}}},
		{"one of three 2500 h ahead: the median leaves it out", []step{{0, []time.Duration{2500 * h, 0, 0}, 0, 0, false}}},
		{"one of three 3 h behind: the median leaves it out", []step{{0, []time.Duration{-3 * h, s, 0}, 0, 0, false}}},
		{"two clocks: the mean of the two", []step{{0, []time.Duration{0, 2 * s}, 0, s, false}}},
		{"one of five far ahead and one far behind", []step{{0, []time.Duration{2500 * h, -3 * h, 0, s, -s}, 0, 0, false}}},
		{"alone, its clock 2500 h ahead for 10 s and back: the time counts on by elapsed time", []step{
			{0, []time.Duration{0}, 0, 0, false},
			{s, []time.Duration{2500 * h}, 0, 0, false},
			{11 * s, []time.Duration{2500 * h}, 0, 0, false},
			{12 * s, []time.Duration{0}, 0, 0, false},
		}},
		{"alone, its clock 3 h behind for a minute: the time counts on", []step{
			{0, []time.Duration{0}, 0, 0, false},
			{s, []time.Duration{-3 * h}, 0, 0, false},
			{time.Minute, []time.Duration{-3 * h}, 0, 0, false},
			{time.Minute + s, []time.Duration{0}, 0, 0, false},
		}},
		{"the leader of three jumps: nothing moves, whatever its clock does", []step{
			{0, []time.Duration{0, 0, 0}, 0, 0, false},
			{s, []time.Duration{2500 * h, 0, 0}, 0, 0, false},
			{2 * time.Hour, []time.Duration{-3 * h, 0, 0}, 0, 0, false},
		}},
		{"every clock steps 1 h ahead and stays: taken after clockStepAfter", []step{
			{0, []time.Duration{0, 0, 0}, 0, 0, false},
			{s, []time.Duration{h, h, h}, 0, 0, false},
			{clockStepAfter, []time.Duration{h, h, h}, 0, 0, false},
			{clockStepAfter + s, []time.Duration{h, h, h}, 0, h, false},
			{clockStepAfter + 2*s, []time.Duration{h, h, h}, 0, h, false},
		}},
		{"every clock steps 1 h back and stays: taken after clockStepAfter, the only way back", []step{
			{0, []time.Duration{0, 0, 0}, 0, 0, false},
			{s, []time.Duration{-h, -h, -h}, 0, 0, false},
			{clockStepAfter + s, []time.Duration{-h, -h, -h}, 0, -h, false},
		}},
		{"alone, a step held for 10 minutes is taken", []step{
			{0, []time.Duration{0}, 0, 0, false},
			{s, []time.Duration{h}, 0, 0, false},
			{clockStepAfterFew, []time.Duration{h}, 0, 0, false},
			{clockStepAfterFew + s, []time.Duration{h}, 0, h, false},
		}},
		{"a median that dips a little does not go back", []step{
			{0, []time.Duration{0, 0, 0}, 0, 0, false},
			{s, []time.Duration{-1500 * time.Millisecond, -1500 * time.Millisecond, 0}, 0, -s, false},
			{3 * s, []time.Duration{0, 0, 0}, 0, 0, false},
		}},
		{"warm-up: the median of what is in, not ready until every clock is", []step{
			{0, []time.Duration{h}, 3, h, true},
			{s, []time.Duration{h, 0, 0}, 0, 0, false},
			{2 * s, []time.Duration{2500 * h, 0, 0}, 0, 0, false},
		}},
		{"warm-up ends after its bound once a majority of the clocks is in", []step{
			{0, []time.Duration{0, 0}, 3, 0, true},
			{clockWarmup, []time.Duration{0, 0}, 3, 0, false},
			{clockWarmup + s, []time.Duration{2500 * h, 0}, 3, 0, false},
		}},
		{"warm-up: two of five in, one 2500 h ahead: not anchored past the bound, then three: their median", []step{
			{0, []time.Duration{0, 2500 * h}, 5, 1250 * h, true},
			{clockWarmup, []time.Duration{0, 2500 * h}, 5, 1250 * h, true},
			{clockWarmup + s, []time.Duration{0, 2500 * h, s}, 5, s, false},
			{clockWarmup + 2*s, []time.Duration{0, 2500 * h}, 5, s, false},
		}},
		{"warm-up: one of five in past the bound is no majority", []step{
			{clockWarmup, []time.Duration{0}, 5, 0, true},
		}},
		{"warm-up: two clocks apart, every clock in: either may be the wrong one, so not anchored until clockStepAfterFew", []step{
			{0, []time.Duration{0, 2500 * h}, 0, 1250 * h, true},
			{clockWarmup, []time.Duration{0, 2500 * h}, 0, 1250 * h, true},
			{clockStepAfterFew - s, []time.Duration{0, 2500 * h}, 0, 1250 * h, true},
			{clockStepAfterFew, []time.Duration{0, 2500 * h}, 0, 1250 * h, false},
		}},
		{"warm-up: the two clocks come to agree: anchored then", []step{
			{0, []time.Duration{0, -3 * h}, 0, -90 * time.Minute, true},
			{s, []time.Duration{0, s}, 0, s / 2, false},
		}},
	}
	real0 := time.Date(2026, 12, 4, 18, 30, 0, 0, time.UTC)
	mono0 := time.Now()
	for _, c := range cases {
		t.Run(c.desc, func(t *testing.T) {
			var clk Reckoner
			for i, st := range c.steps {
				real := real0.Add(st.at)
				votes := make([]time.Time, len(st.votes))
				for j, v := range st.votes {
					votes[j] = real.Add(v)
				}
				clocks := st.clocks
				if clocks == 0 {
					clocks = len(votes)
				}
				r := clk.Read(mono0.Add(st.at), votes, clocks)
				if got := r.Now.Sub(real); got != st.want {
					t.Fatalf("step %d (at %s, votes %v): cluster time off by %s, want %s", i, st.at, st.votes, got, st.want)
				}
				if r.Ready == st.notReady {
					t.Fatalf("step %d: ready %t, want %t", i, r.Ready, !st.notReady)
				}
			}
		})
	}
}
