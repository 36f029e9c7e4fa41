package cluster

import (
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/hashicorp/memberlist"
)

// IDConflict is another node claiming this node's id, as gossip found it.
type IDConflict struct {
	ID     string // this node's id
	Mine   string // this node's gossip address
	Theirs string // the gossip address of the other claim
	// TheirMeta is the other claim's metadata (its Raft and admin
	// addresses, whether it holds cluster state); zero when unreadable.
	TheirMeta Meta
	// Live: a process at Theirs answered a ping addressed to this id, so
	// two live processes run under one id. False: nothing answers there
	// under this id: a record of this node's own earlier address (a
	// restart on a new address), which the peers replace once they have
	// seen the old address fail (DeadNodeReclaimTime).
	Live bool
}

// conflictPings is how many pings, each bounded by the probe timeout, a
// claim gets before it is taken for a stale record.
const conflictPings = 3

// conflicts checks claims on ids against each other, off memberlist's
// goroutines, at most one check per claim at a time.
type conflicts struct {
	mu       sync.Mutex
	checking map[string]bool      // id + "\x00" + theirs
	logged   map[string]time.Time // third-party claims logged (once per hour)
}

// conflict runs for memberlist's ConflictDelegate: an alive message gave
// a known node name another address than the one memberlist holds, and
// memberlist ignored it. It never blocks: a claim on this node's own id is
// checked in the background.
func (m *Membership) conflict(existing, other *memberlist.Node) {
	theirs := other.Address()
	if existing.Name != m.cfg.NodeID {
		// Two addresses for a third node: a restart on a new address
		// before the old one was seen failed, or two processes under one
		// id; the claimant finds out which and says so.
		key := existing.Name + "\x00" + existing.Address() + "\x00" + theirs
		m.idc.mu.Lock()
		if m.idc.logged == nil {
			m.idc.logged = map[string]time.Time{}
		}
		last, seen := m.idc.logged[key]
		if !seen || time.Since(last) > time.Hour {
			m.idc.logged[key] = time.Now()
		}
		m.idc.mu.Unlock()
		if !seen || time.Since(last) > time.Hour {
			m.log.Info("gossip: a node's id is claimed from a second address; the known one keeps it until it is seen failed (a restart on a new address), unless both are live (a node started with another's --node-id, which that node reports)",
				"id", existing.Name, "known", existing.Address(), "claimed_by", theirs)
		}
		return
	}
	key := theirs
	m.idc.mu.Lock()
	if m.idc.checking == nil {
		m.idc.checking = map[string]bool{}
	}
	busy := m.idc.checking[key]
	m.idc.checking[key] = true
	m.idc.mu.Unlock()
	if busy {
		return
	}
	meta, _ := decodeMeta(other.Meta)
	host, port := other.Addr, other.Port
	go func() {
		defer func() {
			m.idc.mu.Lock()
			delete(m.idc.checking, key)
			m.idc.mu.Unlock()
		}()
		c := IDConflict{ID: m.cfg.NodeID, Mine: m.addr, Theirs: theirs, TheirMeta: meta}
		addr := &net.UDPAddr{IP: host, Port: int(port)}
		for i := 0; i < conflictPings && !c.Live; i++ {
			select {
			case <-m.stop:
				return
			default:
			}
			// memberlist answers a ping only under its own name: an ack
			// means a live process runs as this id at theirs.
			if _, err := m.ml.Ping(m.cfg.NodeID, addr); err == nil {
				c.Live = true
			}
		}
		if !c.Live {
			m.log.Info("gossip: peers still know this node's id at an earlier address, where nothing answers under it now; they take this node's address once they have seen that one fail",
				"id", c.ID, "earlier", c.Theirs, "now", c.Mine)
		}
		if m.cfg.OnIDConflict != nil {
			m.cfg.OnIDConflict(c)
		}
	}()
}

// String names the other claim for a message: its gossip address, and
// its Raft and admin addresses when it gossiped them.
func (c IDConflict) String() string {
	s := c.Theirs + " (gossip"
	if c.TheirMeta.RaftAddr != "" {
		s += ", raft " + c.TheirMeta.RaftAddr
	}
	if c.TheirMeta.AdminAddr != "" {
		s += ", admin " + c.TheirMeta.AdminAddr
	}
	return s + ", state " + strconv.FormatBool(c.TheirMeta.HasState) + ")"
}
