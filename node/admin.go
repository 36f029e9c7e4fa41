package node

import (
	"cmp"
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/tether-proxy/tether/keyring"
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
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]any{"status": "ok"})
	})
	mux.HandleFunc("GET /readyz", n.handleReady)
	// The cluster page (ui.go) holds no data: it is served without the
	// token and asks for it.
	mux.Handle("GET /ui/", uiHandler())
	mux.Handle("GET /ui", http.RedirectHandler("/ui/", http.StatusMovedPermanently))
	mux.Handle("GET /{$}", http.RedirectHandler("/ui/", http.StatusFound))

	authed := http.NewServeMux()
	authed.Handle("GET /metrics", promhttp.HandlerFor(n.registry, promhttp.HandlerOpts{}))
	authed.HandleFunc("GET /v1/status", n.atIndex(n.handleStatus))
	authed.HandleFunc("GET /v1/members", n.atIndex(n.handleMembers))
	authed.HandleFunc("GET /v1/events", n.handleEvents)
	authed.HandleFunc("POST /v1/join", n.sameSite(n.handleJoin))
	authed.HandleFunc("POST /v1/leave", n.sameSite(n.handleLeave))
	authed.HandleFunc("DELETE /v1/members/{id}", n.sameSite(n.onLeader(n.handleRemove)))
	authed.HandleFunc("GET /v1/keyring", n.atIndex(n.handleKeyringList))
	authed.HandleFunc("POST /v1/keyring/rotate", n.sameSite(n.onLeader(n.handleKeyringRotate)))
	authed.HandleFunc("POST /v1/keyring/{id}/revoke", n.sameSite(n.onLeader(n.handleKeyringRevoke)))
	authed.HandleFunc("GET /v1/secrets", n.atIndex(n.handleSecretsList))
	authed.HandleFunc("POST /v1/secrets/install", n.sameSite(n.handleSecret(store.SecretInstall)))
	authed.HandleFunc("POST /v1/secrets/use", n.sameSite(n.handleSecret(store.SecretUse)))
	authed.HandleFunc("POST /v1/secrets/remove", n.sameSite(n.handleSecret(store.SecretRemove)))
	authed.HandleFunc("GET /v1/snapshot", n.handleSnapshotSave)
	authed.HandleFunc("POST /v1/snapshot/restore", n.sameSite(n.onLeader(n.handleSnapshotRestore)))
	authed.HandleFunc("GET /v1/clusters", n.atIndex(n.handleClusters))
	authed.HandleFunc("GET /v1/clusters/{cluster}/destinations", n.atIndex(n.handleDestinations))
	authed.HandleFunc("POST /v1/clusters/{cluster}/destinations/{id}/drain", n.sameSite(n.onLeader(n.handleDrain(true))))
	authed.HandleFunc("DELETE /v1/clusters/{cluster}/destinations/{id}/drain", n.sameSite(n.onLeader(n.handleDrain(false))))
	authed.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "no such endpoint: "+r.Method+" "+r.URL.Path)
	})
	mux.Handle("/", n.requireToken(authed))
	return mux
}

// requireToken enforces the bearer token when one is configured. Without
// one, reads get the writes' Host/Origin rule (sameSite): a web page must
// not read members, keys or metrics through a DNS name rebound to the admin
// address (README.md, "Admin API and client commands").
func (n *Node) requireToken(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if len(n.token) == 0 {
			if err := n.checkSameSite(r); err != nil {
				writeError(w, http.StatusForbidden, err.Error())
				return
			}
		}
		if len(n.token) > 0 {
			got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
			if !ok || subtle.ConstantTimeCompare([]byte(strings.TrimSpace(got)), n.token) != 1 {
				w.Header().Set("WWW-Authenticate", `Bearer realm="tether"`)
				writeError(w, http.StatusUnauthorized, "missing or wrong bearer token")
				return
			}
		}
		h.ServeHTTP(w, r)
	})
}

func (n *Node) handleReady(w http.ResponseWriter, r *http.Request) {
	if why := n.NotReady(); why != "" {
		writeError(w, http.StatusServiceUnavailable, why)
		return
	}
	if idx, need := n.store.Stopped(); idx != 0 { // its state falls behind the cluster's
		writeError(w, http.StatusServiceUnavailable, need)
		return
	}
	body := map[string]any{"status": "ready"}
	if warn := n.storeWarnings(); len(warn) > 0 {
		body["warnings"] = warn
	}
	writeJSON(w, http.StatusOK, body)
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
				writeError(w, http.StatusBadRequest, fmt.Sprintf("index %q: want a Raft index (a non-negative integer, as X-Tether-Index answers)", v))
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
				writeJSON(w, http.StatusServiceUnavailable, map[string]any{
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
	writeJSON(w, http.StatusOK, map[string]any{
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
		"acme":           n.acmeView.statuses(),
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
	writeJSON(w, http.StatusOK, map[string]any{"active_key_id": active, "keys": n.keyViewsOf(mds, now)})
}

func (n *Node) handleKeyringRotate(w http.ResponseWriter, r *http.Request) {
	if !n.caughtUp() {
		n.writeApplyError(w, "key rotation", errBehind)
		return
	}
	if err := n.store.CheckRequest(requestID(r), requestBinding(r)); err != nil {
		n.writeApplyError(w, "key rotation", err)
		return
	}
	now, _ := n.clusterNow()
	at, err := n.commitTime(now)
	if err != nil {
		n.writeApplyError(w, "key rotation", err)
		return
	}
	md, index, err := n.rotate(at, requestID(r), requestBinding(r))
	if err != nil {
		n.writeApplyError(w, "key rotation", err)
		return
	}
	setCommitted(w, index)
	writeJSON(w, http.StatusOK, map[string]any{"id": md.ID, "state": md.State})
}

func (n *Node) handleKeyringRevoke(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	now, _ := n.clusterNow()
	at, err := n.commitTime(now)
	if err != nil {
		n.writeApplyError(w, "key revocation", err)
		return
	}
	res, err := n.revoke(r.Context(), at, id, requestID(r), requestBinding(r))
	if err != nil {
		if errors.Is(err, keyring.ErrUnknownKey) {
			writeError(w, http.StatusNotFound, fmt.Sprintf("no key with id %q", id))
			return
		}
		n.writeApplyError(w, "key revocation", err)
		return
	}
	n.log.Info("key revoked", "id", id, "active_key_id", res.active, "replacement_id", res.replacement)
	setCommitted(w, res.index)
	body := map[string]any{"id": id, "state": "revoked", "active_key_id": res.active}
	if res.replacement != "" {
		body["replacement_id"] = res.replacement
	}
	if len(res.passedOver) > 0 {
		body["passed_over"] = res.passedOver
	}
	writeJSON(w, http.StatusOK, body)
}

func (n *Node) handleClusters(w http.ResponseWriter, r *http.Request) {
	setIndex(w, n.store.AppliedIndex())
	writeJSON(w, http.StatusOK, map[string]any{"clusters": n.proxy.ClusterIDs()})
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
		writeError(w, http.StatusNotFound, fmt.Sprintf("no cluster %q", id))
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
	writeJSON(w, http.StatusOK, map[string]any{"cluster": id, "destinations": out, "affinity": affinityView(affinity[id])})
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
			writeError(w, http.StatusNotFound, fmt.Sprintf("no destination %q in cluster %q", id, clusterID))
			return
		}
		body := map[string]any{"cluster": clusterID, "id": id, "draining": on}
		var cmd store.Command = store.ClearDrain{ReqID: requestID(r), Cluster: clusterID, Destination: id}
		if on {
			// The leader picks the absolute deadline, so every node ends
			// the drain at the same moment; it counts from the cluster
			// time, which no one node's clock moves.
			now, _ := n.clusterNow()
			cmd = store.SetDrain{ReqID: requestID(r), Cluster: clusterID, Destination: id, Deadline: now.Add(timeout).UTC()}
		}
		c, err := n.store.CommitRequest(cmd, requestBinding(r))
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
		writeJSON(w, http.StatusOK, body)
	}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

func writeError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, map[string]string{"error": msg})
}
