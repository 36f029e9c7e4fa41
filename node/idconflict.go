package node

import (
	"context"
	"fmt"
	"sync"

	"github.com/tether-proxy/tether/cluster"
)

// idConflictLog remembers which live claims on this node's id were logged.
var idConflictLog sync.Map // node id + "\x00" + their address → struct{}

// idConflict hands a claim checked by gossip to watchIDClaims (it may come
// before the store is open; a full queue drops it: claims recur with every
// push/pull).
func (n *Node) idConflict(c cluster.IDConflict) {
	select {
	case n.idClaims <- c:
	default:
	}
}

// watchIDClaims judges claims on this node's id once the node runs.
func (n *Node) watchIDClaims(ctx context.Context) {
	defer n.bg.Done()
	for {
		select {
		case <-ctx.Done():
			return
		case c := <-n.idClaims:
			n.judgeIDClaim(c)
		}
	}
}

// judgeIDClaim decides what a live claim on this node's id means. The node
// that holds no cluster state of its own is the newcomer: it was started
// with a running node's --node-id, and it stops, naming the holder. A node
// with state keeps running and says who else claims its id. A claim where
// nothing answers is this node's own earlier address, which gossip
// replaces by itself.
func (n *Node) judgeIDClaim(c cluster.IDConflict) {
	if !c.Live {
		return
	}
	mine := n.store.HadState() || n.store.AppliedIndex() > 0
	if !mine {
		n.fail(fmt.Errorf("node id %q is taken: a live node at %s already runs under it; start this node with its own --node-id", c.ID, c))
		return
	}
	if _, seen := idConflictLog.LoadOrStore(c.ID+"\x00"+c.Theirs, struct{}{}); seen {
		return
	}
	if c.TheirMeta.HasState {
		n.log.Error("two live nodes hold cluster state under this node's id: stop one of them (a copied data dir?)", "id", c.ID, "other", c.String())
		return
	}
	n.log.Warn("another process was started with this node's id; it holds no cluster state and stops", "id", c.ID, "other", c.String())
}
