package demo

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/tether-proxy/tether/node"
	"github.com/tether-proxy/tether/node/demo/backend"
)

// Options size the demo.
type Options struct {
	Nodes    int // default 3
	Backends int // default 3
	Logger   *slog.Logger
	// AccessLog, when set, receives every node's access log.
	AccessLog *slog.Logger
}

// Demo is a loopback cluster of tether nodes in front of demo backends.
type Demo struct {
	Nodes    []*node.Node
	Backends []string // base URLs
	servers  []*http.Server
	dir      string
}

// Start starts the backends, then the nodes, all on 127.0.0.1 with
// ports chosen by the system.
func Start(opts Options) (d *Demo, err error) {
	if opts.Nodes <= 0 {
		opts.Nodes = 3
	}
	if opts.Backends <= 0 {
		opts.Backends = 3
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	dir, err := os.MkdirTemp("", "tether-demo-")
	if err != nil {
		return nil, err
	}
	d = &Demo{dir: dir}
	defer func() {
		if err != nil {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			d.Stop(ctx)
			cancel()
		}
	}()

	dests := map[string]any{}
	for i := 1; i <= opts.Backends; i++ {
		name := fmt.Sprintf("backend-%d", i)
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return d, fmt.Errorf("demo backend: %w", err)
		}
		srv := &http.Server{Handler: backend.Handler(name), ReadHeaderTimeout: 10 * time.Second}
		go srv.Serve(ln)
		d.servers = append(d.servers, srv)
		url := "http://" + ln.Addr().String() + "/"
		d.Backends = append(d.Backends, url)
		dests[name] = map[string]any{"Address": url}
	}
	cfg := map[string]any{
		"Listeners": []any{map[string]any{"Address": "127.0.0.1:0"}},
		"ReverseProxy": map[string]any{
			"Routes": map[string]any{
				"all": map[string]any{"ClusterId": "demo", "Match": map[string]any{"Path": "{**catch-all}"}},
			},
			"Clusters": map[string]any{
				"demo": map[string]any{
					"LoadBalancingPolicy": "RoundRobin",
					"SessionAffinity": map[string]any{
						"Enabled": true, "Policy": "Cookie", "AffinityKeyName": ".Tether.Affinity",
					},
					"HealthCheck": map[string]any{
						"Active":  map[string]any{"Enabled": true, "Interval": "00:00:05", "Timeout": "00:00:02", "Path": "/healthz"},
						"Passive": map[string]any{"Enabled": true, "ReactivationPeriod": "00:00:10"},
					},
					"Destinations": dests,
				},
			},
		},
	}
	raw, _ := json.MarshalIndent(cfg, "", "  ")
	cfgPath := filepath.Join(dir, "demo.json")
	if err := os.WriteFile(cfgPath, raw, 0o600); err != nil {
		return d, err
	}
	// One cluster secret for all demo nodes: it authenticates Raft and
	// gossip between them and encrypts the replicated keyring at rest.
	secret := make([]byte, 32)
	if _, err := rand.Read(secret); err != nil {
		return d, err
	}
	secretPath := filepath.Join(dir, "cluster-secret")
	if err := os.WriteFile(secretPath, []byte(hex.EncodeToString(secret)), 0o600); err != nil {
		return d, err
	}
	var join []string
	for i := 1; i <= opts.Nodes; i++ {
		id := fmt.Sprintf("n%d", i)
		n, err := node.New(node.Config{
			ConfigPath:        cfgPath,
			NodeID:            id,
			DataDir:           filepath.Join(dir, id),
			AdminAddr:         "127.0.0.1:0",
			RaftAddr:          "127.0.0.1:0",
			GossipAddr:        "127.0.0.1:0",
			Join:              join,
			BootstrapExpect:   opts.Nodes,
			RaftVoters:        max(opts.Nodes|1, node.DefaultRaftVoters),
			ClusterSecretFile: secretPath,
			FastTimings:       true,
			Logger:            opts.Logger,
			AccessLog:         opts.AccessLog,
		})
		if err != nil {
			return d, err
		}
		if err := n.Start(); err != nil {
			return d, fmt.Errorf("demo node %s: %w", id, err)
		}
		d.Nodes = append(d.Nodes, n)
		join = append(join, n.GossipAddr())
	}
	// Ready: a leader is elected and every node holds an active key.
	deadline := time.Now().Add(30 * time.Second)
	for !d.ready() {
		if time.Now().After(deadline) {
			return d, errors.New("the demo cluster did not elect a leader with an active key within 30 s")
		}
		time.Sleep(50 * time.Millisecond)
	}
	return d, nil
}

// ready is when every node serves: a leader is known, it holds an active
// key and its proxy listeners are open.
func (d *Demo) ready() bool {
	for _, n := range d.Nodes {
		if n.NotReady() != "" {
			return false
		}
	}
	return true
}

// Leader is the id of the node that leads the demo cluster now.
func (d *Demo) Leader() string {
	for _, n := range d.Nodes {
		if id := n.Leader(); id != "" {
			return id
		}
	}
	return ""
}

// Lines describe the demo, one line per node and per backend.
func (d *Demo) Lines() []string {
	var out []string
	for _, n := range d.Nodes {
		out = append(out, fmt.Sprintf("%s proxy=http://%s admin=http://%s", n.ID(), n.ProxyAddrs()[0], n.AdminAddr()))
	}
	for i, b := range d.Backends {
		out = append(out, fmt.Sprintf("backend-%d %s", i+1, strings.TrimSuffix(b, "/")))
	}
	out = append(out, "leader="+d.Leader())
	return out
}

// Stop stops the nodes, then the backends, and removes the demo's files.
func (d *Demo) Stop(ctx context.Context) error {
	var errs []error
	for _, n := range d.Nodes {
		errs = append(errs, n.Shutdown(ctx))
	}
	for _, s := range d.servers {
		if err := s.Shutdown(ctx); err != nil {
			s.Close()
		}
	}
	errs = append(errs, os.RemoveAll(d.dir))
	return errors.Join(errs...)
}
