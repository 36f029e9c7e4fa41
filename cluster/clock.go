package cluster

import (
	"encoding/binary"
	"sync"
	"time"

	"github.com/hashicorp/memberlist"
)

// Members' wall clocks ride on memberlist's probe acks (its PingDelegate,
// where Serf carries network coordinates): each ack this node sends holds
// its wall clock (Config.Clock), and each ack of a direct probe it receives
// gives the peer's clock, measured within half the round trip. memberlist
// probes one member per ProbeInterval, so every member's reading is
// renewed every few seconds. The leader's cluster time is the median of
// these clocks (node/clustertime); a member of an earlier release sends
// no clock and has no reading.

// clockPayloadVersion opens an ack's payload: the version, then the wall
// clock in Unix nanoseconds (8 bytes, big endian).
const clockPayloadVersion = 'c'

// PeerClock is a member's wall clock as this node last measured it.
type PeerClock struct {
	// Wall is the member's clock at Seen: the reading in its ack plus half
	// the round trip.
	Wall time.Time
	// Seen is this node's time.Now (with its monotonic reading) when the
	// ack came back.
	Seen time.Time
	// RTT is the probe's round trip: Wall is within RTT/2 of the truth.
	RTT time.Duration
}

// At is the member's clock at now (this node's time.Now), had it ticked
// since Seen as this node's monotonic clock did.
func (c PeerClock) At(now time.Time) time.Time { return c.Wall.Add(now.Sub(c.Seen)) }

// peerClocks holds the latest reading of each member, by id.
type peerClocks struct {
	clock func() time.Time
	mu    sync.Mutex
	by    map[string]PeerClock
}

var _ memberlist.PingDelegate = (*peerClocks)(nil)

// AckPayload runs on memberlist's packet goroutine: it only reads the clock.
func (p *peerClocks) AckPayload() []byte {
	b := make([]byte, 1, 9)
	b[0] = clockPayloadVersion
	return binary.BigEndian.AppendUint64(b, uint64(p.clock().UnixNano()))
}

// NotifyPingComplete records a peer's clock; a payload of another form (a
// peer of an earlier release sends none) is ignored.
func (p *peerClocks) NotifyPingComplete(other *memberlist.Node, rtt time.Duration, payload []byte) {
	if other == nil || len(payload) != 9 || payload[0] != clockPayloadVersion {
		return
	}
	ns := int64(binary.BigEndian.Uint64(payload[1:]))
	if ns <= 0 {
		return
	}
	seen := time.Now()
	r := PeerClock{Wall: time.Unix(0, ns).UTC().Add(rtt / 2), Seen: seen, RTT: rtt}
	p.mu.Lock()
	p.by[other.Name] = r
	p.mu.Unlock()
}

// PeerClocks is the latest clock reading of each member this node probed
// directly, by id (never this node's own). Readings of members that are no
// longer alive stay: the caller picks the members it counts.
func (m *Membership) PeerClocks() map[string]PeerClock { return m.clocks.PeerClocks() }

func (p *peerClocks) PeerClocks() map[string]PeerClock {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make(map[string]PeerClock, len(p.by))
	for id, c := range p.by {
		out[id] = c
	}
	return out
}
