package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strconv"
	"time"

	"github.com/tether-proxy/tether/cluster"
	adminapi "github.com/tether-proxy/tether/node/admin"
)

// memberView is one row of GET /v1/members.
type memberView struct {
	ID           string `json:"id"`
	Address      string `json:"address"`
	State        string `json:"state"`
	Raft         string `json:"raft"`
	RaftAddress  string `json:"raft_address,omitempty"`
	AdminAddress string `json:"admin_address,omitempty"`
	Version      string `json:"version,omitempty"`
	DurableIndex uint64 `json:"durable_index"`
	Leader       bool   `json:"leader"`
	Conflict     string `json:"conflict,omitempty"`          // its raft address is claimed by another node too
	Settings     string `json:"settings_mismatch,omitempty"` // its cluster flags differ from this node's
}

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

func (n *Node) handleMembers(w http.ResponseWriter, r *http.Request) {
	setIndex(w, n.store.AppliedIndex())
	adminapi.WriteJSON(w, http.StatusOK, map[string]any{"members": n.memberViews()})
}

func (n *Node) handleJoin(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Addresses []string `json:"addresses"`
	}
	if err := json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&req); err != nil {
		adminapi.WriteError(w, http.StatusBadRequest, `body: want {"addresses": ["host:port", ...]}: `+err.Error())
		return
	}
	if len(req.Addresses) == 0 {
		adminapi.WriteError(w, http.StatusBadRequest, `addresses: give at least one host[:port] to join`)
		return
	}
	if n.members == nil {
		adminapi.WriteError(w, http.StatusConflict, "this node runs alone without --cluster-secret-file and cannot join a cluster: restart it with the cluster's secret")
		return
	}
	joined, err := n.members.Join(req.Addresses)
	if err != nil && joined == 0 {
		status := http.StatusBadGateway
		if errors.Is(err, cluster.ErrClusterMismatch) {
			status = http.StatusConflict
		}
		adminapi.WriteError(w, status, fmt.Sprintf("joining %v failed: %v", req.Addresses, err))
		return
	}
	n.log.Info("joined", "addresses", req.Addresses, "nodes", joined)
	adminapi.WriteJSON(w, http.StatusOK, map[string]any{"joined": joined})
}

func (n *Node) handleLeave(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Force bool `json:"force"`
	}
	if err := json.NewDecoder(io.LimitReader(r.Body, 1<<16)).Decode(&req); err != nil && !errors.Is(err, io.EOF) {
		adminapi.WriteError(w, http.StatusBadRequest, `body: want {"force": true|false} or none: `+err.Error())
		return
	}
	if v := r.URL.Query().Get("force"); v != "" {
		f, err := strconv.ParseBool(v)
		if err != nil {
			adminapi.WriteError(w, http.StatusBadRequest, fmt.Sprintf("force=%q: want true or false", v))
			return
		}
		req.Force = req.Force || f
	}
	ctx, cancel := context.WithTimeout(r.Context(), 20*time.Second)
	defer cancel()
	if err := n.leave(ctx, req.Force, r.Header.Get("Authorization")); err != nil {
		status := http.StatusGatewayTimeout
		var refused *leaveRefused
		if errors.As(err, &refused) {
			status = http.StatusConflict
		}
		adminapi.WriteError(w, status, err.Error())
		return
	}
	adminapi.WriteJSON(w, http.StatusOK, map[string]any{"node_id": n.cfg.NodeID, "left": true})
	// The node stops once the answer is out: a node that left serves on
	// as a proxy no more than memberlist lets it gossip.
	go func() {
		n.failOnce.Do(func() { close(n.failed) })
	}()
}

func (n *Node) handleRemove(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if id == n.cfg.NodeID {
		adminapi.WriteError(w, http.StatusConflict, "this node leads the cluster: run `tether leave` on it, or remove it from another node once leadership moved")
		return
	}
	// A removal is a Raft configuration change, not an FSM command: its
	// request id is bound in the request memory first, as every write's is.
	if _, err := n.store.RecordRequest(requestID(r), requestBinding(r)); err != nil {
		n.writeApplyError(w, "remove", err)
		return
	}
	servers, err := n.store.Servers()
	if err != nil {
		n.writeApplyError(w, "remove", err)
		return
	}
	known := false
	for _, s := range servers {
		known = known || s.ID == id
	}
	if !known {
		// Not in raft's latest configuration, which may be a removal
		// still uncommitted (a retry while the first try waits for a
		// quorum): CommittedRemoval commits it first, so neither answer
		// below is given for a removal that may yet be lost.
		idx, ok, err := n.store.CommittedRemoval(id, leaveWait)
		if err != nil {
			n.writeApplyError(w, "remove", err)
			return
		}
		if ok {
			// Removed by a committed configuration (a retry whose first
			// try committed, under this leader or an earlier one, or a
			// second removal): the same answer. DELETE is idempotent.
			setCommitted(w, idx)
			adminapi.WriteJSON(w, http.StatusOK, map[string]any{"id": id, "removed": true})
			return
		}
		adminapi.WriteError(w, http.StatusNotFound, fmt.Sprintf("no member %q in the Raft configuration", id))
		return
	}
	// A node gossip sees alive would be added back by the next round of
	// voter reconciliation: it must leave by itself.
	if n.members != nil {
		for _, m := range n.members.Members() {
			if m.ID == id && m.State == cluster.StateAlive {
				adminapi.WriteError(w, http.StatusConflict, fmt.Sprintf("%s is alive: run `tether leave` on it (remove is for failed nodes)", id))
				return
			}
		}
	}
	if err := n.store.RemoveServer(id); err != nil {
		n.writeApplyError(w, "remove", err)
		return
	}
	// The configuration change is committed by now: a follower that
	// forwarded the removal answers once it applied this far. The member
	// reads "left" on every node from here (removedFromRaft).
	setCommitted(w, n.store.CommitIndex())
	n.log.Info("member removed", "id", id)
	adminapi.WriteJSON(w, http.StatusOK, map[string]any{"id": id, "removed": true})
}
