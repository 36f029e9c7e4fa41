package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/tether-proxy/tether/keyring"
	"github.com/tether-proxy/tether/proxy"
	"github.com/tether-proxy/tether/proxy/config"
)

// Config is what the command line gives a node.
type Config struct {
	// ConfigPath is the proxy configuration file (JSON or YAML). Required.
	ConfigPath string
	// NodeID names the node; default: the host name.
	NodeID string
	// DataDir holds the node's state; default ./data/<node-id>.
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

	Logger    *slog.Logger
	AccessLog *slog.Logger
}

// Node is one running tether node.
type Node struct {
	cfg      Config
	log      *slog.Logger
	registry *prometheus.Registry
	keys     *keyring.Manager
	proxy    *proxy.Proxy
	server   *proxy.Server
	admin    *http.Server
	adminLn  net.Listener
	token    []byte
	started  time.Time

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
	bg       sync.WaitGroup
}

// DefaultAdminAddr is the admin listener's default address.
const DefaultAdminAddr = "127.0.0.1:9901"

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
		cfg.DataDir = filepath.Join("data", cfg.NodeID)
	}
	if cfg.AdminAddr == "" {
		cfg.AdminAddr = DefaultAdminAddr
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Node{
		cfg:  cfg,
		log:  cfg.Logger.With("node", cfg.NodeID),
		stop: make(chan struct{}),
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
	cfg, warnings, err := config.Load(n.cfg.ConfigPath)
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
	if err := n.openKeyring(); err != nil {
		return err
	}

	n.registry = prometheus.NewRegistry()
	n.registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	n.registry.MustRegister(n.reloads, newKeyringCollector(n))

	n.proxy, err = proxy.New(cfg, proxy.Options{
		Logger:     n.log,
		AccessLog:  n.cfg.AccessLog,
		Registerer: n.registry,
		Keyring:    n.keys.Ring(),
		NodeID:     n.cfg.NodeID,
	})
	if err != nil {
		return fmt.Errorf("data path: %w", err)
	}

	if err := n.startAdmin(); err != nil {
		return err
	}

	n.server, err = proxy.NewServer(cfg, n.proxy, n.log)
	if err != nil {
		return fmt.Errorf("listeners: %w", err)
	}
	if err := n.server.Start(); err != nil {
		return fmt.Errorf("listeners: %w", err)
	}

	n.bg.Add(1)
	go n.keyMaintenance()
	if n.cfg.WatchConfig {
		if err := n.watchConfig(); err != nil {
			return err
		}
	}
	addrs := make([]string, 0, len(n.server.Addrs()))
	for _, a := range n.server.Addrs() {
		addrs = append(addrs, a.String())
	}
	n.log.Info("node started", "proxy", strings.Join(addrs, ","), "admin", n.adminLn.Addr().String(), "data_dir", n.cfg.DataDir)
	return nil
}

// ProxyAddrs are the bound proxy listener addresses.
func (n *Node) ProxyAddrs() []net.Addr { return n.server.Addrs() }

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
	cfg, warnings, err := config.Load(n.cfg.ConfigPath)
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
	if listenersChanged(n.bound, cfg) {
		n.log.Warn("config reload: listener changes (addresses, TLS on or off, redirects, header limits and timeouts) take effect only after a restart")
	}
	if err := n.proxy.Update(cfg); err != nil {
		n.reloads.WithLabelValues("rejected").Inc()
		n.log.Error("config reload rejected; keeping the running configuration", "file", n.cfg.ConfigPath, "error", err)
		return err
	}
	n.current = cfg
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
	if la.MaxRequestHeadersTotalSize != lb.MaxRequestHeadersTotalSize || la.RequestHeadersTimeout.Duration != lb.RequestHeadersTimeout.Duration || la.KeepAliveTimeout.Duration != lb.KeepAliveTimeout.Duration {
		return true
	}
	for i := range a.Listeners {
		x, y := a.Listeners[i], b.Listeners[i]
		if x.Address != y.Address || (x.Certificate == nil) != (y.Certificate == nil) || !reflect.DeepEqual(x.Redirect, y.Redirect) {
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
	n.bg.Wait()
	if n.admin != nil {
		actx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		if err := n.admin.Shutdown(actx); err != nil {
			n.admin.Close()
		}
		cancel()
	}
	if n.proxy != nil {
		n.proxy.Close()
	}
	n.log.Info("node stopped")
	return errors.Join(errs...)
}

// readSecretFile reads a secret, trimming surrounding white space.
func readSecretFile(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	s := strings.TrimSpace(string(b))
	if s == "" {
		return nil, fmt.Errorf("%s is empty", path)
	}
	return []byte(s), nil
}
