package confirm

import (
	"bytes"
	"context"
	"encoding/binary"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/tether-proxy/tether/cluster"
	"github.com/tether-proxy/tether/store"
)

// Gossip tags of the confirmation.
const (
	applyAskTag   = 'a' // leader → member: leader id, index
	applyReplyTag = 'A' // member → leader: member id, index
)

// Wait bounds how long a member waits for its own apply before it
// confirms (a write waits for the confirmations as long, admin.ConfirmWait).
const Wait = 2 * time.Second

// Gossip is the membership confirmations travel over (*cluster.Membership).
type Gossip interface {
	Members() []cluster.Member
	Register(tag byte, h cluster.Handler) error
	Send(id string, tag byte, msg []byte, reliable bool) error
}

// Store is what confirming reads of the Raft store (*store.Store).
type Store interface {
	WaitApplied(ctx context.Context, index uint64) error
	Servers() ([]store.Server, error)
	Barrier(timeout time.Duration) error
}

// Confirms asks members to confirm applied writes and answers their asks.
type Confirms struct {
	id     string
	gossip Gossip
	store  Store
	// inStep brings the data path in step with what is applied.
	inStep func()
	stop   <-chan struct{}
	log    *slog.Logger

	mu   sync.Mutex
	by   map[string]uint64 // highest index each member confirmed
	wake chan struct{}     // closed and replaced on each confirmation
}

// New registers the confirmation's gossip handlers of node id. inStep
// brings the data path in step with what is applied; stop ends the waits.
func New(id string, g Gossip, st Store, inStep func(), stop <-chan struct{}, log *slog.Logger) (*Confirms, error) {
	c := &Confirms{id: id, gossip: g, store: st, inStep: inStep, stop: stop, log: log,
		by: map[string]uint64{}, wake: make(chan struct{})}
	if err := g.Register(applyAskTag, cluster.Handler{Msg: c.asked}); err != nil {
		return nil, err
	}
	if err := g.Register(applyReplyTag, cluster.Handler{Msg: c.confirmed}); err != nil {
		return nil, err
	}
	return c, nil
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

// asked runs on memberlist's goroutine: the wait goes to a goroutine of
// its own, bounded by Wait.
func (c *Confirms) asked(msg []byte) {
	leader, index, ok := decodeIDIndex(msg)
	if !ok {
		return
	}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), Wait)
		defer cancel()
		go func() {
			select {
			case <-c.stop:
				cancel()
			case <-ctx.Done():
			}
		}()
		if err := c.store.WaitApplied(ctx, index); err != nil {
			return // the leader names this node
		}
		c.inStep() // the data path in step before saying so
		if err := c.gossip.Send(leader, applyReplyTag, encodeIDIndex(c.id, index), true); err != nil {
			c.log.Debug("confirming an applied write to the leader failed", "leader", leader, "index", index, "error", err)
		}
	}()
}

// confirmed runs on memberlist's goroutine: it records and wakes.
func (c *Confirms) confirmed(msg []byte) {
	id, index, ok := decodeIDIndex(msg)
	if !ok {
		return
	}
	c.mu.Lock()
	if index > c.by[id] {
		c.by[id] = index
		close(c.wake)
		c.wake = make(chan struct{})
	}
	c.mu.Unlock()
}

// Applied asks every other live member of the Raft configuration to
// confirm it applied index and waits until all did, at most within. It
// returns those that confirmed, this node first, and those that did not.
func (c *Confirms) Applied(ctx context.Context, index uint64, within time.Duration) (applied, pending []string) {
	applied = []string{c.id}
	inRaft := map[string]bool{}
	if servers, err := c.store.Servers(); err == nil {
		for _, s := range servers {
			inRaft[s.ID] = true
		}
	}
	var targets []string
	for _, m := range c.gossip.Members() {
		if m.ID != c.id && m.Alive() && inRaft[m.ID] {
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
		if err := c.store.Barrier(within); err != nil {
			c.log.Debug("barrier after a write failed", "index", index, "error", err)
		}
	}()
	ask := encodeIDIndex(c.id, index)
	for _, id := range targets {
		go func() {
			if err := c.gossip.Send(id, applyAskTag, ask, true); err != nil {
				c.log.Debug("asking a member to confirm an applied write failed", "member", id, "index", index, "error", err)
			}
		}()
	}
	timer := time.NewTimer(within)
	defer timer.Stop()
wait:
	for {
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
