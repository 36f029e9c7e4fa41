package node

import (
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/tether-proxy/tether/keyring"
	"github.com/tether-proxy/tether/proxy"
)

// Version is the build's version, set by the linker (-X).
var Version = "dev"

func (n *Node) startAdmin() error {
	ln, err := net.Listen("tcp", n.cfg.AdminAddr)
	if err != nil {
		return fmt.Errorf("admin listener %s: %w", n.cfg.AdminAddr, err)
	}
	n.adminLn = ln
	if len(n.token) == 0 && !isLoopback(ln.Addr()) {
		n.log.Warn("the admin API listens beyond loopback without --admin-token-file: anyone who reaches " +
			ln.Addr().String() + " can rotate and revoke keys and drain destinations")
	}
	n.admin = &http.Server{
		Handler:           n.adminHandler(),
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          nil,
	}
	go func() {
		if err := n.admin.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			n.log.Error("admin listener stopped", "error", err)
		}
	}()
	return nil
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

	authed := http.NewServeMux()
	authed.Handle("GET /metrics", promhttp.HandlerFor(n.registry, promhttp.HandlerOpts{}))
	authed.HandleFunc("GET /v1/status", n.handleStatus)
	authed.HandleFunc("GET /v1/keyring", n.handleKeyringList)
	authed.HandleFunc("POST /v1/keyring/rotate", n.handleKeyringRotate)
	authed.HandleFunc("POST /v1/keyring/{id}/revoke", n.handleKeyringRevoke)
	authed.HandleFunc("GET /v1/clusters", n.handleClusters)
	authed.HandleFunc("GET /v1/clusters/{cluster}/destinations", n.handleDestinations)
	authed.HandleFunc("POST /v1/clusters/{cluster}/destinations/{id}/drain", n.handleDrain(true))
	authed.HandleFunc("DELETE /v1/clusters/{cluster}/destinations/{id}/drain", n.handleDrain(false))
	authed.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "no such endpoint: "+r.Method+" "+r.URL.Path)
	})
	mux.Handle("/", n.requireToken(authed))
	return mux
}

// requireToken enforces the bearer token when one is configured.
func (n *Node) requireToken(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
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
	if n.keys == nil || n.keys.ActiveKeyID(time.Now()) == "" {
		writeError(w, http.StatusServiceUnavailable, "no active key")
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"status": "ready"})
}

func (n *Node) handleStatus(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]any{
		"node_id":        n.cfg.NodeID,
		"version":        Version,
		"uptime_seconds": int64(time.Since(n.started).Seconds()),
		"members":        1,
		"active_key_id":  n.keys.ActiveKeyID(time.Now()),
		"clusters":       n.proxy.ClusterIDs(),
	})
}

func (n *Node) handleKeyringList(w http.ResponseWriter, r *http.Request) {
	now := time.Now()
	keys := n.keys.List(now)
	if keys == nil {
		keys = []keyring.Metadata{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"active_key_id": n.keys.ActiveKeyID(now), "keys": keys})
}

func (n *Node) handleKeyringRotate(w http.ResponseWriter, r *http.Request) {
	md, err := n.keys.Rotate(time.Now())
	if err != nil {
		n.log.Error("key rotation failed", "error", err)
		writeError(w, http.StatusInternalServerError, "key rotation failed")
		return
	}
	n.log.Info("key rotated", "id", md.ID)
	writeJSON(w, http.StatusOK, map[string]any{"id": md.ID})
}

func (n *Node) handleKeyringRevoke(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if err := n.revokeKey(id); err != nil {
		if errors.Is(err, keyring.ErrUnknownKey) {
			writeError(w, http.StatusNotFound, fmt.Sprintf("no key with id %q", id))
			return
		}
		n.log.Error("key revocation failed", "id", id, "error", err)
		writeError(w, http.StatusInternalServerError, "key revocation failed")
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"id": id, "state": "revoked", "active_key_id": n.keys.ActiveKeyID(time.Now())})
}

func (n *Node) handleClusters(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]any{"clusters": n.proxy.ClusterIDs()})
}

type destHealth struct {
	Local   string `json:"local"`
	Cluster string `json:"cluster"`
	Passive string `json:"passive"`
}

type destView struct {
	ID            string     `json:"id"`
	Address       string     `json:"address"`
	Health        destHealth `json:"health"`
	Probers       []string   `json:"probers"`
	Draining      bool       `json:"draining"`
	DrainDeadline *time.Time `json:"drain_deadline,omitempty"`
	Inflight      int64      `json:"inflight"`
	AffinityKey   string     `json:"affinity_key,omitempty"`
}

func (n *Node) handleDestinations(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("cluster")
	c := n.proxy.Cluster(id)
	if c == nil {
		writeError(w, http.StatusNotFound, fmt.Sprintf("no cluster %q", id))
		return
	}
	now := time.Now()
	probing := n.activeHealthEnabled(id)
	out := make([]destView, 0, len(c.Destinations))
	for _, d := range c.Destinations {
		v := destView{
			ID:       d.ID,
			Address:  d.Address.String(),
			Health:   destHealth{Local: d.LocalHealth().String(), Cluster: d.ActiveHealth().String(), Passive: "healthy"},
			Probers:  []string{},
			Inflight: d.Inflight(),
		}
		if d.AffinityKey != d.ID {
			v.AffinityKey = d.AffinityKey
		}
		if d.PassiveFailed(now) {
			v.Health.Passive = "unhealthy"
		}
		if probing {
			v.Probers = []string{n.cfg.NodeID}
		}
		if draining, deadline := d.Draining(); draining {
			v.Draining = true
			v.DrainDeadline = &deadline
		}
		out = append(out, v)
	}
	writeJSON(w, http.StatusOK, map[string]any{"cluster": id, "destinations": out})
}

func (n *Node) activeHealthEnabled(clusterID string) bool {
	n.reloadMu.Lock()
	defer n.reloadMu.Unlock()
	c := n.current.ReverseProxy.Clusters[clusterID]
	return c != nil && c.HealthCheck.Active.Enabled
}

func (n *Node) handleDrain(on bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		cluster, id := r.PathValue("cluster"), r.PathValue("id")
		deadline, err := n.proxy.SetDraining(cluster, id, on)
		if err != nil {
			if errors.Is(err, proxy.ErrNotFound) {
				writeError(w, http.StatusNotFound, fmt.Sprintf("no destination %q in cluster %q", id, cluster))
				return
			}
			writeError(w, http.StatusInternalServerError, err.Error())
			return
		}
		body := map[string]any{"cluster": cluster, "id": id, "draining": on}
		if on {
			body["drain_deadline"] = deadline
		}
		n.log.Info("drain changed", "cluster", cluster, "destination", id, "draining", on)
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
