package node

import (
	"sort"
	"time"

	"github.com/tether-proxy/tether/cluster"
	adminapi "github.com/tether-proxy/tether/node/admin"
	"github.com/tether-proxy/tether/node/leader"
	"github.com/tether-proxy/tether/store"
)

// memberView is one row of GET /v1/members.
type memberView = adminapi.Member

// memberTable is the members as this node sees them: gossip joined with
// the Raft configuration and its committed removals.
type memberTable struct {
	self    string
	store   *store.Store
	members *cluster.Membership // nil without gossip
	// lead says what the leader's rounds find wrong with a member
	// (address conflicts, settings); set once the leader is built.
	lead *leader.Leader
	// adminAddr is this node's row's admin address without gossip.
	adminAddr   string
	reapTimeout time.Duration
	// config is this node's applied config version and error (its own
	// row is fresher than its gossip).
	config func() (uint64, string)
}

// removedFromRaft reports whether m is a member a committed Raft
// configuration removed (tether remove, tether leave, the leader's reap)
// and gossip does not see alive: it left the cluster, whatever gossip last
// said of it. Every node holds the same committed removals, so every node
// says so. An alive member is back (the leader adds it again).
func (t *memberTable) removedFromRaft(m cluster.Member) bool {
	if m.State == cluster.StateAlive || m.ID == t.self {
		return false
	}
	_, removed := t.store.RemovedAt(m.ID)
	return removed
}

// forgetRemoved drops from the member table the members a committed
// configuration removed once they have been gone for --reap-timeout: they
// read "left" until then, on every node alike.
func (t *memberTable) forgetRemoved() {
	if t.members == nil {
		return
	}
	for _, m := range t.members.Members() {
		if t.removedFromRaft(m) && time.Since(m.Since) >= t.reapTimeout {
			t.members.Forget(m.ID)
		}
	}
}

// views joins gossip membership with the Raft configuration: a Raft
// server gossip does not know shows as dead, a member removed from Raft
// as left.
func (t *memberTable) views() []memberView {
	roles := map[string]string{}
	raftAddrs := map[string]string{}
	servers, err := t.store.Servers()
	if err == nil {
		for _, s := range servers {
			roles[s.ID] = "nonvoter"
			if s.Voter {
				roles[s.ID] = "voter"
			}
			raftAddrs[s.ID] = s.Address
		}
	}
	leader, _ := t.store.Leader()
	var gossip []cluster.Member
	if t.members != nil {
		gossip = t.members.Members()
	} else {
		gossip = []cluster.Member{{
			Meta:  cluster.Meta{ID: t.self, RaftAddr: t.store.Addr(), AdminAddr: t.adminAddr, Version: Version},
			State: "alive",
		}}
	}
	conflicts := t.lead.AddressConflicts(servers, gossip)
	out := make([]memberView, 0, len(gossip))
	seen := map[string]bool{}
	for _, m := range gossip {
		seen[m.ID] = true
		v := memberView{
			ID: m.ID, Address: m.Addr, State: string(m.State), Raft: "none",
			RaftAddress: m.RaftAddr, AdminAddress: m.AdminAddr, Version: m.Version,
			DurableIndex: m.Durable, Leader: m.ID == leader, Conflict: conflicts[m.ID],
			Settings:      t.lead.SettingsMismatch(m.Meta),
			ConfigVersion: m.ConfigVersion, ConfigError: m.ConfigError,
		}
		if m.ID == t.self {
			v.DurableIndex = t.store.DurableIndex()
			if t.config != nil {
				v.ConfigVersion, v.ConfigError = t.config()
			}
		}
		if r, ok := roles[m.ID]; ok {
			v.Raft = r
		} else if t.removedFromRaft(m) {
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
