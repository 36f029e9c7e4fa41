package node

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tether-proxy/tether/cluster"
	"github.com/tether-proxy/tether/keyring"
	"github.com/tether-proxy/tether/node/leader"
	"github.com/tether-proxy/tether/proxy/config"
)

// newLeader binds the cluster clock to this node's store and gossip, and
// wires the leader's duties (node/leader) to them, the keyring and the
// clock; the store and gossip are open.
func (n *Node) newLeader() *leader.Leader {
	cfg := leader.Config{
		Self:      n.cfg.NodeID,
		Log:       n.log,
		Store:     n.store,
		Voters:    n.store,
		AcmeStore: n.store,
		Clock:     n.clock,
		Ring:      n.ring,
		Reports:   &n.durables.got,
		Policy: cluster.Policy{
			MaxVoters:     n.cfg.RaftVoters,
			Expect:        n.cfg.BootstrapExpect,
			ReapTimeout:   n.cfg.ReapTimeout,
			VoterGrace:    n.cfg.VoterGrace,
			MaxLag:        256,
			Stabilization: 2 * time.Second,
		},
		RemovedFromRaft: n.table.removedFromRaft,
		Fanout:          n.fanoutDigest,
		KeyringFile:     filepath.Join(n.cfg.DataDir, "keyring.json"),
		AcmeBlocks:      n.acmeBlocks,
		Publish: func(typ string, at time.Time, data map[string]any) {
			n.ev.bus.Publish(typ, at, data)
		},
		Version: Version,
		Wake:    n.leaderWake,
		Manual:  n.manualLeader,
	}
	if n.members != nil {
		cfg.Members = n.members
		n.clock.Bind(n.store, n.members)
	} else {
		n.clock.Bind(n.store, nil) // not a nil *cluster.Membership
	}
	if n.cfg.ClusterSecretFile != "" {
		cfg.KeyringKEK = func() ([]byte, error) {
			secret, err := readSecretFile(n.cfg.ClusterSecretFile)
			if err != nil {
				return nil, err
			}
			return keyring.DeriveKEK(secret, keyring.InfoKeyringFile)
		}
	}
	return leader.New(cfg)
}

// acmeBlocks are the distinct Acme blocks of the current configuration.
func (n *Node) acmeBlocks() []config.Acme {
	n.reloadMu.Lock()
	cfg := n.current
	n.reloadMu.Unlock()
	var out []config.Acme
	seen := map[string]bool{}
	if cfg == nil {
		return nil
	}
	for _, l := range cfg.Listeners {
		if l.Acme != nil && !seen[l.Acme.Name()] {
			seen[l.Acme.Name()] = true
			out = append(out, *l.Acme)
		}
	}
	return out
}

// fanoutDigest is the ProbeFanout of this node's clusters as gossiped: the
// number when every cluster has the same, else "h" and a digest of the
// sorted cluster=fanout pairs ("" before the configuration is loaded).
func (n *Node) fanoutDigest() string {
	n.reloadMu.Lock()
	cfg := n.current
	n.reloadMu.Unlock()
	if cfg == nil {
		return ""
	}
	var pairs []string
	values := map[int]bool{}
	for id, c := range cfg.ReverseProxy.Clusters {
		if c != nil {
			f := c.HealthCheck.Active.ProbeFanout
			pairs = append(pairs, fmt.Sprintf("%s=%d", id, f))
			values[f] = true
		}
	}
	if len(values) == 0 {
		return ""
	}
	if len(values) == 1 {
		for f := range values {
			return strconv.Itoa(f)
		}
	}
	slices.Sort(pairs)
	h := sha256.Sum256([]byte(strings.Join(pairs, ",")))
	return "h" + hex.EncodeToString(h[:4])
}
