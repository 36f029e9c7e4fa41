package cluster

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/tether-proxy/tether/internal/atomicfile"
)

// A restarted node must find its peers again by itself. memberlist gossips
// to a dead node only for a while and never pulls state from it, so a node
// that comes back after that, or on a new address, or without --join, would
// stay alone; one that others still reach learns the rest of the cluster
// only at its first push/pull (15 s with LAN timing). Serf solves this with
// its snapshot; tether keeps the gossip addresses of the members it last
// saw alive in Config.PeersFile and Rejoin contacts them, so the first join
// answers with the whole membership at once.
//
// The file is a hint, not state: it is rewritten (without fsync) when the
// set changes, never emptied (a node that lost everyone keeps the last
// peers it had), and a stale or unreadable file only costs a failed join.

const peersFileHeader = "tether gossip peers v1\n"

// maxKnownPeers bounds the file: a few answering peers are enough, since
// the first join's push/pull carries the whole membership.
const maxKnownPeers = 64

func readPeersFile(path string) ([]string, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	s, ok := strings.CutPrefix(string(b), peersFileHeader)
	if !ok {
		return nil, fmt.Errorf("%s is not a gossip peers file", path)
	}
	var out []string
	for line := range strings.SplitSeq(s, "\n") {
		if line = strings.TrimSpace(line); line != "" && len(out) < maxKnownPeers {
			out = append(out, line)
		}
	}
	return out, nil
}

func writePeersFile(path string, addrs []string) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	return atomicfile.WriteFile(path, []byte(peersFileHeader+strings.Join(addrs, "\n")+"\n"), 0o600)
}

// loadPeers reads Config.PeersFile at Open. A bad file is logged and
// ignored: it is only a hint.
func (m *Membership) loadPeers() {
	if m.cfg.PeersFile == "" {
		return
	}
	addrs, err := readPeersFile(m.cfg.PeersFile)
	if err != nil {
		m.log.Warn("gossip: ignoring the known peers file", "err", err)
		return
	}
	m.knownPeers = addrs
	m.savedPeers = slices.Clone(addrs)
}

// savePeers records the addresses of the other members alive or suspect,
// when they changed and there is at least one (loop only).
func (m *Membership) savePeers() {
	if m.cfg.PeersFile == "" {
		return
	}
	m.mu.Lock()
	var addrs []string
	for id, x := range m.members {
		if id != m.cfg.NodeID && (x.State == StateAlive || x.State == StateSuspect) && x.Addr != "" {
			addrs = append(addrs, x.Addr)
		}
	}
	m.mu.Unlock()
	if len(addrs) == 0 {
		return
	}
	slices.Sort(addrs)
	if len(addrs) > maxKnownPeers {
		addrs = addrs[:maxKnownPeers]
	}
	if slices.Equal(addrs, m.savedPeers) {
		return
	}
	if err := writePeersFile(m.cfg.PeersFile, addrs); err != nil {
		m.log.Warn("gossip: cannot record the known peers", "file", m.cfg.PeersFile, "err", err)
		return
	}
	m.savedPeers = addrs
}

// KnownPeers is what Config.PeersFile held at Open: the gossip addresses
// of the members this node last saw alive.
func (m *Membership) KnownPeers() []string { return slices.Clone(m.knownPeers) }

// Rejoin contacts the known peers until this node knows another alive
// member or ctx ends, like JoinRetry; it returns at once when there are
// none. A peer that now belongs to another cluster is skipped, not fatal:
// its address was reused.
func (m *Membership) Rejoin(ctx context.Context) error {
	addrs := m.KnownPeers()
	if len(addrs) == 0 {
		return nil
	}
	// Join even when gossip already reached this node: the join's push/pull
	// is what brings the whole membership now rather than in 15 s.
	for attempt := 0; ; attempt++ {
		_, err := m.Join(addrs)
		if m.ml.NumMembers() > 1 {
			m.log.Info("gossip: rejoined through the known peers", "addrs", addrs)
			return nil
		}
		if attempt%30 == 0 {
			m.log.Info("gossip: no known peer answered, retrying", "addrs", addrs, "attempt", attempt+1, "err", err)
		}
		if !m.pauseJoin(ctx) {
			return fmt.Errorf("cluster: rejoin %s: %w (last error: %v)", strings.Join(addrs, ", "), ctx.Err(), err)
		}
	}
}
