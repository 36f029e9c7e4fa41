package node

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/tether-proxy/tether/keyring"
	adminapi "github.com/tether-proxy/tether/node/admin"
	"github.com/tether-proxy/tether/store"
)

// Version is the build's version, set by the linker (-X).
var Version = "dev"

func (n *Node) listenAdmin() error {
	ln, err := net.Listen("tcp", n.cfg.AdminAddr)
	if err != nil {
		return fmt.Errorf("admin listener %s: %w", n.cfg.AdminAddr, err)
	}
	n.adminLn = ln
	if len(n.token) == 0 && !isLoopback(ln.Addr()) {
		n.log.Warn("the admin API listens beyond loopback without --admin-token-file: anyone who reaches " +
			ln.Addr().String() + " can rotate and revoke keys and drain destinations")
	}
	return nil
}

func (n *Node) serveAdmin() {
	n.admin = &http.Server{
		Handler:           n.adminHandler(),
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          nil,
	}
	go func() {
		if err := n.admin.Serve(n.adminLn); err != nil && !errors.Is(err, http.ErrServerClosed) {
			n.log.Error("admin listener stopped", "error", err)
		}
	}()
}

func isLoopback(a net.Addr) bool {
	ta, ok := a.(*net.TCPAddr)
	return ok && ta.IP.IsLoopback()
}

func (n *Node) adminHandler() http.Handler {
	names := []string{n.cfg.NodeID}
	if hn, err := os.Hostname(); err == nil {
		names = append(names, hn)
	}
	if adv := n.cfg.Advertise; adv != "" {
		if h, _, err := net.SplitHostPort(adv); err == nil {
			adv = h
		}
		names = append(names, adv)
	}
	return adminapi.Handler(adminapi.Config{Token: n.token, Names: names, AtIndex: n.atIndex, OnLeader: n.onLeader}, adminapi.Handlers{
		Ready:           n.handleReady,
		Metrics:         promhttp.HandlerFor(n.registry, promhttp.HandlerOpts{}),
		Status:          n.handleStatus,
		Members:         n.handleMembers,
		Events:          n.handleEvents,
		Join:            n.handleJoin,
		Leave:           n.handleLeave,
		Remove:          n.handleRemove,
		KeyringList:     n.handleKeyringList,
		KeyringRotate:   n.handleKeyringRotate,
		KeyringRevoke:   n.handleKeyringRevoke,
		SecretsList:     n.handleSecretsList,
		SecretInstall:   n.handleSecret(store.SecretInstall),
		SecretUse:       n.handleSecret(store.SecretUse),
		SecretRemove:    n.handleSecret(store.SecretRemove),
		SnapshotSave:    n.handleSnapshotSave,
		SnapshotRestore: n.handleSnapshotRestore,
		Clusters:        n.handleClusters,
		Destinations:    n.handleDestinations,
		Drain:           n.handleDrain(true),
		Undrain:         n.handleDrain(false),
	})
}

func (n *Node) handleReady(w http.ResponseWriter, r *http.Request) {
	if why := n.NotReady(); why != "" {
		adminapi.WriteError(w, http.StatusServiceUnavailable, why)
		return
	}
	if idx, need := n.store.Stopped(); idx != 0 { // its state falls behind the cluster's
		adminapi.WriteError(w, http.StatusServiceUnavailable, need)
		return
	}
	body := map[string]any{"status": "ready"}
	if warn := n.storeWarnings(); len(warn) > 0 {
		body["warnings"] = warn
	}
	adminapi.WriteJSON(w, http.StatusOK, body)
}

// readWaitMax bounds how long a read waits for this node to apply the
// index it asks for.
const readWaitMax = 10 * time.Second

// atIndex runs a read once this node has applied the index the client asks
// for: the X-Tether-Index of an earlier answer, sent back as the request
// header X-Tether-Index or as ?index=N (the larger when both). So a client
// reads its own writes, and never goes back in time, on any node. A node
// that does not reach it within readWaitMax (or the request's own end)
// answers 503 with its applied index. Every read answer carries
// X-Tether-Index: the applied index it reflects.
func (n *Node) atIndex(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var want uint64
		for _, v := range []string{r.Header.Get(hdrIndex), r.URL.Query().Get("index")} {
			if v == "" {
				continue
			}
			i, err := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
			if err != nil {
				adminapi.WriteError(w, http.StatusBadRequest, fmt.Sprintf("index %q: want a Raft index (a non-negative integer, as X-Tether-Index answers)", v))
				return
			}
			want = max(want, i)
		}
		if want > 0 {
			wait := cmp.Or(n.readWait, readWaitMax)
			ctx, cancel := context.WithTimeout(r.Context(), wait)
			err := n.store.WaitApplied(ctx, want)
			cancel()
			if err != nil {
				applied := n.store.AppliedIndex()
				setIndex(w, applied)
				w.Header().Set("Retry-After", "1")
				adminapi.WriteJSON(w, http.StatusServiceUnavailable, map[string]any{
					"error":         fmt.Sprintf("this node has applied up to index %d, not index %d asked for (waited up to %s): read from another node, or retry: %v", applied, want, wait, err),
					"applied_index": applied,
					"index":         want,
				})
				return
			}
		}
		h(w, r)
	}
}

// setIndex marks a read's answer with the applied index it reflects.
func setIndex(w http.ResponseWriter, index uint64) {
	w.Header().Set(hdrIndex, strconv.FormatUint(index, 10))
}

func (n *Node) handleStatus(w http.ResponseWriter, r *http.Request) {
	applied := n.store.AppliedIndex()
	setIndex(w, applied)
	leader, _ := n.store.Leader()
	// The term is read before the state (elements evaluate in order): a
	// node seen as Leader led in that term or a later one.
	adminapi.WriteJSON(w, http.StatusOK, map[string]any{
		"node_id":        n.cfg.NodeID,
		"version":        Version,
		"uptime_seconds": int64(time.Since(n.started).Seconds()),
		"term":           n.store.Term(),
		"raft_state":     n.store.State(),
		"leader_id":      leader,
		"applied_index":  applied,
		"commit_index":   n.store.CommitIndex(),
		"durable_index":  n.store.DurableIndex(),
		"cluster_id":     n.store.ClusterID(),
		"members":        len(n.memberViews()),
		"active_key_id":  n.ring.ActiveKeyID(time.Now()),
		"clusters":       n.proxy.ClusterIDs(),
		"acme":           n.lead.AcmeView().Statuses(),
	})
}

func (n *Node) handleKeyringList(w http.ResponseWriter, r *http.Request) {
	now := time.Now()
	var mds []keyring.Metadata
	var active string
	n.store.ReadState(func(index uint64, _ []store.Drain) {
		setIndex(w, index)
		mds, active = n.ring.List(now), n.ring.ActiveKeyID(now)
	})
	adminapi.WriteJSON(w, http.StatusOK, map[string]any{"active_key_id": active, "keys": n.lead.KeyViews(mds, now)})
}

func (n *Node) handleKeyringRotate(w http.ResponseWriter, r *http.Request) {
	md, index, err := n.lead.RotateNow(requestID(r), requestBinding(r))
	if err != nil {
		n.writeApplyError(w, "key rotation", err)
		return
	}
	setCommitted(w, index)
	adminapi.WriteJSON(w, http.StatusOK, map[string]any{"id": md.ID, "state": md.State})
}

func (n *Node) handleKeyringRevoke(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	res, err := n.lead.Revoke(r.Context(), id, requestID(r), requestBinding(r))
	if err != nil {
		if errors.Is(err, keyring.ErrUnknownKey) {
			adminapi.WriteError(w, http.StatusNotFound, fmt.Sprintf("no key with id %q", id))
			return
		}
		n.writeApplyError(w, "key revocation", err)
		return
	}
	n.log.Info("key revoked", "id", id, "active_key_id", res.Active, "replacement_id", res.Replacement)
	setCommitted(w, res.Index)
	body := map[string]any{"id": id, "state": "revoked", "active_key_id": res.Active}
	if res.Replacement != "" {
		body["replacement_id"] = res.Replacement
	}
	if len(res.PassedOver) > 0 {
		body["passed_over"] = res.PassedOver
	}
	adminapi.WriteJSON(w, http.StatusOK, body)
}

func (n *Node) handleClusters(w http.ResponseWriter, r *http.Request) {
	setIndex(w, n.store.AppliedIndex())
	adminapi.WriteJSON(w, http.StatusOK, map[string]any{"clusters": n.proxy.ClusterIDs()})
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
	Verdicts    []proberVerdict `json:"verdicts"`
	AffinityKey string          `json:"affinity_key,omitempty"`
	// RequestsTotal and RequestsPerSecond are this node's traffic to the
	// destination (the rate between its last two samples, events.go).
	RequestsTotal     uint64  `json:"requests_total"`
	RequestsPerSecond float64 `json:"requests_per_second"`
}

type proberVerdict struct {
	Node    string    `json:"node"`
	Verdict string    `json:"verdict"`
	At      time.Time `json:"at"`
}

func (n *Node) handleDestinations(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("cluster")
	c := n.proxy.Cluster(id)
	if c == nil {
		adminapi.WriteError(w, http.StatusNotFound, fmt.Sprintf("no cluster %q", id))
		return
	}
	now := time.Now()
	// The drain state shown is the replicated one at the index answered
	// (the data path applies it a moment later; a drain's answer waits
	// for that).
	drains := map[string]time.Time{}
	n.store.ReadState(func(index uint64, ds []store.Drain) {
		setIndex(w, index)
		for _, d := range ds {
			if d.Cluster == id {
				drains[d.Destination] = d.Deadline
			}
		}
	})
	requests, affinity := n.trafficTotals()
	rates := n.sampleRates(now, requests)
	probing := n.activeHealthEnabled(id)
	out := make([]destView, 0, len(c.Destinations))
	for _, d := range c.Destinations {
		v := destView{
			ID:       d.ID,
			Address:  d.Address.String(),
			Health:   destHealth{Local: d.LocalHealth().String(), Cluster: d.ActiveHealth().String(), Passive: "healthy"},
			Probers:  []string{},
			Inflight: d.Inflight(),
			Verdicts: []proberVerdict{},

			RequestsTotal:     uint64(requests[id+"/"+d.ID]),
			RequestsPerSecond: roundRate(rates[id+"/"+d.ID]),
		}
		if d.AffinityKey != d.ID {
			v.AffinityKey = d.AffinityKey
		}
		if d.PassiveFailed(now) {
			v.Health.Passive = "unhealthy"
		}
		switch {
		case probing && n.health != nil:
			sh := n.health
			v.Probers = sh.gossip.Probers(id, d.ID, sh.fanoutOf(id))
			for _, pv := range sh.gossip.Verdicts(id, d.ID) {
				v.Verdicts = append(v.Verdicts, proberVerdict{Node: pv.Node, Verdict: fromVerdict(pv.Verdict).String(), At: pv.At})
			}
		case probing:
			v.Probers = []string{n.cfg.NodeID}
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
	adminapi.WriteJSON(w, http.StatusOK, map[string]any{"cluster": id, "destinations": out, "affinity": affinityView(affinity[id])})
}

// drainState is a drain's state at now: "draining" until its deadline,
// "drained" from it on (until the drain is undone).
func drainState(deadline, now time.Time) string {
	if now.Before(deadline) {
		return "draining"
	}
	return "drained"
}

func (n *Node) activeHealthEnabled(clusterID string) bool {
	n.reloadMu.Lock()
	defer n.reloadMu.Unlock()
	c := n.current.ReverseProxy.Clusters[clusterID]
	return c != nil && c.HealthCheck.Active.Enabled
}

func (n *Node) handleDrain(on bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		clusterID, id := r.PathValue("cluster"), r.PathValue("id")
		timeout, err := n.proxy.DrainTimeout(clusterID, id)
		if err != nil {
			adminapi.WriteError(w, http.StatusNotFound, fmt.Sprintf("no destination %q in cluster %q", id, clusterID))
			return
		}
		body := map[string]any{"cluster": clusterID, "id": id, "draining": on}
		c, err := n.lead.Drain(on, clusterID, id, timeout, requestID(r), requestBinding(r))
		if err != nil {
			n.writeApplyError(w, "drain change", err)
			return
		}
		if on {
			// A retry answers with the deadline the first try committed.
			deadline, err := time.Parse(time.RFC3339Nano, c.Value)
			if err != nil {
				n.writeApplyError(w, "drain change", fmt.Errorf("the committed drain carries no deadline (%q)", c.Value))
				return
			}
			body["drain_deadline"] = deadline
		}
		n.applyDrains()
		// Answered once every live node applies it (confirm.go): a node a
		// moment behind would still send new sessions to the destination.
		applied, pending := n.confirmApplied(r.Context(), c.Index, applyConfirmWait)
		body["applied_by"], body["not_applied_by"] = applied, append([]string{}, pending...)
		if len(pending) > 0 {
			what, until := "drain", "send new sessions to"
			if !on {
				what, until = "undrain", "keep new sessions from"
			}
			body["warning"] = fmt.Sprintf("the %s is committed, but %s had not applied it within %s: until they do they may still %s %s", what, strings.Join(pending, ", "), applyConfirmWait, until, id)
			n.log.Warn("drain changed, but not every live node applied it in time", "cluster", clusterID, "destination", id, "draining", on, "not_applied_by", pending, "within", applyConfirmWait)
		} else {
			n.log.Info("drain changed", "cluster", clusterID, "destination", id, "draining", on, "applied_by", applied)
		}
		setCommitted(w, c.Index)
		adminapi.WriteJSON(w, http.StatusOK, body)
	}
}
