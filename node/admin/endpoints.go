package admin

import (
	"bytes"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/tether-proxy/tether/keyring"
	"github.com/tether-proxy/tether/store"
)

// ConfirmWait bounds how long a drain waits for the live members to
// confirm they applied it.
const ConfirmWait = 2 * time.Second

// restoreTimeout bounds a restore through Raft (the leader writes the
// state, followers install it as a snapshot).
const restoreTimeout = 30 * time.Second

func (a *API) ready(w http.ResponseWriter, r *http.Request) {
	if why := a.Node.NotReady(); why != "" {
		WriteError(w, http.StatusServiceUnavailable, why)
		return
	}
	if idx, need := a.Store.Stopped(); idx != 0 { // its state falls behind the cluster's
		WriteError(w, http.StatusServiceUnavailable, need)
		return
	}
	body := map[string]any{"status": "ready"}
	if warn := a.Node.Warnings(); len(warn) > 0 {
		body["warnings"] = warn
	}
	WriteJSON(w, http.StatusOK, body)
}

func (a *API) status(w http.ResponseWriter, r *http.Request) {
	applied := a.Store.AppliedIndex()
	SetIndex(w, applied)
	leader, _ := a.Store.Leader()
	// The term is read before the state (elements evaluate in order): a
	// node seen as Leader led in that term or a later one.
	WriteJSON(w, http.StatusOK, map[string]any{
		"node_id":        a.NodeID,
		"version":        a.Version,
		"uptime_seconds": int64(time.Since(a.Started).Seconds()),
		"term":           a.Store.Term(),
		"raft_state":     a.Store.State(),
		"leader_id":      leader,
		"applied_index":  applied,
		"commit_index":   a.Store.CommitIndex(),
		"durable_index":  a.Store.DurableIndex(),
		"cluster_id":     a.Store.ClusterID(),
		"members":        len(a.Node.Members()),
		"active_key_id":  a.Node.ActiveKeyID(time.Now()),
		"clusters":       a.Proxy.ClusterIDs(),
		"acme":           a.Node.Acme(),
		"config_version": a.configStatus(),
	})
}

func (a *API) keyringList(w http.ResponseWriter, r *http.Request) {
	index, active, keys := a.Node.Keys(time.Now())
	SetIndex(w, index)
	WriteJSON(w, http.StatusOK, map[string]any{"active_key_id": active, "keys": keys})
}

func (a *API) keyringRotate(w http.ResponseWriter, r *http.Request) {
	md, index, err := a.Node.Rotate(RequestID(r), RequestBinding(r))
	if err != nil {
		a.Writes.WriteApplyError(w, "key rotation", err)
		return
	}
	SetCommitted(w, index)
	WriteJSON(w, http.StatusOK, map[string]any{"id": md.ID, "state": md.State})
}

func (a *API) keyringRevoke(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	res, err := a.Node.Revoke(r.Context(), id, RequestID(r), RequestBinding(r))
	if err != nil {
		if errors.Is(err, keyring.ErrUnknownKey) {
			WriteError(w, http.StatusNotFound, fmt.Sprintf("no key with id %q", id))
			return
		}
		a.Writes.WriteApplyError(w, "key revocation", err)
		return
	}
	a.Log.Info("key revoked", "id", id, "active_key_id", res.Active, "replacement_id", res.Replacement)
	SetCommitted(w, res.Index)
	body := map[string]any{"id": id, "state": "revoked", "active_key_id": res.Active}
	if res.Replacement != "" {
		body["replacement_id"] = res.Replacement
	}
	if len(res.PassedOver) > 0 {
		body["passed_over"] = res.PassedOver
	}
	WriteJSON(w, http.StatusOK, body)
}

func (a *API) clusters(w http.ResponseWriter, r *http.Request) {
	SetIndex(w, a.Store.AppliedIndex())
	WriteJSON(w, http.StatusOK, map[string]any{"clusters": a.Proxy.ClusterIDs()})
}

type destHealth struct {
	Local   string `json:"local"`
	Cluster string `json:"cluster"`
	Passive string `json:"passive"`
}

type destView struct {
	ID      string     `json:"id"`
	Address string     `json:"address"`
	Health  destHealth `json:"health"`
	Probers []string   `json:"probers"`
	// Draining: the destination takes no new sessions and its sessions
	// keep going to it until DrainDeadline. Past the deadline it is
	// drained (DrainState "drained", DrainedSince the deadline): it takes
	// no traffic at all until it is undrained.
	Draining      bool       `json:"draining"`
	DrainState    string     `json:"drain_state"` // "none", "draining" or "drained"
	DrainDeadline *time.Time `json:"drain_deadline,omitempty"`
	DrainedSince  *time.Time `json:"drained_since,omitempty"`
	Inflight      int64      `json:"inflight"`
	// Verdicts are the probers' latest verdicts as gossip brought them.
	Verdicts    []ProberVerdict `json:"verdicts"`
	AffinityKey string          `json:"affinity_key,omitempty"`
	// RequestsTotal and RequestsPerSecond are this node's traffic to the
	// destination (the rate between its last two samples, watch.go).
	RequestsTotal     uint64  `json:"requests_total"`
	RequestsPerSecond float64 `json:"requests_per_second"`
}

// ProberVerdict is a prober's latest verdict on a destination.
type ProberVerdict struct {
	Node    string    `json:"node"`
	Verdict string    `json:"verdict"`
	At      time.Time `json:"at"`
}

func (a *API) destinations(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("cluster")
	c := a.Proxy.Cluster(id)
	if c == nil {
		WriteError(w, http.StatusNotFound, fmt.Sprintf("no cluster %q", id))
		return
	}
	now := time.Now()
	// The drain state shown is the replicated one at the index answered
	// (the data path applies it a moment later; a drain's answer waits
	// for that).
	drains := map[string]time.Time{}
	a.Store.ReadState(func(index uint64, ds []store.Drain) {
		SetIndex(w, index)
		for _, d := range ds {
			if d.Cluster == id {
				drains[d.Destination] = d.Deadline
			}
		}
	})
	requests, affinity := a.trafficTotals()
	rates := a.sampleRates(now, requests)
	probers := a.Node.Probers(id)
	out := make([]destView, 0, len(c.Destinations))
	for _, d := range c.Destinations {
		v := destView{
			ID:       d.ID,
			Address:  d.Address.String(),
			Health:   destHealth{Local: d.LocalHealth().String(), Cluster: d.ActiveHealth().String(), Passive: "healthy"},
			Probers:  []string{},
			Inflight: d.Inflight(),
			Verdicts: []ProberVerdict{},

			RequestsTotal:     uint64(requests[id+"/"+d.ID]),
			RequestsPerSecond: roundRate(rates[id+"/"+d.ID]),
		}
		if d.AffinityKey != d.ID {
			v.AffinityKey = d.AffinityKey
		}
		if d.PassiveFailed(now) {
			v.Health.Passive = "unhealthy"
		}
		if probers != nil {
			p, verdicts := probers(d.ID)
			v.Probers = p
			v.Verdicts = append(v.Verdicts, verdicts...)
		}
		v.DrainState = "none"
		if deadline, on := drains[d.ID]; on {
			v.DrainState = drainState(deadline, now)
			if v.DrainState == "draining" {
				v.Draining = true
				v.DrainDeadline = &deadline
			} else {
				v.DrainedSince = &deadline
			}
		}
		out = append(out, v)
	}
	WriteJSON(w, http.StatusOK, map[string]any{"cluster": id, "destinations": out, "affinity": affinityView(affinity[id])})
}

// drainState is a drain's state at now: "draining" until its deadline,
// "drained" from it on (until the drain is undone).
func drainState(deadline, now time.Time) string {
	if now.Before(deadline) {
		return "draining"
	}
	return "drained"
}

func (a *API) drain(on bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		clusterID, id := r.PathValue("cluster"), r.PathValue("id")
		timeout, err := a.Proxy.DrainTimeout(clusterID, id)
		if err != nil {
			WriteError(w, http.StatusNotFound, fmt.Sprintf("no destination %q in cluster %q", id, clusterID))
			return
		}
		body := map[string]any{"cluster": clusterID, "id": id, "draining": on}
		var cmd store.Command = store.ClearDrain{ReqID: RequestID(r), Cluster: clusterID, Destination: id}
		if on {
			// The leader picks the absolute deadline, so every node ends
			// the drain at the same moment; it counts from the cluster
			// time, which no one node's clock moves.
			now, err := a.Node.ClusterNow()
			if err != nil {
				a.Writes.WriteApplyError(w, "drain change", err)
				return
			}
			cmd = store.SetDrain{ReqID: RequestID(r), Cluster: clusterID, Destination: id, Deadline: now.Add(timeout).UTC()}
		}
		c, err := a.Store.CommitRequest(cmd, RequestBinding(r))
		if err != nil {
			a.Writes.WriteApplyError(w, "drain change", err)
			return
		}
		if on {
			// A retry answers with the deadline the first try committed.
			deadline, err := time.Parse(time.RFC3339Nano, c.Value)
			if err != nil {
				a.Writes.WriteApplyError(w, "drain change", fmt.Errorf("the committed drain carries no deadline (%q)", c.Value))
				return
			}
			body["drain_deadline"] = deadline
		}
		a.Node.ApplyDrains()
		// Answered once every live node applies it: a node a moment
		// behind would still send new sessions to the destination.
		applied, pending := a.Node.ConfirmApplied(r.Context(), c.Index, ConfirmWait)
		body["applied_by"], body["not_applied_by"] = applied, append([]string{}, pending...)
		if len(pending) > 0 {
			what, until := "drain", "send new sessions to"
			if !on {
				what, until = "undrain", "keep new sessions from"
			}
			body["warning"] = fmt.Sprintf("the %s is committed, but %s had not applied it within %s: until they do they may still %s %s", what, strings.Join(pending, ", "), ConfirmWait, until, id)
			a.Log.Warn("drain changed, but not every live node applied it in time", "cluster", clusterID, "destination", id, "draining", on, "not_applied_by", pending, "within", ConfirmWait)
		} else {
			a.Log.Info("drain changed", "cluster", clusterID, "destination", id, "draining", on, "applied_by", applied)
		}
		SetCommitted(w, c.Index)
		WriteJSON(w, http.StatusOK, body)
	}
}

// snapshotSave answers GET /v1/snapshot with a backup of the replicated
// state as this node has applied it (keys wrapped with the cluster
// secret's key-encryption key).
func (a *API) snapshotSave(w http.ResponseWriter, r *http.Request) {
	var buf bytes.Buffer
	info, err := a.Store.SaveBackup(&buf, time.Now())
	if err != nil {
		WriteError(w, http.StatusServiceUnavailable, "snapshot: "+err.Error())
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Disposition", fmt.Sprintf(`attachment; filename="tether-%s-%d.snapshot"`, a.NodeID, info.Index))
	w.Write(buf.Bytes())
}

// snapshotRestore answers POST /v1/snapshot/restore (on the leader): the
// body, a backup, replaces the keyring, drains and ACME state of the whole
// cluster once it is authenticated with this cluster's secret and checked
// against the cluster's time. The answer says what the decoded state held
// and which keys the running cluster revoked stay revoked.
func (a *API) snapshotRestore(w http.ResponseWriter, r *http.Request) {
	now, err := a.Node.ClusterNow()
	if err != nil {
		a.Writes.WriteApplyError(w, "restore", err)
		return
	}
	res, err := a.Store.RestoreBackup(r.Body, now, restoreTimeout)
	if errors.Is(err, store.ErrBackup) {
		WriteError(w, http.StatusUnprocessableEntity, err.Error())
		return
	}
	if err != nil {
		a.Writes.WriteApplyError(w, "restore", err)
		return
	}
	a.Node.ApplyDrains()
	// The restored state is applied here from this index on: a follower
	// that forwarded the restore answers once it installed it too.
	SetCommitted(w, a.Store.AppliedIndex())
	WriteJSON(w, http.StatusOK, map[string]any{"restored": res.BackupInfo, "kept_revoked": nonNil(res.KeptRevoked),
		"kept_keys": nonNil(res.KeptKeys), "active_key_id": a.Node.ActiveKeyID(time.Now())})
}

// nonNil is l, or an empty list for JSON's sake.
func nonNil(l []string) []string {
	if l == nil {
		return []string{}
	}
	return l
}
