package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/tether-proxy/tether/cluster"
	"github.com/tether-proxy/tether/keyring"
	adminapi "github.com/tether-proxy/tether/node/admin"
	"github.com/tether-proxy/tether/node/apiclient"
	"github.com/tether-proxy/tether/node/clustertime"
	"github.com/tether-proxy/tether/node/confirm"
	"github.com/tether-proxy/tether/node/gate"
	"github.com/tether-proxy/tether/node/keyshare"
	"github.com/tether-proxy/tether/node/leader"
	"github.com/tether-proxy/tether/node/secrets"
	"github.com/tether-proxy/tether/proxy"
	"github.com/tether-proxy/tether/proxy/config"
	"github.com/tether-proxy/tether/proxy/frontdoor"
	"github.com/tether-proxy/tether/store"
)

// Config is what the command line gives a node.
type Config struct {
	// ConfigPath is the proxy configuration file (JSON or YAML). Required.
	ConfigPath string
	// NodeID names the node; default: the host name.
	NodeID string
	// DataDir holds the node's state; default DefaultDataDir(NodeID).
	DataDir string
	// AdminAddr is the admin API's address; default 127.0.0.1:9901.
	AdminAddr string
	// ClusterSecretFile, when set, holds the cluster secret from which the
	// key protecting the keyring at rest is derived.
	ClusterSecretFile string
	// AdminTokenFile, when set, holds the bearer token the admin API
	// requires (all but /healthz and /readyz).
	AdminTokenFile string
	// WatchConfig reloads the configuration when its file changes.
	WatchConfig bool
	// Strict makes unknown configuration keys errors (--strict).
	Strict bool
	// Listen, when not empty, replaces the config file's listeners
	// (--listen): several nodes on one host share a file, not a port.
	Listen []string

	// RaftAddr is Raft's listen address; default :7000.
	RaftAddr string
	// GossipAddr is memberlist's listen address; default :7946.
	GossipAddr string
	// Advertise is the host (or host:port for gossip) other nodes reach
	// this one at, for NAT and containers. Default: the bound address when
	// it is specific, else this host's private IP as memberlist finds it.
	Advertise string
	// Join lists nodes (host[:port], DNS names join every record) to join.
	Join []string
	// BootstrapExpect: form a new cluster once this many state-less nodes
	// see each other. 0 with no Join: a single-node cluster of its own.
	BootstrapExpect int
	// TLSCert, TLSKey, TLSCA: mutual TLS for Raft connections (all or none).
	TLSCert, TLSKey, TLSCA string
	// ReapTimeout is how long a failed node stays in the Raft configuration
	// before the leader removes it; default 72h.
	ReapTimeout time.Duration
	// VoterGrace is how long a voter must have been failed, counted from
	// no earlier than the leader's election, before a non-voter replaces
	// it; default 15s.
	VoterGrace time.Duration
	// RaftVoters caps the voters (odd; default 5); further nodes replicate
	// as non-voters.
	RaftVoters int
	// RaftHandshakeV1 is --raft-handshake-v1: "auto" (default) accepts
	// Raft handshake version 1 until every member speaks version 2,
	// "refuse" never does (secrets.go).
	RaftHandshakeV1 string

	// HTTP1Server chooses what serves cleartext HTTP/1.1 connections:
	// "own" (default) or "stdlib" (--http1-server, docs/OPERATIONS.md).
	HTTP1Server string
	// HTTP2Server chooses what serves HTTP/2 connections: "own"
	// (default) or "stdlib" (--http2-server, docs/OPERATIONS.md).
	HTTP2Server string
	// WriteYield: "auto" (default), "on" or "off" (--write-yield,
	// docs/OPERATIONS.md); it applies to the whole process.
	WriteYield string

	// ServeBeforeJoin opens the proxy listeners at start on a node started
	// to join (--join, --bootstrap-expect) with no state of its own, which
	// otherwise accepts no connection until it is in the cluster and holds
	// the active key (node/gate).
	ServeBeforeJoin bool

	// FastTimings shortens gossip timings (failure detection) for
	// in-process tests and the demo on loopback; Raft keeps LAN timings.
	FastTimings bool

	Logger    *slog.Logger
	AccessLog *slog.Logger
}

// Node is one running tether node.
type Node struct {
	cfg      Config
	log      *slog.Logger
	registry *prometheus.Registry
	ring     *keyring.Ring
	store    *store.Store
	members  *cluster.Membership // nil on a node without a cluster secret
	// secrets are the cluster secrets the node holds; keeper keeps them
	// in the data dir and gossip (package node/secrets).
	secrets *keyring.Secrets
	keeper  *secrets.Keeper
	// addrs are the addresses this node advertises (addrs.go).
	addrs   advertised
	proxy   *proxy.Proxy
	server  *frontdoor.Server
	admin   *http.Server
	adminLn net.Listener
	token   []byte
	started time.Time

	reloadMu sync.Mutex
	current  *config.Config
	// bound is the configuration the listeners were started with: listener
	// changes in a reload are compared against it, as they need a restart.
	bound   *config.Config
	reloads *prometheus.CounterVec
	// loadedFP is the config file's fingerprint when it was last read.
	loadedFP string

	stopOnce sync.Once
	stop     chan struct{}
	cancel   context.CancelFunc
	bg       sync.WaitGroup

	// lead runs the leader's duties (node/leader); leaderWake wakes its
	// rounds.
	lead       *leader.Leader
	leaderWake chan struct{}
	health     *sharedHealth // nil without gossip
	// durables carries durable-index reports between this node and the
	// leader (durable.go); gossip meta carries the indexes too.
	durables durableReports
	// healthReady is health once the data path exists (membership events
	// may come before).
	healthReady atomic.Pointer[sharedHealth]
	// keys sends keys to members that lack them and asks the leader for
	// ours (keyshare.go); nil without gossip.
	keys *keyshare.Transfer
	// dataKeys is the data path's keyring.
	dataKeys *keyshare.DataKeys
	// manualLeader (tests): no leader loop; the test calls lead.Round.
	manualLeader bool
	// commands (tests): the Raft command set this node applies, to act as
	// an older binary; "": this binary's.
	commands store.CommandSet
	// readWait (tests): how long a read waits for the index it asks for;
	// 0: readWaitMax.
	readWait time.Duration
	// ticketShift (tests): added to the time TLS session tickets go by.
	ticketShift atomic.Int64
	// seeds are the TLS session ticket seeds this node holds, in memory
	// only; seeder makes them (leading) or takes them from the leader
	// (keyshare.go).
	seeds  *keyring.TicketSeeds
	seeder *keyshare.Seeder
	// legacyTickets (tests): act as a release before ticket seeds.
	legacyTickets bool
	// seedRecord (tests) sees every seed request and answer this node
	// sends, as it goes on gossip; seedFetchOff (tests): ask no leader.
	seedRecord   atomic.Pointer[func(tag byte, msg []byte)]
	seedFetchOff atomic.Bool
	// clock is the cluster time (node/clustertime).
	clock *clustertime.Clock
	// failed is closed (once) when the node must stop after Start: it
	// left the cluster, or formation hit a fatal error (failErr).
	failed   chan struct{}
	failOnce sync.Once
	failErr  error

	// ev is the event bus of GET /v1/events and its change watcher.
	ev eventState

	// table is the members as this node sees them (members.go).
	table *memberTable

	// dirLock holds the data dir for this process (lock.go).
	dirLock *dataDirLock
	// idClaims are live claims on this node's id (idconflict.go).
	idClaims *idClaims
	// gate says what the proxy listeners wait for (node/gate).
	gate gate.Gate
	// confirms are members' confirmations of applied writes (node/confirm);
	// nil without gossip.
	confirms *confirm.Confirms
	// writes runs writes on the leader; api serves the admin API and
	// watches for events (node/admin).
	writes *adminapi.Writes
	api    *adminapi.API
	// leaver takes the node out of the cluster (leave.go).
	leaver *leaver
	// clusterCfg is the version of the cluster's config this node serves
	// (clusterconfig.go).
	clusterCfg clusterConfigState
}

// DefaultAdminAddr is the admin listener's default address.
const DefaultAdminAddr = apiclient.DefaultAddr

// New checks cfg and fills its defaults; nothing starts until Start.
func New(cfg Config) (*Node, error) {
	if cfg.ConfigPath == "" {
		return nil, errors.New("--config is required")
	}
	if cfg.NodeID == "" {
		h, err := os.Hostname()
		if err != nil || h == "" {
			return nil, fmt.Errorf("--node-id not given and the host name is unknown: %v", err)
		}
		cfg.NodeID = h
	}
	if strings.ContainsAny(cfg.NodeID, "/\\ \t\n") {
		return nil, fmt.Errorf("--node-id %q: must not contain slashes or spaces", cfg.NodeID)
	}
	if cfg.DataDir == "" {
		cfg.DataDir = DefaultDataDir(cfg.NodeID)
	}
	if cfg.AdminAddr == "" {
		cfg.AdminAddr = DefaultAdminAddr
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if err := cfg.checkClusterFlags(); err != nil {
		return nil, err
	}
	if err := cfg.checkHandshakeV1(); err != nil {
		return nil, err
	}
	if _, err := frontdoor.ParseHTTP1Server(cfg.HTTP1Server); err != nil {
		return nil, fmt.Errorf("--http1-server: %w", err)
	}
	if _, err := frontdoor.ParseHTTP2Server(cfg.HTTP2Server); err != nil {
		return nil, fmt.Errorf("--http2-server: %w", err)
	}
	if _, err := frontdoor.ParseWriteYield(cfg.WriteYield); err != nil {
		return nil, fmt.Errorf("--write-yield: %w", err)
	}
	log := cfg.Logger.With("node", cfg.NodeID)
	return &Node{
		cfg:        cfg,
		log:        log,
		seeds:      keyring.NewTicketSeeds(),
		clock:      clustertime.New(cfg.NodeID, log),
		stop:       make(chan struct{}),
		leaderWake: make(chan struct{}, 1),
		failed:     make(chan struct{}),
		idClaims:   newIDClaims(log),
		ev:         eventState{bus: adminapi.NewBus(cfg.NodeID), wake: make(chan struct{}, 1)},
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tether_config_reloads_total",
			Help: "Configuration reloads by result (applied, rejected).",
		}, []string{"result"}),
	}, nil
}

// ID is the node's id.
func (n *Node) ID() string { return n.cfg.NodeID }

// Start brings the node up. On error everything already started is stopped.
func (n *Node) Start() (err error) {
	n.started = time.Now()
	defer func() {
		if err != nil {
			n.closeAll(context.Background())
		}
	}()

	n.loadedFP = fingerprint(n.cfg.ConfigPath)
	cfg, warnings, err := config.LoadWith(n.cfg.ConfigPath, config.LoadOptions{Strict: n.cfg.Strict, Listen: n.cfg.Listen, Info: func(m string) { n.log.Info("config: " + m) }})
	if err != nil {
		return fmt.Errorf("config %s:\n%w", n.cfg.ConfigPath, err)
	}
	for _, w := range warnings {
		n.log.Warn("config: " + w)
	}
	if errs := proxy.Compile(cfg); len(errs) > 0 {
		return fmt.Errorf("config %s:\n%w", n.cfg.ConfigPath, errs)
	}
	n.current, n.bound = cfg, cfg

	if n.cfg.AdminTokenFile != "" {
		tok, err := readSecretFile(n.cfg.AdminTokenFile)
		if err != nil {
			return fmt.Errorf("admin token: %w", err)
		}
		n.token = tok
	}
	if err := os.MkdirAll(n.cfg.DataDir, 0o700); err != nil {
		return fmt.Errorf("data dir: %w", err)
	}
	// Before anything reads or writes the dir, gossip included: a second
	// process on it would otherwise join under the live node's id.
	if n.dirLock, err = lockDataDir(n.cfg.DataDir); err != nil {
		return err
	}
	// The admin socket is bound first: gossip metadata carries its address.
	if err := n.listenAdmin(); err != nil {
		return err
	}
	if err := n.openCluster(); err != nil {
		return err
	}
	// The cluster's config version in the restored state is served from
	// the first request: no window with the file's section.
	n.clusterCfg.changed = make(chan struct{}, 1)
	if c := n.withClusterConfig(cfg, n.store.ConfigCurrent()); c != nil {
		cfg = c
		n.current = cfg
	}
	n.writes = newWrites(n)
	n.leaver = &leaver{self: n.cfg.NodeID, store: n.store, members: n.members, writes: n.writes, expect: n.cfg.BootstrapExpect, log: n.log}
	if n.members != nil {
		if n.confirms, err = confirm.New(n.cfg.NodeID, n.members, n.store, n.applyDrains, n.stop, n.log); err != nil {
			return fmt.Errorf("gossip: %w", err)
		}
	}
	if err := n.openHealth(); err != nil {
		return fmt.Errorf("health gossip: %w", err)
	}

	n.registry = prometheus.NewRegistry()
	n.registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	n.registry.MustRegister(n.reloads, newClusterCollector(n), newStoreHealthCollector(n), n.clock.Collector(), secretCollector(n))
	n.registry.MustRegister(n.seeder.Collectors()...)
	var fetch keyshare.Fetch
	if n.keys != nil {
		fetch = n.keys.Fetch
		n.registry.MustRegister(n.keys.Sent)
	}
	n.dataKeys = keyshare.NewDataKeys(n.ring, n.store, fetch, n.log)
	n.registry.MustRegister(n.dataKeys.Failures, n.dataKeys.Resolved)
	n.registry.MustRegister(n.lead.Collectors()...)

	opts := proxy.Options{
		Logger:     n.log,
		AccessLog:  n.cfg.AccessLog,
		Registerer: n.registry,
		Keyring:    n.dataKeys,
		NodeID:     n.cfg.NodeID,
	}
	if sh := n.health; sh != nil {
		sh.setFanouts(cfg)
		opts.HealthObserver, opts.ShouldProbe = sh, sh.ShouldProbe
		n.registry.MustRegister(sh.lag, newHealthCollector(sh))
	}
	n.proxy, err = proxy.New(cfg, opts)
	if err != nil {
		return fmt.Errorf("data path: %w", err)
	}
	n.applyDrains()
	if n.health != nil {
		n.healthReady.Store(n.health)
		n.health.applyAll()
	}

	n.serveAdmin()

	h1, _ := frontdoor.ParseHTTP1Server(n.cfg.HTTP1Server) // checked by New
	h2, _ := frontdoor.ParseHTTP2Server(n.cfg.HTTP2Server) // checked by New
	wy, _ := frontdoor.ParseWriteYield(n.cfg.WriteYield)
	_ = frontdoor.SetWriteYield(wy)
	n.server, err = frontdoor.New(cfg, n.proxy, n.log, frontdoor.WithHTTP1Server(h1), frontdoor.WithHTTP2Server(h2))
	if err != nil {
		return fmt.Errorf("listeners: %w", err)
	}
	// Session tickets under the keyring and the day's seed resume on
	// every node.
	n.server.UseTicketKeys(n.seeder.TicketSource())
	// QUIC's Retry tokens and stateless resets under the cluster secret
	// hold on every node and across a restart.
	n.server.UseQUICKeys(n.secrets)
	n.server.UseAcme(n.lead.AcmeView())
	// A node started to join with no state waits to be in the cluster.
	gated := n.cfg.clustered() && !n.cfg.ServeBeforeJoin && !n.store.HadState()
	if err := n.gate.Open(n.server, gated, n.joinWait); err != nil {
		return err
	}

	ctx, cancel := context.WithCancel(context.Background())
	n.cancel = cancel
	n.bg.Add(6)
	go func() { defer n.bg.Done(); n.keeper.Follow(ctx) }()
	go func() { defer n.bg.Done(); n.gate.Serve(ctx, n.server, n.joinWait, n.log, n.fail) }()
	go func() { defer n.bg.Done(); n.idClaims.watch(ctx, n.store, n.fail) }()
	go n.form(ctx)
	go n.watchStore(ctx)
	go func() { defer n.bg.Done(); n.api.Watch(ctx.Done()) }()
	n.bg.Add(2)
	go func() { defer n.bg.Done(); n.lead.AcmeLoop(ctx) }()
	go func() { defer n.bg.Done(); n.lead.Loop(ctx) }()
	if n.keys != nil {
		n.bg.Add(1)
		go func() { defer n.bg.Done(); n.keys.Serve(ctx.Done()) }()
	}
	n.bg.Add(1)
	go func() { defer n.bg.Done(); n.seeder.Run(ctx) }()
	if !n.cfg.clustered() && !n.manualLeader {
		// A node of its own elects itself at once; serving before it has
		// a key would hand out sessions without affinity values.
		if err := n.waitReady(standaloneReadyWait); err != nil {
			return err
		}
	}
	if n.cfg.WatchConfig {
		if err := n.watchConfig(); err != nil {
			return err
		}
	}
	addrs := make([]string, 0, len(n.server.Addrs()))
	for _, a := range n.server.Addrs() {
		addrs = append(addrs, a.String())
	}
	n.log.Info("node started", "proxy", strings.Join(addrs, ","), "proxy_open", n.gate.Reason() == "", "admin", n.adminLn.Addr().String(), "raft", n.store.Addr(), "gossip", n.GossipAddr(), "data_dir", n.cfg.DataDir)
	return nil
}

// ProxyAddrs are the bound proxy listener addresses.
func (n *Node) ProxyAddrs() []net.Addr { return n.server.Addrs() }

// standaloneReadyWait bounds how long Start waits for a node of its own to
// elect itself and hold an active key.
const standaloneReadyWait = 30 * time.Second

func (n *Node) waitReady(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		if id, _ := n.store.Leader(); id != "" && n.ring.ActiveKeyID(time.Now()) != "" {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("raft: this node did not elect itself with an active key within %s (raft state %s)", timeout, n.store.State())
		}
		select {
		case <-n.failed:
			return n.failErr
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// GossipAddr is the advertised gossip address ("" without gossip).
func (n *Node) GossipAddr() string { return n.addrs.gossip }

// Leader is the id of the Raft leader this node knows ("" when none).
func (n *Node) Leader() string {
	id, _ := n.store.Leader()
	return id
}

// AdminAddr is the bound admin address.
func (n *Node) AdminAddr() net.Addr { return n.adminLn.Addr() }

// Reload re-reads the configuration file and swaps in its routes and
// clusters. An invalid file is refused with every error, and the running
// configuration stays.
func (n *Node) Reload() error {
	n.reloadMu.Lock()
	defer n.reloadMu.Unlock()
	// Seen, whether it loads or not: the watcher does not retry a broken
	// file until it changes again.
	n.loadedFP = fingerprint(n.cfg.ConfigPath)
	cfg, warnings, err := config.LoadWith(n.cfg.ConfigPath, config.LoadOptions{Strict: n.cfg.Strict, Listen: n.cfg.Listen, Info: func(m string) { n.log.Info("config: " + m) }})
	if err == nil {
		if errs := proxy.Compile(cfg); len(errs) > 0 {
			err = errs
		}
	}
	if err != nil {
		n.reloads.WithLabelValues("rejected").Inc()
		n.log.Error("config reload rejected; keeping the running configuration", "file", n.cfg.ConfigPath, "errors", err.Error())
		return err
	}
	for _, w := range warnings {
		n.log.Warn("config: " + w)
	}
	// Once the cluster has a config version, it replaces the file's
	// ReverseProxy section.
	merged := n.withClusterConfig(cfg, n.store.ConfigCurrent())
	if merged == nil {
		n.reloads.WithLabelValues("rejected").Inc()
		_, why := n.clusterCfg.get()
		return fmt.Errorf("the cluster's config cannot be applied with this file: %s", why)
	}
	cfg = merged
	if listenersChanged(n.bound, cfg) {
		n.log.Warn("config reload: listener changes (addresses, TLS on or off, redirects, header limits and timeouts) take effect only after a restart")
	}
	if err := n.proxy.Update(cfg); err != nil {
		n.reloads.WithLabelValues("rejected").Inc()
		n.log.Error("config reload rejected; keeping the running configuration", "file", n.cfg.ConfigPath, "error", err)
		return err
	}
	n.swapConfig(cfg)
	n.reloads.WithLabelValues("applied").Inc()
	n.log.Info("config reloaded", "file", n.cfg.ConfigPath, "routes", len(cfg.ReverseProxy.Routes), "clusters", len(cfg.ReverseProxy.Clusters))
	// Certificates are re-read on every reload (cert-manager rewrites the
	// files in place). One that does not load (say, caught half-written)
	// keeps the listener's current certificate, without holding back the
	// routes and clusters; the next reload tries again.
	applyCerts, err := n.server.PrepareCertificates(cfg)
	if err != nil {
		n.log.Error("certificates not reloaded; the listeners keep their current ones", "errors", err.Error())
		return fmt.Errorf("config applied, certificates kept: %w", err)
	}
	applyCerts()
	return nil
}

// listenersChanged reports changes that only a restart applies: the
// listeners are bound once at start. Certificates are not among them (a
// reload swaps them), nor is Limits.ShutdownTimeout (read at stop).
func listenersChanged(a, b *config.Config) bool {
	if len(a.Listeners) != len(b.Listeners) {
		return true
	}
	la, lb := a.Limits, b.Limits
	if la.MaxRequestHeadersTotalSize != lb.MaxRequestHeadersTotalSize || la.RequestHeadersTimeout.Duration != lb.RequestHeadersTimeout.Duration || la.KeepAliveTimeout.Duration != lb.KeepAliveTimeout.Duration || la.MaxConcurrentConnections != lb.MaxConcurrentConnections {
		return true
	}
	for i := range a.Listeners {
		x, y := a.Listeners[i], b.Listeners[i]
		if x.Address != y.Address || (x.Certificate == nil) != (y.Certificate == nil) || !reflect.DeepEqual(x.Redirect, y.Redirect) || !reflect.DeepEqual(x.Acme, y.Acme) || !x.ListenerOptions.SameListener(y.ListenerOptions) {
			return true
		}
	}
	return false
}

// ShutdownTimeout is the configured bound on draining in-flight requests.
func (n *Node) ShutdownTimeout() time.Duration {
	n.reloadMu.Lock()
	defer n.reloadMu.Unlock()
	// A given 0 means stop at once.
	if n.current != nil {
		if st := n.current.Limits.ShutdownTimeout; st.Set || st.Duration > 0 {
			return st.Duration
		}
	}
	return 30 * time.Second
}

// Shutdown stops the node: listeners first (in-flight requests finish until
// ctx ends), then the background work, the admin API and the data path.
func (n *Node) Shutdown(ctx context.Context) error {
	return n.closeAll(ctx)
}

func (n *Node) closeAll(ctx context.Context) error {
	var errs []error
	if n.server != nil {
		if err := n.server.Shutdown(ctx); err != nil {
			errs = append(errs, fmt.Errorf("listeners: %w", err))
		}
	}
	n.stopOnce.Do(func() { close(n.stop) })
	if n.cancel != nil {
		n.cancel()
	}
	n.bg.Wait()
	if n.health != nil {
		n.health.gossip.Close()
	}
	// Gossip stops without a leave: a restarting node is not removed from
	// the Raft configuration (tether leave is the graceful way out).
	if n.members != nil {
		if err := n.members.Shutdown(); err != nil {
			errs = append(errs, fmt.Errorf("gossip: %w", err))
		}
	}
	if n.store != nil {
		if err := n.store.Shutdown(); err != nil {
			errs = append(errs, fmt.Errorf("raft: %w", err))
		}
	}
	if n.admin != nil {
		actx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		if err := n.admin.Shutdown(actx); err != nil {
			n.admin.Close()
		}
		cancel()
	} else if n.adminLn != nil {
		n.adminLn.Close()
	}
	if n.proxy != nil {
		n.proxy.Close()
	}
	n.dirLock.release()
	n.log.Info("node stopped")
	return errors.Join(errs...)
}

// readSecretFile reads a secret, trimming surrounding white space.
func readSecretFile(path string) ([]byte, error) { return secrets.ReadFile(path) }
