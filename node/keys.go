package node

import (
	"fmt"
	"path/filepath"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tether-proxy/tether/keyring"
)

// keyMaintenanceInterval is how often automatic rotation and pruning run.
const keyMaintenanceInterval = time.Hour

// openKeyring opens (or creates) the node's keyring in its data dir. With a
// cluster secret the file is encrypted with a key derived from it; without
// one the key material is stored in plain text in a 0600 file.
func (n *Node) openKeyring() error {
	var kek []byte
	if n.cfg.ClusterSecretFile != "" {
		secret, err := readSecretFile(n.cfg.ClusterSecretFile)
		if err != nil {
			return fmt.Errorf("cluster secret: %w", err)
		}
		if kek, err = keyring.DeriveKEK(secret, keyring.InfoKeyringFile); err != nil {
			return fmt.Errorf("cluster secret: %w", err)
		}
	} else {
		n.log.Warn("no --cluster-secret-file: the keyring is stored unencrypted (mode 0600) in the data dir")
	}
	m, err := keyring.Open(filepath.Join(n.cfg.DataDir, "keyring.json"), kek, keyring.Options{})
	if err != nil {
		return fmt.Errorf("keyring: %w", err)
	}
	n.keys = m
	return nil
}

func (n *Node) revokeKey(id string) error {
	if err := n.keys.RevokeKey(id, time.Now()); err != nil {
		return err
	}
	n.log.Info("key revoked", "id", id, "active_key_id", n.keys.ActiveKeyID(time.Now()))
	return nil
}

// keyMaintenance rotates keys before they expire and prunes keys past their
// retention period.
func (n *Node) keyMaintenance() {
	defer n.bg.Done()
	t := time.NewTicker(keyMaintenanceInterval)
	defer t.Stop()
	for {
		select {
		case <-n.stop:
			return
		case now := <-t.C:
			if md, rotated, err := n.keys.MaybeRotate(now); err != nil {
				n.log.Error("automatic key rotation failed", "error", err)
			} else if rotated {
				n.log.Info("key rotated automatically", "id", md.ID)
			}
			if removed, err := n.keys.Prune(now); err != nil {
				n.log.Error("key pruning failed", "error", err)
			} else if len(removed) > 0 {
				n.log.Info("expired keys removed", "ids", removed)
			}
		}
	}
}

// keyringCollector exports keyring figures (never material).
type keyringCollector struct {
	n      *Node
	keys   *prometheus.Desc
	active *prometheus.Desc
}

func newKeyringCollector(n *Node) *keyringCollector {
	return &keyringCollector{
		n:      n,
		keys:   prometheus.NewDesc("tether_keyring_keys", "Keys in the keyring by state.", []string{"state"}, nil),
		active: prometheus.NewDesc("tether_keyring_active_key_expires_timestamp_seconds", "When the active key expires (Unix time).", nil, nil),
	}
}

func (c *keyringCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.keys
	ch <- c.active
}

func (c *keyringCollector) Collect(ch chan<- prometheus.Metric) {
	if c.n.keys == nil {
		return
	}
	now := time.Now()
	counts := map[string]int{"installed": 0, "active": 0, "expired": 0, "revoked": 0}
	activeID := c.n.keys.ActiveKeyID(now)
	for _, md := range c.n.keys.List(now) {
		counts[md.State.String()]++
		if md.ID == activeID {
			ch <- prometheus.MustNewConstMetric(c.active, prometheus.GaugeValue, float64(md.Expires.Unix()))
		}
	}
	for state, v := range counts {
		ch <- prometheus.MustNewConstMetric(c.keys, prometheus.GaugeValue, float64(v), state)
	}
}
