package proxy

// Contract stub: the data-path work replaces the bodies in this file (and
// may move them to other files), keeping the exported signatures; package
// node codes against them.

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tether-proxy/tether/proxy/affinity"
	"github.com/tether-proxy/tether/proxy/config"
	"github.com/tether-proxy/tether/proxy/upstream"
)

// ErrNotFound is returned for an unknown cluster or destination id.
var ErrNotFound = errors.New("not found")

// Options are the data path's collaborators. Zero values take defaults.
type Options struct {
	Logger *slog.Logger
	// AccessLog receives one JSON line per request; nil disables it.
	AccessLog *slog.Logger
	// Registerer receives the data path's metrics; nil: not registered.
	Registerer prometheus.Registerer
	// Keyring seals Cookie, CustomHeader and Envelope affinity values.
	Keyring affinity.Keyring
	// Dial dials destinations (a DNS-caching resolver's DialContext); nil:
	// a resolver from proxy/dnscache with default options.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// Now is the clock (tests); nil: time.Now.
	Now func() time.Time
	// NodeID names this node in logs.
	NodeID string
}

// Compile checks everything about cfg that building the data path needs
// (route templates, policies, affinity, transforms) without starting
// anything. Errors carry JSON paths. Used by `tether config validate` and
// before a reload.
func Compile(cfg *config.Config) config.Errors { panic("contract stub") }

// Proxy is the data path of one node: an http.Handler over the current
// routes and clusters, swapped atomically on Update.
type Proxy struct{}

// New builds the data path for cfg and starts its health checkers.
func New(cfg *config.Config, opts Options) (*Proxy, error) { panic("contract stub") }

// ServeHTTP proxies one request.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) { panic("contract stub") }

// Update swaps in new routes and clusters without dropping in-flight
// requests; destinations whose id and addresses are unchanged keep their
// state (health, drain, in-flight counts). An invalid cfg is refused and the
// old one kept.
func (p *Proxy) Update(cfg *config.Config) error { panic("contract stub") }

// Close stops health checkers and closes idle backend connections.
func (p *Proxy) Close() {}

// Cluster returns the runtime cluster with the given id, or nil.
func (p *Proxy) Cluster(id string) *upstream.Cluster { panic("contract stub") }

// ClusterIDs lists the configured clusters, sorted.
func (p *Proxy) ClusterIDs() []string { panic("contract stub") }

// SetDraining starts (on=true, deadline now+the cluster's DrainTimeout) or
// stops draining a destination. Drain state survives reloads.
func (p *Proxy) SetDraining(clusterID, destID string, on bool) (deadline time.Time, err error) {
	panic("contract stub")
}

// Server owns the listeners of one node.
type Server struct{}

// NewServer prepares listeners for cfg.Listeners with cfg.Limits, serving h
// (redirect listeners answer with their redirect instead).
func NewServer(cfg *config.Config, h http.Handler, logger *slog.Logger) (*Server, error) {
	panic("contract stub")
}

// Start binds every listener and serves in the background. It returns an
// error (naming the address) if any listener cannot bind, after closing the
// ones already bound.
func (s *Server) Start() error { panic("contract stub") }

// Addrs are the bound addresses, in cfg.Listeners order (":0" resolved).
func (s *Server) Addrs() []net.Addr { panic("contract stub") }

// Shutdown stops accepting and waits for in-flight requests until ctx ends;
// then it closes what is left.
func (s *Server) Shutdown(ctx context.Context) error { panic("contract stub") }
