package testutil

import (
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// Cluster is what the `tether agent` processes of a multi-process test
// cluster share: the binary, the config and cluster secret files, and each
// node's Raft and gossip addresses, which a node keeps across restarts as a
// deployment does.
type Cluster struct {
	T      testing.TB
	Bin    string                   // the tether binary
	Config string                   // the config file
	Secret string                   // the cluster secret file
	Env    func(id string) []string // each agent's extra environment (nil: none)

	mu    sync.Mutex
	addrs map[string][2]string
}

// NewCluster writes config and secret into files of a temporary directory
// for agents of bin.
func NewCluster(t testing.TB, bin, config, secret string) *Cluster {
	dir := t.TempDir()
	c := &Cluster{T: t, Bin: bin, Config: filepath.Join(dir, "tether.json"), Secret: filepath.Join(dir, "secret"),
		addrs: map[string][2]string{}}
	WriteFile(t, c.Config, config)
	WriteFile(t, c.Secret, secret)
	return c
}

// RaftAddr is node id's Raft address, chosen free on first use.
func (c *Cluster) RaftAddr(id string) string { raft, _ := c.addrsOf(id); return raft }

// GossipAddr is node id's gossip address, chosen free on first use.
func (c *Cluster) GossipAddr(id string) string { _, gossip := c.addrsOf(id); return gossip }

func (c *Cluster) addrsOf(id string) (raft, gossip string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	a, ok := c.addrs[id]
	if !ok {
		a = [2]string{FreeAddr(c.T), FreeAddr(c.T)}
		c.addrs[id] = a
	}
	return a[0], a[1]
}

// ForgetAddrs makes node id's next start choose new addresses.
func (c *Cluster) ForgetAddrs(id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.addrs, id)
}

// Agent is one started `tether agent` of a Cluster, with the addresses its
// "node started" line names.
type Agent struct {
	*Proc
	ID       string
	ProxyURL string // the first proxy listener, http://HOST:PORT
	AdminURL string
	Gossip   string // the gossip address other nodes --join
	DataDir  string
	Extra    []string // the flags it was started with beyond the cluster's
}

// StartNode runs `tether agent` as node id with the cluster's flags plus
// extra, in dataDir ("" for a new one), and waits until it has started.
func (c *Cluster) StartNode(id, dataDir string, extra ...string) *Agent {
	c.T.Helper()
	if dataDir == "" {
		dataDir = c.T.TempDir()
	}
	var env []string
	if c.Env != nil {
		env = c.Env(id)
	}
	// A port FreeAddr found free may be taken by another process before
	// the node binds it: a node's first start then tries new addresses
	// (a restart keeps the ones it had).
	c.mu.Lock()
	_, known := c.addrs[id]
	c.mu.Unlock()
	for attempt := 1; ; attempt++ {
		raft, gossip := c.addrsOf(id)
		args := append([]string{"agent", "--config", c.Config, "--node-id", id, "--data-dir", dataDir,
			"--admin-addr", "127.0.0.1:0", "--raft-addr", raft, "--gossip-addr", gossip,
			"--cluster-secret-file", c.Secret, "--no-access-log"}, extra...)
		p := Start(c.T, c.Bin, env, args...)
		if !known && attempt < 5 && p.exitedInUse(60*time.Second) {
			c.ForgetAddrs(id)
			continue
		}
		started := p.WaitLogLine("node started", 60*time.Second)
		a := &Agent{Proc: p, ID: id, DataDir: dataDir, Extra: extra}
		a.ProxyURL = "http://" + strings.Split(started["proxy"].(string), ",")[0]
		a.AdminURL = "http://" + started["admin"].(string)
		a.Gossip, _ = started["gossip"].(string)
		return a
	}
}

// exitedInUse waits up to timeout for "node started" and reports whether
// the process exited before it because an address was in use.
func (p *Proc) exitedInUse(timeout time.Duration) bool {
	inUse := false
	Until(timeout, func() bool {
		select {
		case <-p.done:
			inUse = strings.Contains(p.Stderr.String(), "address already in use")
			return true
		default:
		}
		return p.LogLine("node started") != nil
	})
	return inUse
}
