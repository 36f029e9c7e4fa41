package cluster

import (
	"time"

	"github.com/hashicorp/memberlist"
)

// Timing selects memberlist's timers.
//
// LAN (the default) starts from memberlist.DefaultLANConfig and tightens
// suspicion for the small clusters tether runs (3 to a few tens of nodes):
//   - ProbeInterval 1 s, ProbeTimeout 500 ms (memberlist's LAN values);
//   - SuspicionMult 3 instead of 4: the suspicion timeout is
//     3 × max(1, log10(N)) × 1 s, i.e. 3 s below 10 nodes, so a crashed node
//     is dead ~4 s after it stops (one probe period plus suspicion);
//   - SuspicionMaxTimeoutMult 3 instead of 6: without the confirmations that
//     shorten suspicion (few nodes to confirm it), it ends after at most 9 s;
//   - PushPullInterval 15 s instead of 30 s: a full state exchange heals a
//     lost update sooner; at tens of nodes this is still a few KB/s;
//   - GossipInterval 100 ms instead of 200 ms: a member's progress (its
//     durable index, which a key's activation waits for) reaches the leader
//     sooner; at tens of nodes the extra packets are a few KB/s;
//   - DeadNodeReclaimTime 5 s: a node restarted under the same id on a new
//     address is accepted once the old one has been dead 5 s (memberlist's
//     default 0 never accepts it).
//
// Refutation protects against false positives on a loaded machine: a live
// node that hears it is suspected re-announces itself within the suspicion
// timeout, and memberlist's awareness backs its probe rate off when its own
// timers run late.
//
// Local is for in-process tests on loopback: probes every 200 ms (timeout
// 100 ms), suspicion 3 × 200 ms = 600 ms (max 1.8 s), gossip every 20 ms,
// push/pull every 2 s, TCP timeout 1 s, reclaim after 200 ms, dead nodes
// kept in gossip for 5 s.
type Timing int

// Timings.
const (
	LAN Timing = iota
	Local
)

func (t Timing) String() string {
	switch t {
	case LAN:
		return "lan"
	case Local:
		return "local"
	}
	return "timing(?)"
}

// timings is what a Timing sets besides memberlist's config.
type timings struct {
	poll          time.Duration // how often the event loop re-reads states (suspect)
	updateTimeout time.Duration // how long UpdateMeta waits for its broadcast (it is queued either way; a longer wait only delays the next update)
	joinRetry     time.Duration // JoinRetry's period (jittered ±25%)
	announceEvery time.Duration // re-announce period after a join
	announceCount int           // and how many times
}

func (t Timing) apply(c *memberlist.Config) (timings, bool) {
	switch t {
	case LAN:
		c.ProbeInterval = time.Second
		c.ProbeTimeout = 500 * time.Millisecond
		c.SuspicionMult = 3
		c.SuspicionMaxTimeoutMult = 3
		c.PushPullInterval = 15 * time.Second
		c.DeadNodeReclaimTime = 5 * time.Second
		c.GossipInterval = 100 * time.Millisecond
		return timings{poll: 250 * time.Millisecond, updateTimeout: 100 * time.Millisecond, joinRetry: time.Second,
			announceEvery: 2 * time.Second, announceCount: 15}, true
	case Local:
		c.TCPTimeout = time.Second
		c.ProbeInterval = 200 * time.Millisecond
		c.ProbeTimeout = 100 * time.Millisecond
		c.SuspicionMult = 3
		c.SuspicionMaxTimeoutMult = 3
		c.GossipInterval = 20 * time.Millisecond
		c.PushPullInterval = 2 * time.Second
		c.GossipToTheDeadTime = 5 * time.Second
		c.DeadNodeReclaimTime = 200 * time.Millisecond
		return timings{poll: 40 * time.Millisecond, updateTimeout: 100 * time.Millisecond, joinRetry: 200 * time.Millisecond,
			announceEvery: 200 * time.Millisecond, announceCount: 15}, true
	}
	return timings{}, false
}
