package node

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tether-proxy/tether/store"
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
	// member's clock before it counts from the median of those it has.
	clockWarmup = 5 * time.Second
	// clockTolerance: a committed time ahead of the cluster time by at
	// most this is kept (committed times stay in order when leaders'
	// readings differ a little); further ahead, the leader sets it back.
	clockTolerance = 5 * time.Second
	// clockOffLog: this node's own clock this far from the cluster time is
	// logged (once per episode).
	clockOffLog = 10 * time.Second
)

// clusterClock is one node's reckoning of the cluster time. Every node
// keeps one current (the leader loop reads it every second), so a new
// leader counts on from where it was.
type clusterClock struct {
	mu    sync.Mutex
	start time.Time // monotonic instant of the first reading
	set   bool      // anchored: the warm-up is over
	// ref is the cluster time at the monotonic instant refAt, the last
	// reading at which the median agreed with the elapsed time.
	ref, refAt time.Time
	last       time.Time // the latest time returned: it never goes back but by a step
	apart      time.Time // monotonic instant the median began to disagree (zero: it agrees)
}

// clockReading is one reading of a clusterClock.
type clockReading struct {
	now     time.Time     // the cluster time
	median  time.Time     // the median of the votes
	votes   int           // clocks counted, this node's own included
	ready   bool          // the warm-up is over
	apart   time.Duration // how long the median has disagreed with the elapsed time (0: it agrees)
	stepped bool          // this reading took a median that had disagreed for long
}

// read is the cluster time at the monotonic instant mono, given the votes
// (this node's wall clock and the members' as last read, counted forward
// to mono) and whether every member that should vote did.
//
//   - Until it is anchored (the first reading with every vote, or
//     clockWarmup after the first reading) it is the median.
//   - Then it counts on by elapsed (monotonic) time from the last reading
//     at which the median agreed with that count (within clockAgree), and
//     takes the median whenever it agrees again: a clock that jumps and
//     comes back moves nothing.
//   - A median that disagrees for clockStepAfter (clockStepAfterFew with
//     fewer than three votes) is taken: all the clocks moved.
//   - It never goes back, but by such a step.
func (c *clusterClock) read(mono time.Time, votes []time.Time, complete bool) clockReading {
	c.mu.Lock()
	defer c.mu.Unlock()
	r := clockReading{median: median(votes), votes: len(votes)}
	if c.start.IsZero() {
		c.start = mono
	}
	if !c.set {
		r.now = r.median
		if complete || mono.Sub(c.start) >= clockWarmup {
			c.set, c.ref, c.refAt, c.last = true, r.median, mono, r.median
			r.ready = true
		}
		return r
	}
	r.ready = true
	counted := c.ref.Add(mono.Sub(c.refAt))
	if d := r.median.Sub(counted); d <= clockAgree && d >= -clockAgree {
		r.now, c.ref, c.refAt, c.apart = r.median, r.median, mono, time.Time{}
	} else {
		if c.apart.IsZero() {
			c.apart = mono
		}
		r.apart = mono.Sub(c.apart)
		after := clockStepAfterFew
		if len(votes) >= 3 {
			after = clockStepAfter
		}
		if r.apart >= after {
			r.now, c.ref, c.refAt, c.apart, r.stepped = r.median, r.median, mono, time.Time{}, true
		} else {
			r.now = counted
		}
	}
	if !r.stepped && r.now.Before(c.last) {
		r.now = c.last
	}
	c.last = r.now
	return r
}

// median is the middle of ts (the mean of the two middle ones for an even
// count); zero for none.
func median(ts []time.Time) time.Time {
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

// clockVotes are this node's wall clock own and every alive or suspect
// member's clock as its probe acks tell it, counted forward to mono.
// complete is false while a member that sends its clock (one that applies
// SetClock) has not been read yet. Members of an earlier release send none
// and do not vote.
func (n *Node) clockVotes(own, mono time.Time) (votes []time.Time, complete bool) {
	votes, complete = []time.Time{own}, true
	if n.members == nil {
		return votes, complete
	}
	read := n.members.PeerClocks()
	for _, m := range n.members.Members() {
		if m.ID == n.cfg.NodeID || !m.Alive() {
			continue
		}
		if c, ok := read[m.ID]; ok {
			votes = append(votes, c.At(mono).Round(0))
		} else if store.CommandSet(m.Commands).Supports(store.SetClock{}) {
			complete = false
		}
	}
	return votes, complete
}

// clusterNow is the cluster time as this node reckons it now, and whether
// its warm-up is over. It logs a median that jumped away from the elapsed
// time, and this node's own clock far off, once per episode.
func (n *Node) clusterNow() (time.Time, bool) {
	own, mono := n.wallNow(), time.Now()
	votes, complete := n.clockVotes(own, mono)
	r := n.clock.read(mono, votes, complete)
	n.clockOffset.Store(int64(own.Sub(r.now)))
	n.clusterAt.Store(&clockPoint{at: r.now, mono: mono})
	switch {
	case r.stepped:
		n.log.Warn("the members' clocks moved together and stayed: the cluster time takes their median",
			"cluster_time", r.now.UTC().Format(time.RFC3339), "votes", r.votes)
		n.clockApart.Store(false)
	case r.apart > 0 && !n.clockApart.Swap(true):
		n.log.Warn("the members' median clock left the time counted by elapsed time: the cluster time keeps counting, and takes the median only if it stays",
			"median", r.median.UTC().Format(time.RFC3339), "cluster_time", r.now.UTC().Format(time.RFC3339), "votes", r.votes)
	case r.apart == 0:
		n.clockApart.Store(false)
	}
	if off := own.Sub(r.now); r.ready && (off > clockOffLog || off < -clockOffLog) {
		if !n.clockOff.Swap(true) {
			n.log.Warn("this node's wall clock is off the cluster time (the members' median): nothing it commits goes by it, but fix its time sync",
				"off", off.Round(time.Second).String())
		}
	} else if r.ready {
		n.clockOff.Store(false)
	}
	return r.now, r.ready
}

// clockPoint is a reading of the cluster time: at is the cluster time at
// the monotonic instant mono.
type clockPoint struct{ at, mono time.Time }

// errClockAhead: the committed time is far ahead of the cluster time and
// cannot be set back yet (a member does not apply SetClock).
var errClockAhead = errors.New("the committed cluster time is far ahead of the members' clocks")

// commitTime is the time the leader writes into what it commits now, at
// cluster time t: t, or the committed time when that is ahead by at most
// clockTolerance (committed activations keep their order). A committed
// time further ahead (one leader's clock, committed by an earlier release)
// is set back to t first; until every member applies SetClock it cannot
// be, and the error says so.
func (n *Node) commitTime(t time.Time) (time.Time, error) {
	t = t.Round(0).UTC()
	c := n.store.CommittedClock()
	switch {
	case !c.After(t):
		return t, nil
	case !c.After(t.Add(clockTolerance)):
		return c, nil
	}
	if _, err := n.store.Apply(store.SetClock{At: t}); err != nil {
		err = fmt.Errorf("%w (committed %s, %s ahead): setting it back failed: %w",
			errClockAhead, c.Format(time.RFC3339), c.Sub(t).Round(time.Second), err)
		if !n.clockBlocked.Swap(true) {
			n.log.Error("keys are neither activated nor rotated until the committed cluster time is set back", "error", err)
		}
		return time.Time{}, err
	}
	n.clockBlocked.Store(false)
	n.log.Warn("the committed cluster time was far ahead of the members' clocks (an earlier release committed one leader's clock); set back: keys it put in the future activate once every member holds them",
		"was", c.Format(time.RFC3339), "now", t.Format(time.RFC3339), "ahead", c.Sub(t).Round(time.Second).String())
	return t, nil
}

// clockCollector exports the cluster time's health.
type clockCollector struct {
	n      *Node
	offset *prometheus.Desc
}

func newClockCollector(n *Node) *clockCollector {
	return &clockCollector{n: n, offset: prometheus.NewDesc("tether_clock_offset_seconds",
		"This node's wall clock minus the cluster time (the members' median clock counted on by elapsed time).", nil, nil)}
}

func (c *clockCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.offset }

func (c *clockCollector) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(c.offset, prometheus.GaugeValue, time.Duration(c.n.clockOffset.Load()).Seconds())
}
