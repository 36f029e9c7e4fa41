package node

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/tether-proxy/tether/cluster"
	"github.com/tether-proxy/tether/keyring"
	"github.com/tether-proxy/tether/store"
)

// rotateFraction: the leader rotates when the newest key has less than
// 1/rotateFraction of its lifetime left (keyring.Manager's rule).
const rotateFraction = 10

// leaderBarrierTimeout bounds a new leader's wait for its FSM to catch up.
const leaderBarrierTimeout = 5 * time.Second

// leaderState is what the leader remembers between rounds. It is rebuilt
// from the replicated state after a leader change: nothing here is needed
// for correctness, only for timing.
type leaderState struct {
	mu sync.Mutex
	// pending maps an installed, not yet active key to when this leader
	// first saw it and the index every member must have made durable.
	pending map[string]pendingKey
	// lag is how long the oldest pending key has waited; laggards the
	// members it waits for (metrics).
	lag      time.Duration
	laggards int
	// readyTerm is the term in which this leader's FSM caught up with
	// everything committed before it (a barrier): until then its state may
	// lack keys and the cluster id, and it must not act on it.
	readyTerm uint64
}

type pendingKey struct {
	since time.Time
	index uint64
}

// leaderLoop runs the leader's duties every leaderInterval and whenever
// membership or the replicated state changes.
func (n *Node) leaderLoop(ctx context.Context) {
	defer n.bg.Done()
	if n.manualLeader {
		return // tests drive leaderRound with their own clock
	}
	t := time.NewTicker(leaderInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-n.leaderWake:
		}
		if !n.store.IsLeader() {
			n.lead.mu.Lock()
			n.lead.pending, n.lead.lag, n.lead.laggards = nil, 0, 0
			n.lead.mu.Unlock()
			// Reports are for the leader: a later term starts afresh.
			n.durMu.Lock()
			n.durables = nil
			n.durMu.Unlock()
			continue
		}
		n.leaderRound(time.Now())
	}
}

// leaderRound is one round of the leader's duties; each logs its own
// failures and the next round tries again.
func (n *Node) leaderRound(now time.Time) {
	if !n.caughtUp() {
		return
	}
	if n.store.ClusterID() == "" {
		id := newID()
		if _, err := n.store.Apply(store.SetClusterID{ID: id}); err != nil {
			n.log.Warn("setting the cluster id failed", "error", err)
			return
		}
		n.log.Info("cluster id set", "cluster_id", n.store.ClusterID())
	}
	if err := n.ensureKey(now); err != nil {
		n.log.Error("no active key and creating one failed", "error", err)
	}
	n.activatePending(now)
	if err := n.maybeRotate(now); err != nil {
		n.log.Error("automatic key rotation failed", "error", err)
	}
	n.maybePrune(now)
	if n.members != nil {
		if err := n.pilot.Reconcile(raftAdapter{n.store}, n.cfg.NodeID, n.members.Members(), n.store.AppliedIndex(), n.policy(), now, n.log); err != nil {
			n.log.Warn("voter reconciliation", "error", err)
		}
	}
}

// caughtUp reports whether this leader's FSM holds everything committed
// before its term, running a barrier once per term. Without it a node
// restarted alone could see no key yet (the log replays only once it leads)
// and create and activate a new one.
func (n *Node) caughtUp() bool {
	term := n.store.Term()
	n.lead.mu.Lock()
	ready := n.lead.readyTerm == term
	n.lead.mu.Unlock()
	if ready {
		return true
	}
	if err := n.store.Barrier(leaderBarrierTimeout); err != nil {
		n.log.Warn("the leader's state did not catch up; its duties wait for the next round", "error", err)
		return false
	}
	n.lead.mu.Lock()
	n.lead.readyTerm = term
	n.lead.mu.Unlock()
	return true
}

func (n *Node) policy() cluster.Policy {
	return cluster.Policy{
		MaxVoters:     n.cfg.RaftVoters,
		Expect:        n.cfg.BootstrapExpect,
		ReapTimeout:   n.cfg.ReapTimeout,
		MaxLag:        256,
		Stabilization: 2 * time.Second,
	}
}

// ensureKey gives a cluster with no key that can encrypt one: the keys of
// a standalone keyring file if the data dir has one (its sessions carry
// over), else a new key, active at once (nobody can have been sealing).
func (n *Node) ensureKey(now time.Time) error {
	if n.ring.ActiveKeyID(now) != "" || n.hasPending(now) {
		return nil
	}
	if n.ring.Len() == 0 {
		imported, err := n.importKeyringFile(now)
		if err != nil {
			n.log.Warn("the standalone keyring file was not imported", "error", err)
		} else if imported > 0 && n.ring.ActiveKeyID(now) != "" {
			return nil
		}
	}
	k, err := keyring.GenerateKey(now, 0, keyring.DefaultLifetime)
	if err != nil {
		return err
	}
	if _, err := n.store.Apply(store.InstallKey{Key: k}); err != nil {
		return err
	}
	n.log.Info("key created", "id", k.ID)
	return nil
}

// importKeyringFile installs the keys of the keyring.json a standalone
// node of an earlier version left in the data dir.
func (n *Node) importKeyringFile(now time.Time) (int, error) {
	var kek []byte
	if n.cfg.ClusterSecretFile != "" {
		secret, err := readSecretFile(n.cfg.ClusterSecretFile)
		if err != nil {
			return 0, err
		}
		if kek, err = keyring.DeriveKEK(secret, keyring.InfoKeyringFile); err != nil {
			return 0, err
		}
	}
	path := filepath.Join(n.cfg.DataDir, "keyring.json")
	fs, err := keyring.OpenFile(path, kek)
	if err != nil {
		return 0, err
	}
	keys, err := fs.Load()
	if err != nil || len(keys) == 0 {
		return 0, err
	}
	for _, k := range keys {
		revoked := k.Revoked
		k.Revoked = false
		if _, err := n.store.Apply(store.InstallKey{ReqID: "import-" + k.ID, Key: k}); err != nil {
			return 0, fmt.Errorf("importing key %s: %w", k.ID, err)
		}
		if revoked {
			if _, err := n.store.Apply(store.RevokeKey{ReqID: "import-revoke-" + k.ID, ID: k.ID}); err != nil {
				return 0, fmt.Errorf("importing key %s: %w", k.ID, err)
			}
		}
	}
	n.log.Info("imported the standalone keyring file", "file", path, "keys", len(keys))
	return len(keys), nil
}

// hasPending: a key is installed and waits for activation.
func (n *Node) hasPending(now time.Time) bool {
	for _, md := range n.ring.List(now) {
		if md.State == keyring.Installed {
			return true
		}
	}
	return false
}

// rotate installs a new key that the leader activates once every alive
// member holds it durably. It returns once the key is committed.
func (n *Node) rotate(now time.Time, reqID string) (keyring.Metadata, error) {
	k, err := keyring.GenerateKey(now, pendingActivation, keyring.DefaultLifetime)
	if err != nil {
		return keyring.Metadata{}, err
	}
	idx, err := n.store.Apply(store.InstallKey{ReqID: reqID, Key: k})
	if err != nil {
		return keyring.Metadata{}, err
	}
	n.lead.mu.Lock()
	if n.lead.pending == nil {
		n.lead.pending = map[string]pendingKey{}
	}
	n.lead.pending[k.ID] = pendingKey{since: now, index: idx}
	n.lead.mu.Unlock()
	n.log.Info("key installed; it activates once every member holds it", "id", k.ID, "index", idx)
	n.wakeLeader()
	return k.Metadata(now), nil
}

// activatePending activates installed keys that every alive member holds
// durably, or that waited longer than activationWait.
func (n *Node) activatePending(now time.Time) {
	var ids []string
	created := map[string]time.Time{}
	for _, md := range n.ring.List(now) {
		if md.State == keyring.Installed {
			ids = append(ids, md.ID)
			created[md.ID] = md.Created
		}
	}
	n.lead.mu.Lock()
	defer n.lead.mu.Unlock()
	if n.lead.pending == nil {
		n.lead.pending = map[string]pendingKey{}
	}
	for id := range n.lead.pending {
		if !slices.Contains(ids, id) {
			delete(n.lead.pending, id)
		}
	}
	n.lead.lag, n.lead.laggards = 0, 0
	for _, id := range ids {
		p, ok := n.lead.pending[id]
		if !ok {
			// Installed by an earlier leader: everything this leader has
			// applied is at least what that key needs.
			p = pendingKey{since: now, index: n.store.AppliedIndex()}
			n.lead.pending[id] = p
		}
		laggards := n.laggards(p.index)
		waited := now.Sub(p.since)
		if len(laggards) > 0 && waited < activationWait {
			if waited > n.lead.lag {
				n.lead.lag = waited
			}
			n.lead.laggards = max(n.lead.laggards, len(laggards))
			continue
		}
		if len(laggards) > 0 {
			n.log.Warn("activating a key before every member holds it: they may fail to open values sealed with it until they catch up",
				"id", id, "waited", waited.Round(time.Millisecond).String(), "laggards", laggards)
			n.activationTimeouts.Add(1)
		}
		// Never before its creation, should this leader's clock trail the
		// one that created the key.
		at := n.agreedTime(now) // not ahead of the members' clocks
		if c := created[id]; at.Before(c) {
			at = c
		}
		if _, err := n.store.Apply(store.ActivateKey{ReqID: "activate-" + id, ID: id, At: at}); err != nil {
			n.log.Warn("activating key failed", "id", id, "error", err)
			continue
		}
		n.activationLag.Observe(waited.Seconds())
		delete(n.lead.pending, id)
		n.log.Info("key activated", "id", id, "after", waited.Round(time.Millisecond).String())
	}
}

// laggards are the alive members that have not made index durable.
func (n *Node) laggards(index uint64) []string {
	if n.members == nil {
		if n.store.DurableIndex() < index {
			return []string{n.cfg.NodeID}
		}
		return nil
	}
	var out []string
	for _, m := range n.members.Members() {
		if m.State != "alive" {
			continue
		}
		d := max(m.Durable, n.reportedDurable(m.ID))
		if m.ID == n.cfg.NodeID {
			d = n.store.DurableIndex()
		}
		if d < index {
			out = append(out, m.ID)
		}
	}
	return out
}

// maybeRotate rotates before the newest key expires.
func (n *Node) maybeRotate(now time.Time) error {
	var newest *keyring.Metadata
	for _, md := range n.ring.List(now) {
		if md.State == keyring.Revoked || md.State == keyring.Expired {
			continue
		}
		if newest == nil || md.Activates.After(newest.Activates) {
			m := md
			newest = &m
		}
	}
	if newest == nil || newest.State == keyring.Installed {
		return nil // ensureKey handles none; a pending key is a rotation under way
	}
	life := newest.Expires.Sub(newest.Activates)
	if newest.Expires.Sub(now) > life/rotateFraction {
		return nil
	}
	md, err := n.rotate(now, "")
	if err == nil {
		n.log.Info("key rotated automatically", "id", md.ID)
	}
	return err
}

// maybePrune removes keys past their retention (the leader's clock travels
// in the command, so every FSM prunes the same keys).
func (n *Node) maybePrune(now time.Time) {
	now = n.agreedTime(now)
	retention := n.ring.Retention()
	for _, md := range n.ring.List(now) {
		if !now.Before(md.Expires.Add(retention)) {
			if _, err := n.store.Apply(store.PruneKeys{Now: now}); err != nil {
				n.log.Warn("pruning keys failed", "error", err)
			}
			return
		}
	}
}

// revoke revokes key id; revoking the key that encrypts installs an
// already active replacement in the same entry, so sealing never stops.
func (n *Node) revoke(now time.Time, id, reqID string) error {
	cmd := store.RevokeKey{ReqID: reqID, ID: id}
	if n.ring.ActiveKeyID(now) == id {
		k, err := keyring.GenerateKey(now, 0, keyring.DefaultLifetime)
		if err != nil {
			return err
		}
		cmd.Replacement = &k
	}
	_, err := n.store.Apply(cmd)
	return err
}

// raftAdapter lets cluster reconcile voters through the store.
type raftAdapter struct{ st *store.Store }

var _ cluster.Raft = raftAdapter{}

func (a raftAdapter) IsLeader() bool { return a.st.IsLeader() }
func (a raftAdapter) Servers() ([]cluster.RaftServer, error) {
	ss, err := a.st.Servers()
	if err != nil {
		return nil, err
	}
	out := make([]cluster.RaftServer, len(ss))
	for i, s := range ss {
		out[i] = cluster.RaftServer{ID: s.ID, Address: s.Address, Voter: s.Voter}
	}
	return out, nil
}
func (a raftAdapter) AddVoter(id, addr string) error    { return a.st.AddVoter(id, addr) }
func (a raftAdapter) AddNonvoter(id, addr string) error { return a.st.AddNonvoter(id, addr) }
func (a raftAdapter) DemoteVoter(id string) error       { return a.st.DemoteVoter(id) }
func (a raftAdapter) RemoveServer(id string) error      { return a.st.RemoveServer(id) }

// leave takes this node out of the cluster: leadership moves first, then
// gossip says "left", and the leader drops it from the Raft configuration.
func (n *Node) leave(ctx context.Context) error {
	if n.members == nil {
		return errors.New("this node runs alone (no --cluster-secret-file): there is no cluster to leave")
	}
	if n.store.IsLeader() {
		if err := n.store.TransferLeadership(); err != nil {
			n.log.Warn("leadership transfer before leaving failed; leaving anyway", "error", err)
		}
	}
	if err := n.members.Leave(5 * time.Second); err != nil {
		return fmt.Errorf("gossip leave: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, leaveWait)
	defer cancel()
	for {
		servers, err := n.store.Servers()
		if err == nil && !slices.ContainsFunc(servers, func(s store.Server) bool { return s.ID == n.cfg.NodeID }) {
			n.log.Info("left the cluster")
			return nil
		}
		select {
		case <-ctx.Done():
			n.log.Warn("left gossip; the leader has not removed this node from Raft yet (it will once it sees the leave)")
			return nil
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// newID is a random 128-bit id in hex.
func newID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
