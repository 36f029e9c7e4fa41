package clustertime

import (
	"slices"
	"sync"
	"time"
)

// The cluster time is what the leader writes into every command that
// carries a time (key creation and activation, prunes, drain deadlines).
// It is the median of the members' wall clocks, counted forward by this
// node's monotonic clock: one node's clock, ahead or behind by any amount,
// moves neither (docs/OPERATIONS.md, "Clocks").
const (
	// clockAgree is how far the members' median may stray from the time
	// counted on by elapsed time since the last agreeing reading and still
	// be taken as is (the clocks' own drift and the readings' noise).
	clockAgree = 2 * time.Second
	// clockStepAfter: a median that disagrees with the elapsed time for
	// this long is taken as the new time (every clock was stepped, or the
	// clocks this node counted from were wrong), when at least three
	// clocks vote. clockStepAfterFew is the same with fewer votes, where
	// the median is one or two nodes' clocks.
	clockStepAfter    = 30 * time.Second
	clockStepAfterFew = 10 * time.Minute
	// clockWarmup bounds how long a node just started waits for every
	// member's clock before it counts from the median of a majority of
	// them.
	clockWarmup = 5 * time.Second
	// Tolerance: a committed time ahead of the cluster time by at most
	// this is kept (committed times stay in order when leaders' readings
	// differ a little); further ahead, the leader sets it back.
	Tolerance = 5 * time.Second
	// clockOffLog: this node's own clock this far from the cluster time is
	// logged (once per episode).
	clockOffLog = 10 * time.Second
)

// Reckoner is one node's reckoning of the cluster time. Every node keeps
// one current (the leader loop reads it every second), so a new leader
// counts on from where it was.
type Reckoner struct {
	mu    sync.Mutex
	start time.Time // monotonic instant of the first reading
	set   bool      // anchored: the warm-up is over
	// ref is the cluster time at the monotonic instant refAt, the last
	// reading at which the median agreed with the elapsed time.
	ref, refAt time.Time
	last       time.Time // the latest time returned: it never goes back but by a step
	apart      time.Time // monotonic instant the median began to disagree (zero: it agrees)
}

// Reading is one reading of a Reckoner.
type Reading struct {
	Now     time.Time     // the cluster time
	Median  time.Time     // the median of the votes
	Votes   int           // clocks counted, this node's own included
	Ready   bool          // the warm-up is over
	Apart   time.Duration // how long the median has disagreed with the elapsed time (0: it agrees)
	Stepped bool          // this reading took a median that had disagreed for long
}

// Read is the cluster time at the monotonic instant mono, given the votes
// (this node's wall clock and the members' as last read, counted forward
// to mono) and want, the number of clocks that should vote (this node's,
// every alive member's that sends one, every other Raft server's).
//
//   - Until it is anchored it is the median, and not Ready. It anchors on
//     a median no one clock moves: three votes or more, or one or two that
//     agree within clockAgree (of two that disagree, either may be the
//     wrong one), once every clock is in, or after clockWarmup once a
//     majority of want is. Anything else waits clockStepAfterFew, then
//     anchors on the median of what is in.
//   - Then it counts on by elapsed (monotonic) time from the last reading
//     at which the median agreed with that count (within clockAgree), and
//     takes the median whenever it agrees again: a clock that jumps and
//     comes back moves nothing.
//   - A median that disagrees for clockStepAfter (clockStepAfterFew with
//     fewer than three votes) is taken: all the clocks moved.
//   - It never goes back, but by such a step.
func (c *Reckoner) Read(mono time.Time, votes []time.Time, want int) Reading {
	c.mu.Lock()
	defer c.mu.Unlock()
	r := Reading{Median: Median(votes), Votes: len(votes)}
	if c.start.IsZero() {
		c.start = mono
	}
	if !c.set {
		r.Now = r.Median
		waited := mono.Sub(c.start)
		credible := len(votes) >= 3 || (len(votes) > 0 && spread(votes) <= clockAgree)
		in := len(votes) >= want || (waited >= clockWarmup && 2*len(votes) > want)
		if (credible && in) || waited >= clockStepAfterFew {
			c.set, c.ref, c.refAt, c.last = true, r.Median, mono, r.Median
			r.Ready = true
		}
		return r
	}
	r.Ready = true
	counted := c.ref.Add(mono.Sub(c.refAt))
	if d := r.Median.Sub(counted); d <= clockAgree && d >= -clockAgree {
		r.Now, c.ref, c.refAt, c.apart = r.Median, r.Median, mono, time.Time{}
	} else {
		if c.apart.IsZero() {
			c.apart = mono
		}
		r.Apart = mono.Sub(c.apart)
		after := clockStepAfterFew
		if len(votes) >= 3 {
			after = clockStepAfter
		}
		if r.Apart >= after {
			r.Now, c.ref, c.refAt, c.apart, r.Stepped = r.Median, r.Median, mono, time.Time{}, true
		} else {
			r.Now = counted
		}
	}
	if !r.Stepped && r.Now.Before(c.last) {
		r.Now = c.last
	}
	c.last = r.Now
	return r
}

// spread is how far apart the earliest and the latest of ts are.
func spread(ts []time.Time) time.Duration {
	lo, hi := ts[0], ts[0]
	for _, t := range ts[1:] {
		if t.Before(lo) {
			lo = t
		}
		if t.After(hi) {
			hi = t
		}
	}
	return hi.Sub(lo)
}

// Median is the middle of ts (the mean of the two middle ones for an even
// count); zero for none.
func Median(ts []time.Time) time.Time {
	if len(ts) == 0 {
		return time.Time{}
	}
	s := slices.Clone(ts)
	slices.SortFunc(s, func(a, b time.Time) int { return a.Compare(b) })
	mid := len(s) / 2
	if len(s)%2 == 1 {
		return s[mid]
	}
	return s[mid-1].Add(s[mid].Sub(s[mid-1]) / 2)
}
