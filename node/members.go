package node

import (
	"sort"
	"time"

	"github.com/tether-proxy/tether/cluster"
	adminapi "github.com/tether-proxy/tether/node/admin"
)

// memberView is one row of GET /v1/members.
type memberView = adminapi.Member

// removedFromRaft reports whether m is a member a committed Raft
// configuration removed (tether remove, tether leave, the leader's reap)
// and gossip does not see alive: it left the cluster, whatever gossip last
// said of it. Every node holds the same committed removals, so every node
// says so. An alive member is back (the leader adds it again).
func (n *Node) removedFromRaft(m cluster.Member) bool {
	if m.State == cluster.StateAlive || m.ID == n.cfg.NodeID {
		return false
	}
	_, removed := n.store.RemovedAt(m.ID)
	return removed
}

// forgetRemoved drops from the member table the members a committed
// configuration removed once they have been gone for --reap-timeout: they
// read "left" until then, on every node alike.
func (n *Node) forgetRemoved() {
	if n.members == nil {
		return
	}
	for _, m := range n.members.Members() {
		if n.removedFromRaft(m) && time.Since(m.Since) >= n.cfg.ReapTimeout {
			n.members.Forget(m.ID)
		}
	}
}

// memberViews joins gossip membership with the Raft configuration: a Raft
// server gossip does not know shows as dead, a member removed from Raft
// as left.
func (n *Node) memberViews() []memberView {
	roles := map[string]string{}
	raftAddrs := map[string]string{}
	servers, err := n.store.Servers()
	if err == nil {
		for _, s := range servers {
			roles[s.ID] = "nonvoter"
			if s.Voter {
				roles[s.ID] = "voter"
			}
			raftAddrs[s.ID] = s.Address
		}
	}
	leader, _ := n.store.Leader()
	var gossip []cluster.Member
	if n.members != nil {
		gossip = n.members.Members()
	} else {
		gossip = []cluster.Member{{
			Meta:  cluster.Meta{ID: n.cfg.NodeID, RaftAddr: n.store.Addr(), AdminAddr: n.adminLn.Addr().String(), Version: Version},
			State: "alive",
		}}
	}
	conflicts := n.lead.AddressConflicts(servers, gossip)
	out := make([]memberView, 0, len(gossip))
	seen := map[string]bool{}
	for _, m := range gossip {
		seen[m.ID] = true
		v := memberView{
			ID: m.ID, Address: m.Addr, State: string(m.State), Raft: "none",
			RaftAddress: m.RaftAddr, AdminAddress: m.AdminAddr, Version: m.Version,
			DurableIndex: m.Durable, Leader: m.ID == leader, Conflict: conflicts[m.ID],
			Settings: n.lead.SettingsMismatch(m.Meta),
		}
		if m.ID == n.cfg.NodeID {
			v.DurableIndex = n.store.DurableIndex()
		}
		if r, ok := roles[m.ID]; ok {
			v.Raft = r
		} else if n.removedFromRaft(m) {
			v.State = string(cluster.StateLeft)
		}
		out = append(out, v)
	}
	for id, r := range roles {
		if !seen[id] {
			out = append(out, memberView{ID: id, State: "dead", Raft: r, RaftAddress: raftAddrs[id], Leader: id == leader, Conflict: conflicts[id]})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}
