package cluster

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync"

	"github.com/hashicorp/memberlist"
)

// The delegates memberlist calls run on its network goroutines, some with
// memberlist's node lock held: they never block, never call back into
// memberlist, and only copy, compare and signal.

// Handler is one kind of user payload carried by gossip: the destination
// health verdicts register one. Each is named by a one-byte tag that prefixes
// its messages and frames its part of push/pull. Every method must return
// quickly without blocking; buffers are copies the handler may keep.
type Handler struct {
	// Msg receives a user message (a broadcast or a direct send) of this tag.
	Msg func(msg []byte)
	// LocalState returns this handler's part of a push/pull exchange.
	LocalState func(join bool) []byte
	// MergeState receives the peer's part of a push/pull exchange.
	MergeState func(buf []byte, join bool)
}

// MaxBroadcast is the largest message Broadcast accepts: it must fit in one
// UDP gossip packet (memberlist's UDPBufferSize, 1400) with its headers and
// the encryption overhead.
const MaxBroadcast = 1200

// errors from Register and Broadcast.
var (
	errTagZero  = errors.New("cluster: handler tag 0 is reserved")
	errTagTaken = errors.New("cluster: handler tag already registered")
)

// handlers holds the registered Handlers; read on every message.
type handlers struct {
	mu sync.RWMutex
	by map[byte]Handler
}

func (h *handlers) get(tag byte) (Handler, bool) {
	h.mu.RLock()
	defer h.mu.RUnlock()
	x, ok := h.by[tag]
	return x, ok
}

func (h *handlers) register(tag byte, x Handler) error {
	if tag == 0 {
		return errTagZero
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.by == nil {
		h.by = map[byte]Handler{}
	}
	if _, ok := h.by[tag]; ok {
		return fmt.Errorf("%w: %d", errTagTaken, tag)
	}
	h.by[tag] = x
	return nil
}

// pushPullVersion opens the framed push/pull state: version, then for each
// handler its tag, a uvarint length and its bytes.
const pushPullVersion = 1

func (h *handlers) localState(join bool) []byte {
	h.mu.RLock()
	defer h.mu.RUnlock()
	if len(h.by) == 0 {
		return nil
	}
	out := []byte{pushPullVersion}
	for tag, x := range h.by {
		if x.LocalState == nil {
			continue
		}
		b := x.LocalState(join)
		out = append(out, tag)
		out = binary.AppendUvarint(out, uint64(len(b)))
		out = append(out, b...)
	}
	return out
}

// splitState parses a peer's framed push/pull state. A peer holds the
// gossip key, yet a malformed frame must not crash or stall this node.
func splitState(buf []byte) (map[byte][]byte, error) {
	if len(buf) == 0 {
		return nil, nil
	}
	if buf[0] != pushPullVersion {
		return nil, fmt.Errorf("push/pull state version %d, want %d", buf[0], pushPullVersion)
	}
	out := map[byte][]byte{}
	rest := buf[1:]
	for len(rest) > 0 {
		tag := rest[0]
		n, k := binary.Uvarint(rest[1:])
		if k <= 0 {
			return nil, fmt.Errorf("push/pull state: bad length for tag %d", tag)
		}
		rest = rest[1+k:]
		if n > uint64(len(rest)) {
			return nil, fmt.Errorf("push/pull state: tag %d claims %d bytes, %d left", tag, n, len(rest))
		}
		out[tag] = rest[:n:n]
		rest = rest[n:]
	}
	return out, nil
}

// delegate is memberlist's Delegate, EventDelegate, MergeDelegate and
// AliveDelegate for one Membership.
type delegate struct{ m *Membership }

var (
	_ memberlist.Delegate      = delegate{}
	_ memberlist.EventDelegate = delegate{}
	_ memberlist.MergeDelegate = delegate{}
	_ memberlist.AliveDelegate = delegate{}

	_ memberlist.ConflictDelegate = delegate{}
)

func (d delegate) NodeMeta(limit int) []byte {
	b := *d.m.metaBytes.Load()
	if len(b) > limit { // encodeMeta checked MetaMaxSize; limit is the same
		return nil
	}
	return b
}

func (d delegate) NotifyMsg(b []byte) {
	if len(b) == 0 {
		return
	}
	h, ok := d.m.handlers.get(b[0])
	if !ok || h.Msg == nil {
		d.m.log.Debug("gossip: message with unknown tag dropped", "tag", b[0], "bytes", len(b))
		return
	}
	h.Msg(append([]byte(nil), b[1:]...))
}

func (d delegate) GetBroadcasts(overhead, limit int) [][]byte {
	return d.m.queue.GetBroadcasts(overhead, limit)
}

func (d delegate) LocalState(join bool) []byte { return d.m.handlers.localState(join) }

func (d delegate) MergeRemoteState(buf []byte, join bool) {
	parts, err := splitState(buf)
	if err != nil {
		d.m.log.Warn("gossip: peer's push/pull state dropped", "err", err)
		return
	}
	for tag, b := range parts {
		if h, ok := d.m.handlers.get(tag); ok && h.MergeState != nil {
			h.MergeState(append([]byte(nil), b...), join)
		}
	}
}

func (d delegate) NotifyJoin(n *memberlist.Node)   { d.m.event(n, StateAlive) }
func (d delegate) NotifyUpdate(n *memberlist.Node) { d.m.event(n, StateAlive) }
func (d delegate) NotifyLeave(n *memberlist.Node)  { d.m.event(n, StateDead) }

// NotifyMerge runs when this node joins a peer or a peer joins it: refuse a
// peer whose nodes hold another cluster's state.
func (d delegate) NotifyMerge(peers []*memberlist.Node) error {
	for _, p := range peers {
		if err := d.m.admit(p); err != nil {
			return err
		}
	}
	return nil
}

// NotifyAlive runs for every alive message: refuse nodes of another cluster
// even when they reach us through a third node's gossip.
func (d delegate) NotifyAlive(p *memberlist.Node) error { return d.m.admit(p) }

// NotifyConflict runs when a known node's name comes with another address
// (memberlist holds its node lock): see conflict.go.
func (d delegate) NotifyConflict(existing, other *memberlist.Node) { d.m.conflict(existing, other) }

// broadcast is a named, replaceable gossip message.
type broadcast struct {
	name string
	msg  []byte
}

var _ memberlist.NamedBroadcast = (*broadcast)(nil)

func (b *broadcast) Name() string { return b.name }
func (b *broadcast) Invalidates(o memberlist.Broadcast) bool {
	ob, ok := o.(*broadcast)
	return ok && ob.name == b.name
}
func (b *broadcast) Message() []byte { return b.msg }
func (b *broadcast) Finished()       {}
