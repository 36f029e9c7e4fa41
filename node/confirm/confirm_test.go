package confirm

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tether-proxy/tether/cluster"
	"github.com/tether-proxy/tether/store"
)

// net delivers gossip messages between the nodes of a test.
type net struct {
	mu       sync.Mutex
	handlers map[string]map[byte]cluster.Handler
	members  []cluster.Member
	down     map[string]bool // messages to these are lost
}

type node struct {
	id      string
	net     *net
	applied uint64
	servers []store.Server
}

func (n *node) Members() []cluster.Member { return n.net.members }
func (n *node) Register(tag byte, h cluster.Handler) error {
	n.net.mu.Lock()
	defer n.net.mu.Unlock()
	if n.net.handlers[n.id] == nil {
		n.net.handlers[n.id] = map[byte]cluster.Handler{}
	}
	n.net.handlers[n.id][tag] = h
	return nil
}
func (n *node) Send(id string, tag byte, msg []byte, reliable bool) error {
	n.net.mu.Lock()
	h, ok := n.net.handlers[id][tag]
	down := n.net.down[id]
	n.net.mu.Unlock()
	if !ok || down {
		return errors.New("unreachable")
	}
	h.Msg(msg)
	return nil
}
func (n *node) WaitApplied(ctx context.Context, index uint64) error {
	if n.applied >= index {
		return nil
	}
	<-ctx.Done()
	return ctx.Err()
}
func (n *node) Servers() ([]store.Server, error)    { return n.servers, nil }
func (n *node) Barrier(timeout time.Duration) error { return nil }

// The leader's answer waits for every live member of the Raft
// configuration to confirm it applied the index, and names those that did
// not within the bound.
func TestAppliedNamesWhoConfirmed(t *testing.T) {
	servers := []store.Server{{ID: "n1"}, {ID: "n2"}, {ID: "n3"}}
	nw := &net{handlers: map[string]map[byte]cluster.Handler{}, down: map[string]bool{"n3": true}}
	for _, id := range []string{"n1", "n2", "n3", "n4"} { // n4: in gossip, not in Raft
		nw.members = append(nw.members, cluster.Member{Meta: cluster.Meta{ID: id}, State: cluster.StateAlive})
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	stop := make(chan struct{})
	defer close(stop)
	var leader *Confirms
	var inStep atomic.Int32
	for _, id := range []string{"n1", "n2", "n3", "n4"} {
		c, err := New(id, &node{id: id, net: nw, applied: 10, servers: servers}, &node{id: id, net: nw, applied: 10, servers: servers}, func() { inStep.Add(1) }, stop, quiet)
		if err != nil {
			t.Fatal(err)
		}
		if id == "n1" {
			leader = c
		}
	}
	applied, pending := leader.Applied(context.Background(), 10, 300*time.Millisecond)
	if !slices.Equal(applied, []string{"n1", "n2"}) || !slices.Equal(pending, []string{"n3"}) {
		t.Fatalf("applied %v, pending %v; want n1 and n2 applied, n3 pending", applied, pending)
	}
	nw.mu.Lock()
	nw.down["n3"] = false
	nw.mu.Unlock()
	applied, pending = leader.Applied(context.Background(), 10, 5*time.Second)
	if !slices.Equal(applied, []string{"n1", "n2", "n3"}) || pending != nil {
		t.Fatalf("applied %v, pending %v; want all three", applied, pending)
	}
	if inStep.Load() < 2 {
		t.Fatalf("members confirmed without bringing their data path in step (%d times)", inStep.Load())
	}
}
