package node

import (
	"bytes"
	"context"
	"encoding/binary"
	"slices"
	"sync"
	"time"

	"github.com/tether-proxy/tether/cluster"
)

// A drain (or undrain) answers once every live node applies it, not only
// the leader: a follower a moment behind would still send new sessions to
// the draining destination. After committing, the leader asks every other
// live member of the Raft configuration (gossip alive or suspect) directly
// over gossip's TCP messages to confirm the entry's index; a member waits
// until it applied that index and brought its data path in step, then
// answers with its id and the index. The leader waits for every answer, at
// most applyConfirmWait, and names the members that did not answer. Asking
// costs two small messages per member and write, and needs nothing kept in
// between (a new leader asks the same way); the members' own progress
// reports (gossip meta, the durable index) arrive a gossip round later.

// Gossip tags of the confirmation.
const (
	applyAskTag   = 'a' // leader → member: leader id, index
	applyReplyTag = 'A' // member → leader: member id, index
)

// applyConfirmWait bounds how long a write waits for the members'
// confirmations (and a member for its own apply).
const applyConfirmWait = 2 * time.Second

// applyConfirms are the confirmations the leader received.
type applyConfirms struct {
	mu   sync.Mutex
	by   map[string]uint64 // highest index each member confirmed
	wake chan struct{}     // closed and replaced on each confirmation
}

// openApplyConfirms registers the confirmation's gossip handlers.
func (n *Node) openApplyConfirms() error {
	if n.members == nil {
		return nil
	}
	n.confirms.mu.Lock()
	n.confirms.by, n.confirms.wake = map[string]uint64{}, make(chan struct{})
	n.confirms.mu.Unlock()
	if err := n.members.Register(applyAskTag, cluster.Handler{Msg: n.applyAsked}); err != nil {
		return err
	}
	return n.members.Register(applyReplyTag, cluster.Handler{Msg: n.applyConfirmed})
}

func encodeIDIndex(id string, index uint64) []byte {
	return binary.AppendUvarint([]byte(id+"\x00"), index)
}

func decodeIDIndex(b []byte) (string, uint64, bool) {
	i := bytes.IndexByte(b, 0)
	if i <= 0 {
		return "", 0, false
	}
	index, k := binary.Uvarint(b[i+1:])
	if k <= 0 {
		return "", 0, false
	}
	return string(b[:i]), index, true
}

// applyAsked runs on memberlist's goroutine: the wait goes to a goroutine
// of its own, bounded by applyConfirmWait.
func (n *Node) applyAsked(msg []byte) {
	leader, index, ok := decodeIDIndex(msg)
	if !ok {
		return
	}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), applyConfirmWait)
		defer cancel()
		go func() {
			select {
			case <-n.stop:
				cancel()
			case <-ctx.Done():
			}
		}()
		if err := n.store.WaitApplied(ctx, index); err != nil {
			return // the leader names this node
		}
		n.applyDrains() // the data path in step before saying so
		if err := n.members.Send(leader, applyReplyTag, encodeIDIndex(n.cfg.NodeID, index), true); err != nil {
			n.log.Debug("confirming an applied write to the leader failed", "leader", leader, "index", index, "error", err)
		}
	}()
}

// applyConfirmed runs on memberlist's goroutine: it records and wakes.
func (n *Node) applyConfirmed(msg []byte) {
	id, index, ok := decodeIDIndex(msg)
	if !ok {
		return
	}
	c := &n.confirms
	c.mu.Lock()
	if index > c.by[id] {
		c.by[id] = index
		close(c.wake)
		c.wake = make(chan struct{})
	}
	c.mu.Unlock()
}

// confirmApplied asks every other live member of the Raft configuration to
// confirm it applied index and waits until all did, at most within. It
// returns those that confirmed, this node first, and those that did not.
func (n *Node) confirmApplied(ctx context.Context, index uint64, within time.Duration) (applied, pending []string) {
	applied = []string{n.cfg.NodeID}
	if n.members == nil {
		return applied, nil
	}
	inRaft := map[string]bool{}
	if servers, err := n.store.Servers(); err == nil {
		for _, s := range servers {
			inRaft[s.ID] = true
		}
	}
	var targets []string
	for _, m := range n.members.Members() {
		if m.ID != n.cfg.NodeID && m.Alive() && inRaft[m.ID] {
			targets = append(targets, m.ID)
		}
	}
	if len(targets) == 0 {
		return applied, nil
	}
	// A follower applies an entry once it learns it is committed, which
	// raft tells it with the next entry it replicates (or its next
	// replication round, tens of milliseconds later): a barrier entry now
	// carries the commit index to every follower at once.
	go func() {
		if err := n.store.Barrier(within); err != nil {
			n.log.Debug("barrier after a write failed", "index", index, "error", err)
		}
	}()
	ask := encodeIDIndex(n.cfg.NodeID, index)
	for _, id := range targets {
		go func() {
			if err := n.members.Send(id, applyAskTag, ask, true); err != nil {
				n.log.Debug("asking a member to confirm an applied write failed", "member", id, "index", index, "error", err)
			}
		}()
	}
	timer := time.NewTimer(within)
	defer timer.Stop()
wait:
	for {
		c := &n.confirms
		c.mu.Lock()
		pending = pending[:0]
		for _, id := range targets {
			if c.by[id] < index {
				pending = append(pending, id)
			}
		}
		wake := c.wake
		c.mu.Unlock()
		if len(pending) == 0 {
			break
		}
		select {
		case <-wake:
		case <-timer.C:
			break wait
		case <-ctx.Done():
			break wait
		}
	}
	for _, id := range targets {
		if !slices.Contains(pending, id) {
			applied = append(applied, id)
		}
	}
	if len(pending) == 0 {
		pending = nil
	}
	return applied, pending
}
