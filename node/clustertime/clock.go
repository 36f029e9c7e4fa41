package clustertime

import (
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tether-proxy/tether/cluster"
	"github.com/tether-proxy/tether/store"
)

// Store is what the clock needs of the replicated state: the committed
// cluster time, a write to set it back, and the Raft configuration.
type Store interface {
	CommittedClock() time.Time
	Apply(store.Command) (uint64, error)
	Servers() ([]store.Server, error)
}

// Members is the gossip view whose clocks vote.
type Members interface {
	Members() []cluster.Member
	PeerClocks() map[string]cluster.PeerClock
}

// Clock is one node's cluster time: its own wall clock (its vote, and
// what it gossips), the reckoning from every member's, and the time the
// leader commits. It logs a jumped median, this node's clock far off, a
// committed time that cannot be set back and a member's clock behind the
// cluster time once per episode each.
type Clock struct {
	self string
	log  *slog.Logger
	st   Store
	mem  Members // nil without gossip

	reck Reckoner
	// offset is this node's wall clock minus the cluster time, in
	// nanoseconds (metric).
	offset atomic.Int64
	// at is the last reading, which the data path counts on from (nil
	// before the first).
	at                         atomic.Pointer[Point]
	apart, off, blocked, ahead atomic.Bool
	// wall (tests): this node's wall clock; nil: time.Now.
	wall atomic.Pointer[func() time.Time]
}

// New is the clock of node self; Bind gives it the store and members
// once they are open.
func New(self string, log *slog.Logger) *Clock {
	return &Clock{self: self, log: log}
}

// Bind gives the clock the replicated state and the gossip members (nil
// without gossip). It is called once, before the first Now.
func (c *Clock) Bind(st Store, members Members) {
	c.st, c.mem = st, members
}

// Point is a reading of the cluster time: At is the cluster time at the
// monotonic instant Mono.
type Point struct{ At, Mono time.Time }

// Last is the last reading of the cluster time (nil before the first).
func (c *Clock) Last() *Point { return c.at.Load() }

// Offset is this node's wall clock minus the cluster time at the last
// reading.
func (c *Clock) Offset() time.Duration { return time.Duration(c.offset.Load()) }

// SetWall (tests) makes f this node's wall clock; nil puts time.Now back.
func (c *Clock) SetWall(f func() time.Time) {
	if f == nil {
		c.wall.Store(nil)
		return
	}
	c.wall.Store(&f)
}

// Wall is this node's wall clock, its vote in the cluster time and the
// clock it gossips. It is time.Now without its monotonic reading, plus an
// offset in builds made for the fault test (offset_chaos.go), which jumps
// one node's wall clock as an NTP step does. Nothing measures elapsed time
// with it: waits use time.Now and time.Since, whose monotonic reading no
// step moves, in every build.
func (c *Clock) Wall() time.Time {
	if f := c.wall.Load(); f != nil {
		return (*f)().Round(0)
	}
	return time.Now().Round(0).Add(wallOffset())
}

// votes are this node's wall clock own and every alive or suspect
// member's clock as its probe acks tell it, counted forward to mono; want
// is how many there should be: own, every such member that sends its
// clock (one that applies SetClock), read or not yet, and every other
// server of the Raft configuration (down, or not seen by gossip yet: a
// node just started knows its configuration before its members). Members
// of an earlier release send no clock and do not vote.
func (c *Clock) votes(own, mono time.Time) (votes []time.Time, want int) {
	votes = []time.Time{own}
	if c.mem == nil {
		return votes, 1
	}
	read := c.mem.PeerClocks()
	alive := map[string]bool{c.self: true}
	want = 1
	for _, m := range c.mem.Members() {
		if m.ID == c.self || !m.Alive() {
			continue
		}
		alive[m.ID] = true
		if pc, ok := read[m.ID]; ok {
			votes = append(votes, pc.At(mono).Round(0))
			want++
		} else if store.CommandSet(m.Commands).Supports(store.SetClock{}) {
			want++
		}
	}
	if c.st == nil {
		return votes, want
	}
	if servers, err := c.st.Servers(); err == nil {
		for _, sv := range servers {
			if !alive[sv.ID] {
				want++
			}
		}
	}
	return votes, want
}

// Now is the cluster time as this node reckons it now, and whether its
// warm-up is over. It logs a median that jumped away from the elapsed
// time, and this node's own clock far off, once per episode.
func (c *Clock) Now() (time.Time, bool) {
	own, mono := c.Wall(), time.Now()
	votes, want := c.votes(own, mono)
	r := c.reck.Read(mono, votes, want)
	if !r.Ready {
		// Not anchored: the median may be one clock's; nothing counts on it.
		return r.Now, false
	}
	c.offset.Store(int64(own.Sub(r.Now)))
	c.at.Store(&Point{At: r.Now, Mono: mono})
	switch {
	case r.Stepped:
		c.log.Warn("the members' clocks moved together and stayed: the cluster time takes their median",
			"cluster_time", r.Now.UTC().Format(time.RFC3339), "votes", r.Votes)
		c.apart.Store(false)
	case r.Apart > 0 && !c.apart.Swap(true):
		c.log.Warn("the members' median clock left the time counted by elapsed time: the cluster time keeps counting, and takes the median only if it stays",
			"median", r.Median.UTC().Format(time.RFC3339), "cluster_time", r.Now.UTC().Format(time.RFC3339), "votes", r.Votes)
	case r.Apart == 0:
		c.apart.Store(false)
	}
	if off := own.Sub(r.Now); r.Ready && (off > clockOffLog || off < -clockOffLog) {
		if !c.off.Swap(true) {
			c.log.Warn("this node's wall clock is off the cluster time (the members' median): nothing it commits goes by it, but fix its time sync",
				"off", off.Round(time.Second).String())
		}
	} else if r.Ready {
		c.off.Store(false)
	}
	return r.Now, r.Ready
}

// Known is the cluster time now, for a write that commits it; ErrNotReady
// before it is anchored.
func (c *Clock) Known() (time.Time, error) {
	now, ready := c.Now()
	if !ready {
		return time.Time{}, ErrNotReady
	}
	return now, nil
}

// ErrNotReady: this node has not anchored its cluster time yet (it just
// started and is reading its members' clocks, or the clocks it has read
// are too few to outvote a wrong one); a write that commits a time waits.
var ErrNotReady = errors.New("this node does not know the cluster time yet: it is reading its members' clocks (it just started, or too few of them answer): retry")

// ErrAhead: the committed time is far ahead of the cluster time and
// cannot be set back yet (a member does not apply SetClock).
var ErrAhead = errors.New("the committed cluster time is far ahead of the members' clocks")

// CommitTime is the time the leader writes into what it commits now, at
// cluster time t: t, or the committed time when that is ahead by at most
// Tolerance (committed activations keep their order). A committed time
// further ahead (one leader's clock, committed by an earlier release) is
// set back to t first; until every member applies SetClock it cannot be,
// and the error says so.
func (c *Clock) CommitTime(t time.Time) (time.Time, error) {
	t = t.Round(0).UTC()
	committed := c.st.CommittedClock()
	switch {
	case !committed.After(t):
		return t, nil
	case !committed.After(t.Add(Tolerance)):
		return committed, nil
	}
	if _, err := c.st.Apply(store.SetClock{At: t}); err != nil {
		err = fmt.Errorf("%w (committed %s, %s ahead): setting it back failed: %w",
			ErrAhead, committed.Format(time.RFC3339), committed.Sub(t).Round(time.Second), err)
		if !c.blocked.Swap(true) {
			c.log.Error("keys are neither activated nor rotated until the committed cluster time is set back", "error", err)
		}
		return time.Time{}, err
	}
	c.blocked.Store(false)
	c.log.Warn("the committed cluster time was far ahead of the members' clocks (an earlier release committed one leader's clock); set back: keys it put in the future activate once every member holds them",
		"was", committed.Format(time.RFC3339), "now", t.Format(time.RFC3339), "ahead", committed.Sub(t).Round(time.Second).String())
	return t, nil
}

// clockSlack covers a member's meta update and its gossip after its clock
// passes an hour.
const clockSlack = time.Minute

// Agreed is the cluster time now, bounded by every alive member's clock
// as it gossips it (whole hours): the leader prunes keys only once every
// member's clock says their retention is over, so no member is left with
// values it still opens by its own clock under a pruned key. A member's
// clock that lags holds pruning back, which only keeps keys longer.
func (c *Clock) Agreed(now time.Time) time.Time {
	if c.mem == nil {
		return now
	}
	t, slowest := now, ""
	for _, m := range c.mem.Members() {
		if !m.Alive() || m.ID == c.self || m.Clock == 0 {
			continue
		}
		// The member's clock now is below the end of the hour it gossiped.
		if bound := time.Unix((m.Clock+1)*3600, 0).Add(clockSlack); bound.Before(t) {
			t, slowest = bound, m.ID
		}
	}
	if ahead := now.Sub(t); slowest != "" && ahead > time.Hour {
		if !c.ahead.Swap(true) {
			c.log.Warn("the cluster time is ahead of a member's clock: keys are pruned by the slowest member's clock",
				"member", slowest, "ahead_at_least", ahead.Round(time.Minute).String())
		}
	} else {
		c.ahead.Store(false)
	}
	return t
}

// Collector exports the cluster time's health.
func (c *Clock) Collector() prometheus.Collector {
	return &collector{c: c, offset: prometheus.NewDesc("tether_clock_offset_seconds",
		"This node's wall clock minus the cluster time (the members' median clock counted on by elapsed time).", nil, nil)}
}

type collector struct {
	c      *Clock
	offset *prometheus.Desc
}

func (m *collector) Describe(ch chan<- *prometheus.Desc) { ch <- m.offset }

func (m *collector) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(m.offset, prometheus.GaugeValue, m.c.Offset().Seconds())
}
