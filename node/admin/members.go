package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/tether-proxy/tether/cluster"
)

// removeWait bounds how long a removal waits for an uncommitted removal
// of the same member to commit (as long as a leave waits).
const removeWait = 10 * time.Second

func (a *API) members(w http.ResponseWriter, r *http.Request) {
	SetIndex(w, a.Store.AppliedIndex())
	WriteJSON(w, http.StatusOK, map[string]any{"members": a.Node.Members()})
}

func (a *API) join(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Addresses []string `json:"addresses"`
	}
	if err := json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&req); err != nil {
		WriteError(w, http.StatusBadRequest, `body: want {"addresses": ["host:port", ...]}: `+err.Error())
		return
	}
	if len(req.Addresses) == 0 {
		WriteError(w, http.StatusBadRequest, `addresses: give at least one host[:port] to join`)
		return
	}
	joined, err := a.Node.Join(req.Addresses)
	if errors.As(err, new(Conflict)) {
		WriteError(w, http.StatusConflict, err.Error())
		return
	}
	if err != nil && joined == 0 {
		status := http.StatusBadGateway
		if errors.Is(err, cluster.ErrClusterMismatch) {
			status = http.StatusConflict
		}
		WriteError(w, status, fmt.Sprintf("joining %v failed: %v", req.Addresses, err))
		return
	}
	a.Log.Info("joined", "addresses", req.Addresses, "nodes", joined)
	WriteJSON(w, http.StatusOK, map[string]any{"joined": joined})
}

func (a *API) leave(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Force bool `json:"force"`
	}
	if err := json.NewDecoder(io.LimitReader(r.Body, 1<<16)).Decode(&req); err != nil && !errors.Is(err, io.EOF) {
		WriteError(w, http.StatusBadRequest, `body: want {"force": true|false} or none: `+err.Error())
		return
	}
	if v := r.URL.Query().Get("force"); v != "" {
		f, err := strconv.ParseBool(v)
		if err != nil {
			WriteError(w, http.StatusBadRequest, fmt.Sprintf("force=%q: want true or false", v))
			return
		}
		req.Force = req.Force || f
	}
	ctx, cancel := context.WithTimeout(r.Context(), 20*time.Second)
	defer cancel()
	stop, err := a.Node.Leave(ctx, req.Force, r.Header.Get("Authorization"))
	if err != nil {
		status := http.StatusGatewayTimeout
		if errors.As(err, new(Conflict)) {
			status = http.StatusConflict
		}
		WriteError(w, status, err.Error())
		return
	}
	WriteJSON(w, http.StatusOK, map[string]any{"node_id": a.NodeID, "left": true})
	// The node stops once the answer is out: a node that left serves on
	// as a proxy no more than memberlist lets it gossip.
	go stop()
}

func (a *API) remove(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if id == a.NodeID {
		WriteError(w, http.StatusConflict, "this node leads the cluster: run `tether leave` on it, or remove it from another node once leadership moved")
		return
	}
	// A removal is a Raft configuration change, not an FSM command: its
	// request id is bound in the request memory first, as every write's is.
	if _, err := a.Store.RecordRequest(RequestID(r), RequestBinding(r)); err != nil {
		a.Writes.WriteApplyError(w, "remove", err)
		return
	}
	servers, err := a.Store.Servers()
	if err != nil {
		a.Writes.WriteApplyError(w, "remove", err)
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
		idx, ok, err := a.Store.CommittedRemoval(id, removeWait)
		if err != nil {
			a.Writes.WriteApplyError(w, "remove", err)
			return
		}
		if ok {
			// Removed by a committed configuration (a retry whose first
			// try committed, under this leader or an earlier one, or a
			// second removal): the same answer. DELETE is idempotent.
			SetCommitted(w, idx)
			WriteJSON(w, http.StatusOK, map[string]any{"id": id, "removed": true})
			return
		}
		WriteError(w, http.StatusNotFound, fmt.Sprintf("no member %q in the Raft configuration", id))
		return
	}
	// A node gossip sees alive would be added back by the next round of
	// voter reconciliation: it must leave by itself.
	if a.Writes.Gossip != nil {
		for _, m := range a.Writes.Gossip.Members() {
			if m.ID == id && m.State == cluster.StateAlive {
				WriteError(w, http.StatusConflict, fmt.Sprintf("%s is alive: run `tether leave` on it (remove is for failed nodes)", id))
				return
			}
		}
	}
	if err := a.Store.RemoveServer(id); err != nil {
		a.Writes.WriteApplyError(w, "remove", err)
		return
	}
	// The configuration change is committed by now: a follower that
	// forwarded the removal answers once it applied this far. The member
	// reads "left" on every node from here.
	SetCommitted(w, a.Store.CommitIndex())
	a.Log.Info("member removed", "id", id)
	WriteJSON(w, http.StatusOK, map[string]any{"id": id, "removed": true})
}
