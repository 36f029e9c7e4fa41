package node

import (
	"context"
	"fmt"
	"log/slog"
	"sync"

	"github.com/tether-proxy/tether/cluster"
)

// idConflictLog remembers which live claims on this node's id were logged.
var idConflictLog sync.Map // node id + "\x00" + their address → struct{}

// idClaims are the live claims on this node's id that gossip checked,
// queued until the node runs and judged then.
type idClaims struct {
	ch  chan cluster.IDConflict
	log *slog.Logger
}

func newIDClaims(log *slog.Logger) *idClaims {
	return &idClaims{ch: make(chan cluster.IDConflict, 4), log: log}
}

// stateHolder says whether this node holds cluster state of its own.
type stateHolder interface {
	HadState() bool
	AppliedIndex() uint64
}

// offer queues a claim (gossip's OnIDConflict; it may come before the
// store is open). A full queue drops it: claims recur with every push/pull.
func (c *idClaims) offer(claim cluster.IDConflict) {
	select {
	case c.ch <- claim:
	default:
	}
}

// watch judges the queued claims until ctx ends; st is the open store,
// fail stops the node.
func (c *idClaims) watch(ctx context.Context, st stateHolder, fail func(error)) {
	for {
		select {
		case <-ctx.Done():
			return
		case claim := <-c.ch:
			c.judge(claim, st, fail)
		}
	}
}

// judge decides what a live claim on this node's id means. The node that
// holds no cluster state of its own is the newcomer: it was started with a
// running node's --node-id, and it stops, naming the holder. A node with
// state keeps running and says who else claims its id. A claim where
// nothing answers is this node's own earlier address, which gossip
// replaces by itself.
func (c *idClaims) judge(claim cluster.IDConflict, st stateHolder, fail func(error)) {
	if !claim.Live {
		return
	}
	mine := st.HadState() || st.AppliedIndex() > 0
	if !mine {
		fail(fmt.Errorf("node id %q is taken: a live node at %s already runs under it; start this node with its own --node-id", claim.ID, claim))
		return
	}
	if _, seen := idConflictLog.LoadOrStore(claim.ID+"\x00"+claim.Theirs, struct{}{}); seen {
		return
	}
	if claim.TheirMeta.HasState {
		c.log.Error("two live nodes hold cluster state under this node's id: stop one of them (a copied data dir?)", "id", claim.ID, "other", claim.String())
		return
	}
	c.log.Warn("another process was started with this node's id; it holds no cluster state and stops", "id", claim.ID, "other", claim.String())
}
