package admin

import (
	"crypto/subtle"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
)

// Handlers are the node's endpoints, one per route.
type Handlers struct {
	Ready           http.HandlerFunc // GET /readyz
	Metrics         http.Handler     // GET /metrics
	Status          http.HandlerFunc // GET /v1/status
	Members         http.HandlerFunc // GET /v1/members
	Events          http.HandlerFunc // GET /v1/events
	Join            http.HandlerFunc // POST /v1/join
	Leave           http.HandlerFunc // POST /v1/leave
	Remove          http.HandlerFunc // DELETE /v1/members/{id}
	KeyringList     http.HandlerFunc // GET /v1/keyring
	KeyringRotate   http.HandlerFunc // POST /v1/keyring/rotate
	KeyringRevoke   http.HandlerFunc // POST /v1/keyring/{id}/revoke
	SecretsList     http.HandlerFunc // GET /v1/secrets
	SecretInstall   http.HandlerFunc // POST /v1/secrets/install
	SecretUse       http.HandlerFunc // POST /v1/secrets/use
	SecretRemove    http.HandlerFunc // POST /v1/secrets/remove
	SnapshotSave    http.HandlerFunc // GET /v1/snapshot
	SnapshotRestore http.HandlerFunc // POST /v1/snapshot/restore
	Clusters        http.HandlerFunc // GET /v1/clusters
	Destinations    http.HandlerFunc // GET /v1/clusters/{cluster}/destinations
	Drain           http.HandlerFunc // POST /v1/clusters/{cluster}/destinations/{id}/drain
	Undrain         http.HandlerFunc // DELETE /v1/clusters/{cluster}/destinations/{id}/drain
	ConfigGet       http.HandlerFunc // GET /v1/config
	ConfigPush      http.HandlerFunc // PUT /v1/config
	ConfigHistory   http.HandlerFunc // GET /v1/config/history
	ConfigVersion   http.HandlerFunc // GET /v1/config/versions/{n}
	ConfigRollback  http.HandlerFunc // POST /v1/config/rollback
}

// Config is what the routes need from the node besides its handlers.
type Config struct {
	// Token is the bearer token every route but /healthz, /readyz and
	// the page requires; empty: none (reads then follow the same-site
	// rule too).
	Token []byte
	// Names are the host names, besides IP addresses and localhost, the
	// API answers to: the node's id, its host name, its advertised host.
	Names []string
	// AtIndex makes a read wait for the index the client asks for.
	AtIndex func(http.HandlerFunc) http.HandlerFunc
	// OnLeader runs a write on the leader (forwarding it when needed).
	OnLeader func(http.HandlerFunc) http.HandlerFunc
}

// Handler is the admin API: the routes behind their guards.
func Handler(cfg Config, h Handlers) http.Handler {
	g := guard{token: cfg.Token, names: cfg.Names}
	at, lead, same := cfg.AtIndex, cfg.OnLeader, g.sameSite
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		WriteJSON(w, http.StatusOK, map[string]any{"status": "ok"})
	})
	mux.HandleFunc("GET /readyz", h.Ready)
	// The cluster page (ui.go) holds no data: it is served without the
	// token and asks for it.
	mux.Handle("GET /ui/", uiHandler())
	mux.Handle("GET /ui", http.RedirectHandler("/ui/", http.StatusMovedPermanently))
	mux.Handle("GET /{$}", http.RedirectHandler("/ui/", http.StatusFound))

	authed := http.NewServeMux()
	authed.Handle("GET /metrics", h.Metrics)
	authed.HandleFunc("GET /v1/status", at(h.Status))
	authed.HandleFunc("GET /v1/members", at(h.Members))
	authed.HandleFunc("GET /v1/events", h.Events)
	authed.HandleFunc("POST /v1/join", same(h.Join))
	authed.HandleFunc("POST /v1/leave", same(h.Leave))
	authed.HandleFunc("DELETE /v1/members/{id}", same(lead(h.Remove)))
	authed.HandleFunc("GET /v1/keyring", at(h.KeyringList))
	authed.HandleFunc("POST /v1/keyring/rotate", same(lead(h.KeyringRotate)))
	authed.HandleFunc("POST /v1/keyring/{id}/revoke", same(lead(h.KeyringRevoke)))
	authed.HandleFunc("GET /v1/secrets", at(h.SecretsList))
	authed.HandleFunc("POST /v1/secrets/install", same(h.SecretInstall))
	authed.HandleFunc("POST /v1/secrets/use", same(h.SecretUse))
	authed.HandleFunc("POST /v1/secrets/remove", same(h.SecretRemove))
	authed.HandleFunc("GET /v1/snapshot", h.SnapshotSave)
	authed.HandleFunc("POST /v1/snapshot/restore", same(lead(h.SnapshotRestore)))
	authed.HandleFunc("GET /v1/clusters", at(h.Clusters))
	authed.HandleFunc("GET /v1/clusters/{cluster}/destinations", at(h.Destinations))
	authed.HandleFunc("POST /v1/clusters/{cluster}/destinations/{id}/drain", same(lead(h.Drain)))
	authed.HandleFunc("DELETE /v1/clusters/{cluster}/destinations/{id}/drain", same(lead(h.Undrain)))
	authed.HandleFunc("GET /v1/config", at(h.ConfigGet))
	authed.HandleFunc("PUT /v1/config", same(lead(h.ConfigPush)))
	authed.HandleFunc("GET /v1/config/history", at(h.ConfigHistory))
	authed.HandleFunc("GET /v1/config/versions/{n}", at(h.ConfigVersion))
	authed.HandleFunc("POST /v1/config/rollback", same(lead(h.ConfigRollback)))
	authed.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		WriteError(w, http.StatusNotFound, "no such endpoint: "+r.Method+" "+r.URL.Path)
	})
	mux.Handle("/", g.requireToken(authed))
	return mux
}

// guard holds the checks a request passes before its handler.
type guard struct {
	token []byte
	names []string
}

// requireToken enforces the bearer token when one is configured. Without
// one, reads get the writes' Host/Origin rule (sameSite): a web page must
// not read members, keys or metrics through a DNS name rebound to the admin
// address.
func (g guard) requireToken(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if len(g.token) == 0 {
			if err := g.checkSameSite(r); err != nil {
				WriteError(w, http.StatusForbidden, err.Error())
				return
			}
		}
		if len(g.token) > 0 {
			got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
			if !ok || subtle.ConstantTimeCompare([]byte(strings.TrimSpace(got)), g.token) != 1 {
				w.Header().Set("WWW-Authenticate", `Bearer realm="tether"`)
				WriteError(w, http.StatusUnauthorized, "missing or wrong bearer token")
				return
			}
		}
		h.ServeHTTP(w, r)
	})
}

// sameSite refuses cross-site writes, so a web page a tokenless admin's
// operator visits cannot drive the admin API (CSRF), nor through a DNS name
// that resolves to loopback (DNS rebinding): an Origin must be the admin
// address itself, and Host an IP, localhost, or this node's name.
func (g guard) sameSite(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if err := g.checkSameSite(r); err != nil {
			WriteError(w, http.StatusForbidden, err.Error())
			return
		}
		h(w, r)
	}
}

func (g guard) checkSameSite(r *http.Request) error {
	host := r.Host
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.Trim(host, "[]"), ".")
	if !g.allowedHost(host) {
		return fmt.Errorf("refused: Host %q is not an IP address, localhost or this node's name (DNS rebinding defence); call the admin API by its address", r.Host)
	}
	if origin := r.Header.Get("Origin"); origin != "" {
		u, err := url.Parse(origin)
		if err != nil || !strings.EqualFold(u.Host, r.Host) {
			return fmt.Errorf("refused: cross-site request from Origin %q (only the admin API's own origin may call it)", origin)
		}
	}
	if site := r.Header.Get("Sec-Fetch-Site"); site != "" && site != "same-origin" && site != "none" {
		return fmt.Errorf("refused: cross-site request (Sec-Fetch-Site: %s)", site)
	}
	return nil
}

func (g guard) allowedHost(host string) bool {
	if host == "" || net.ParseIP(host) != nil || strings.EqualFold(host, "localhost") {
		return true
	}
	for _, n := range g.names {
		if n != "" && strings.EqualFold(host, n) {
			return true
		}
	}
	return false
}
