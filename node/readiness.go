package node

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"time"
)

// A node started to join a cluster (--join or --bootstrap-expect) with no
// cluster state of its own cannot open the cluster's affinity values: a
// session it took would move to another destination. Its proxy listeners
// are bound (the ports are held, a port in use fails the start) but do not
// accept until the node is in the cluster's Raft configuration and holds the
// active key: a client's connection is refused, and a client behind DNS
// tries another address. --serve-before-join opens them at start. A node
// with state from an earlier run serves from it at once, leader or not.

// proxyGate is what the proxy listeners wait for.
type proxyGate struct {
	// waiting is why the listeners are still closed; nil once open (or
	// never gated).
	waiting atomic.Pointer[string]
}

// reason is why the listeners are closed ("" when they are open).
func (g *proxyGate) reason() string {
	if p := g.waiting.Load(); p != nil {
		return *p
	}
	return ""
}

// NotReady says why the node does not serve yet ("" when it does): its
// proxy listeners wait to join, no Raft leader is known, or it holds no
// active key.
func (n *Node) NotReady() string {
	if why := n.gate.reason(); why != "" {
		return "proxy listeners closed until this node is in the cluster and holds the active key: " + why
	}
	if id, _ := n.store.Leader(); id == "" {
		return "no Raft leader known yet"
	}
	if n.ring.ActiveKeyID(time.Now()) == "" {
		return "no active key yet"
	}
	return ""
}

// joinGateInterval is how often a gated node looks at its state.
const joinGateInterval = 50 * time.Millisecond

// joinGateReminder is how often a gated node repeats what it waits for.
const joinGateReminder = 30 * time.Second

// gatedStart says whether the proxy must wait to be in the cluster.
func (n *Node) gatedStart() bool {
	return n.cfg.clustered() && !n.cfg.ServeBeforeJoin && !n.store.HadState()
}

// openListeners starts the proxy listeners, or, on a node that must wait
// to join, binds them without accepting (serveWhenJoined opens them).
func (n *Node) openListeners() error {
	if !n.gatedStart() {
		if err := n.server.Start(); err != nil {
			return fmt.Errorf("listeners: %w", err)
		}
		return nil
	}
	if err := n.server.Reserve(); err != nil {
		return fmt.Errorf("listeners: %w", err)
	}
	why := n.joinWait()
	if why == "" {
		why = "starting"
	}
	n.gate.waiting.Store(&why)
	return nil
}

// joinWait is what a gated node still waits for ("" for nothing).
func (n *Node) joinWait() string {
	servers, err := n.store.Servers()
	in := false
	for _, s := range servers {
		in = in || s.ID == n.cfg.NodeID
	}
	switch {
	case err != nil || !in:
		how := "the leader adds it once it is in gossip"
		if n.cfg.BootstrapExpect > 0 {
			how = fmt.Sprintf("the cluster forms once %d nodes without state see each other, or its leader adds this node", n.cfg.BootstrapExpect)
		}
		return fmt.Sprintf("not in the cluster yet (%s; joining %s)", how, strings.Join(n.cfg.Join, ","))
	case n.ring.ActiveKeyID(time.Now()) == "":
		return "in the cluster, waiting for its active key"
	}
	return ""
}

// serveWhenJoined opens a gated node's listeners once it is in the
// cluster and holds the active key, saying what it waits for at start and
// every joinGateReminder.
func (n *Node) serveWhenJoined(ctx context.Context) {
	defer n.bg.Done()
	if n.gate.reason() == "" {
		return
	}
	since := time.Now()
	n.log.Info("proxy listeners closed until this node is in the cluster and holds the active key (--serve-before-join serves earlier)",
		"waiting_for", n.gate.reason(), "proxy", n.proxyAddrList())
	t := time.NewTicker(joinGateInterval)
	defer t.Stop()
	reminded := since
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			why := n.joinWait()
			if why != "" {
				n.gate.waiting.Store(&why)
				if now.Sub(reminded) >= joinGateReminder {
					reminded = now
					n.log.Info("proxy listeners still closed", "waiting_for", why, "waited", now.Sub(since).Round(time.Second))
				}
				continue
			}
			if err := n.server.Start(); err != nil {
				if !errors.Is(err, http.ErrServerClosed) { // else the node is stopping
					n.fail(fmt.Errorf("opening the proxy listeners: %w", err))
				}
				return
			}
			n.gate.waiting.Store(nil)
			n.log.Info("proxy listeners open: this node is in the cluster and holds the active key", "proxy", n.proxyAddrList(), "waited", time.Since(since).Round(time.Millisecond))
			return
		}
	}
}

func (n *Node) proxyAddrList() string {
	var addrs []string
	for _, a := range n.server.Addrs() {
		addrs = append(addrs, a.String())
	}
	return strings.Join(addrs, ",")
}
