package node

import (
	"fmt"
	"strings"
	"time"
)

// NotReady says why the node does not serve yet ("" when it does): its
// proxy listeners wait to join (node/gate), no Raft leader is known, or it
// holds no active key.
func (n *Node) NotReady() string {
	if why := n.gate.Reason(); why != "" {
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

// joinWait is what a node whose listeners wait to join still waits for
// ("" for nothing).
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
