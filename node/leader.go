package node

import (
	"cmp"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/tether-proxy/tether/cluster"
	"github.com/tether-proxy/tether/keyring"
	"github.com/tether-proxy/tether/node/clustertime"
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
	since time.Time // this node's time.Now (monotonic) when it first saw the key
	index uint64
	// warned: the wait past activationWait was logged once.
	warned bool
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
		// Every node keeps its reckoning of the cluster time current, so
		// that a new leader counts on from it.
		now, ready := n.clock.Now()
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
		if !ready {
			continue // a node just started: its members' clocks come within seconds
		}
		n.leaderRound(now)
	}
}

// leaderRound is one round of the leader's duties at cluster time now; each
// logs its own failures and the next round tries again.
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
	// The keyring's duties go by the time they commit (commitTime logs
	// why there is none).
	if at, err := n.clock.CommitTime(now); err == nil {
		if err := n.ensureKey(at); err != nil {
			n.log.Error("no active key and creating one failed", "error", err)
		}
		n.activatePending(at)
		if err := n.maybeRotate(at); err != nil {
			n.log.Error("automatic key rotation failed", "error", err)
		}
		n.maybePrune(at)
	}
	n.checkSettings()
	if n.members != nil {
		// Voter reconciliation measures how long members have been failed:
		// elapsed time on this node's monotonic clock.
		if err := n.pilot.Reconcile(raftAdapter{n.store}, n.cfg.NodeID, n.members.Members(), n.store.AppliedIndex(), n.policy(), time.Now(), n.log); err != nil {
			n.log.Warn("voter reconciliation", "error", err)
		}
	}
}

// caughtUp reports whether this leader's FSM holds everything committed
// before its term, running a barrier once per term. Without it a node
// restarted alone could see no key yet (the log replays only once it leads)
// and create and activate a new one.
// leaderCaughtUp reports, without waiting, whether this leader's state
// caught up with its log in the current term (caughtUp did).
func (n *Node) leaderCaughtUp() bool {
	term := n.store.Term()
	n.lead.mu.Lock()
	defer n.lead.mu.Unlock()
	return n.lead.readyTerm == term
}

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
		VoterGrace:    n.cfg.VoterGrace,
		MaxLag:        256,
		Stabilization: 2 * time.Second,
	}
}

// ensureKey gives a cluster with no key that can encrypt one: the keys of
// a standalone keyring file if the data dir has one (its sessions carry
// over), else a new key, active at once (nobody can have been sealing).
func (n *Node) ensureKey(now time.Time) error {
	if n.ring.ActiveKeyID(now) != "" || n.rotationUnderWay(now) {
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

// rotationUnderWay: a key is installed and waits for its activation (see
// underWay).
func (n *Node) rotationUnderWay(now time.Time) bool {
	return slices.ContainsFunc(n.ring.List(now), func(md keyring.Metadata) bool { return underWay(md, now) })
}

// underWay reports whether md is a rotation under way at cluster time now:
// installed, with an activation no later than a rotation's placeholder. A
// key set to activate further out (a committed time an earlier release let
// one leader's clock push ahead) is not one: it does not hold automatic
// rotation back; the leader activates it like any installed key, once
// every member holds it.
func underWay(md keyring.Metadata, now time.Time) bool {
	return md.State == keyring.Installed && !md.Activates.After(now.Add(pendingActivation+clustertime.Tolerance))
}

// rotate installs a new key that the leader activates once every alive
// member holds it durably. It returns once the key is committed, with the
// key that was committed: a retry of a rotation that already committed
// (same request id) answers with the first try's key, not with the one it
// generated for itself, which the FSM never installed.
//
// bind is the client request's binding (store.BindRequest; "" for a
// rotation the leader starts itself).
func (n *Node) rotate(now time.Time, reqID, bind string) (keyring.Metadata, uint64, error) {
	k, err := keyring.GenerateKey(now, pendingActivation, keyring.DefaultLifetime)
	if err != nil {
		return keyring.Metadata{}, 0, err
	}
	c, err := n.store.CommitRequest(store.InstallKey{ReqID: reqID, Key: k}, bind)
	if err != nil {
		return keyring.Metadata{}, 0, err
	}
	id := cmp.Or(c.Value, k.ID)
	md, ok := n.keyMetadata(id, now)
	if !ok {
		return keyring.Metadata{}, 0, fmt.Errorf("the rotation committed key %s, which this keyring no longer holds (pruned)", id)
	}
	if md.State == keyring.Installed {
		n.lead.mu.Lock()
		if n.lead.pending == nil {
			n.lead.pending = map[string]pendingKey{}
		}
		if _, ok := n.lead.pending[id]; !ok {
			n.lead.pending[id] = pendingKey{since: time.Now(), index: c.Index}
		}
		n.lead.mu.Unlock()
	}
	if id == k.ID {
		n.log.Info("key installed; it activates once every member holds it", "id", id, "index", c.Index)
	}
	n.wakeLeader()
	return md, c.Index, nil
}

// keyMetadata is key id's metadata in this node's keyring.
func (n *Node) keyMetadata(id string, now time.Time) (keyring.Metadata, bool) {
	for _, md := range n.ring.List(now) {
		if md.ID == id {
			return md, true
		}
	}
	return keyring.Metadata{}, false
}

// activatePending activates installed keys once every alive or suspect
// member holds them durably. Failed members hold a key up for at most
// activationWait; then it activates without them, naming them. A member
// that is alive or suspect and lacks the key holds it up for as long as it
// lacks it: sealing with a key a reachable node cannot open would break
// the sessions it serves.
//
// A key activates at now, and only when now is later than every activated
// key's activation (else it waits for the next round), so the key
// activated last is the one that encrypts whatever the creation times say.
// Keys created ahead of the cluster time (by a clock an earlier release
// committed) go first, so a rotation pending with them takes over from
// them a round later.
func (n *Node) activatePending(now time.Time) {
	var ids []string
	var floor time.Time // the latest activation of a key that is activated
	mds := n.ring.List(now)
	for _, md := range mds {
		switch md.State {
		case keyring.Installed:
			ids = append(ids, md.ID)
		case keyring.Active, keyring.Inactive:
			if md.Activates.After(floor) {
				floor = md.Activates
			}
		}
	}
	ahead := func(id string) bool {
		i := slices.IndexFunc(mds, func(md keyring.Metadata) bool { return md.ID == id })
		return mds[i].Created.After(now.Add(clustertime.Tolerance))
	}
	slices.SortStableFunc(ids, func(a, b string) int { // mds is in creation order
		switch {
		case ahead(a) && !ahead(b):
			return -1
		case !ahead(a) && ahead(b):
			return 1
		}
		return 0
	})
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
			p = pendingKey{since: time.Now(), index: n.store.AppliedIndex()}
			n.lead.pending[id] = p
		}
		waited := time.Since(p.since)
		lacking, failed := n.keyLaggards(p.index)
		if len(lacking) > 0 || (len(failed) > 0 && waited < activationWait) {
			if waited > n.lead.lag {
				n.lead.lag = waited
			}
			n.lead.laggards = max(n.lead.laggards, len(lacking)+len(failed))
			if len(lacking) > 0 && waited >= activationWait && !p.warned {
				n.log.Warn("a key waits for members that are alive or suspect but do not hold it yet; it activates once they do (or once they are failed)",
					"id", id, "waited", waited.Round(time.Millisecond).String(), "waiting_for", lacking)
				p.warned = true
				n.lead.pending[id] = p
			}
			continue
		}
		if !now.After(floor) {
			continue // a key just activated at now: the next round
		}
		if len(failed) > 0 {
			n.log.Warn("activating a key that failed members do not hold: they cannot open values sealed with it until they catch up",
				"id", id, "waited", waited.Round(time.Millisecond).String(), "passed_over", failed)
			n.activationTimeouts.Add(1)
		}
		// At the cluster time: a key an earlier leader created ahead of it
		// activates now all the same.
		if _, err := n.store.Apply(activation(id, now)); err != nil {
			n.log.Warn("activating key failed", "id", id, "error", err)
			continue
		}
		floor = now
		n.activationLag.Observe(waited.Seconds())
		delete(n.lead.pending, id)
		n.log.Info("key activated", "id", id, "after", waited.Round(time.Millisecond).String())
	}
}

// activation is the command that activates key id at at. Its request id
// names the time too: a key activated once (an earlier release activated
// keys 2500 h ahead under "activate-" and the id) can be activated again
// at another time, and a retry of this one is still recognised.
func activation(id string, at time.Time) store.ActivateKey {
	return store.ActivateKey{ReqID: fmt.Sprintf("activate-%s-%d", id, at.UnixNano()), ID: id, At: at}
}

// keyLaggards are the members that have not made index durable: lacking
// are alive or suspect (they hold a key's activation up), failed are dead
// (passed over after activationWait). Members that left are not counted,
// nor those a committed Raft configuration removed (removedFromRaft),
// whatever gossip last said of them.
func (n *Node) keyLaggards(index uint64) (lacking, failed []string) {
	if n.members == nil {
		if n.store.DurableIndex() < index {
			return []string{n.cfg.NodeID}, nil
		}
		return nil, nil
	}
	durable := func(m cluster.Member) uint64 {
		if m.ID == n.cfg.NodeID {
			return n.store.DurableIndex()
		}
		return max(m.Durable, n.reportedDurable(m.ID))
	}
	members := slices.DeleteFunc(n.members.Members(), n.removedFromRaft)
	return laggardsOf(members, durable, index)
}

// laggardsOf is keyLaggards over members, durable giving each one's
// durable index. A member that reports it cannot persist (a full or
// broken disk) or that stopped applying (it needs a newer tether) is passed
// over at once: it says so in /readyz and metrics.
func laggardsOf(members []cluster.Member, durable func(cluster.Member) uint64, index uint64) (lacking, failed []string) {
	for _, m := range members {
		if m.NoPersist || m.Stopped != 0 { // its durable index is frozen: it would hold every key back
			continue
		}
		if durable(m) >= index {
			continue
		}
		switch m.State {
		case cluster.StateAlive, cluster.StateSuspect:
			lacking = append(lacking, m.ID)
		case cluster.StateDead:
			failed = append(failed, m.ID)
		}
	}
	return lacking, failed
}

// maybeRotate rotates before the newest key expires. A key set to activate
// beyond a rotation's placeholder is not counted (see underWay).
func (n *Node) maybeRotate(now time.Time) error {
	var newest *keyring.Metadata
	for _, md := range n.ring.List(now) {
		if md.State == keyring.Revoked || md.State == keyring.Expired || (md.State == keyring.Installed && !underWay(md, now)) {
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
	md, _, err := n.rotate(now, "", "")
	if err == nil {
		n.log.Info("key rotated automatically", "id", md.ID)
	}
	return err
}

// maybePrune removes keys past their retention (the time travels in the
// command, so every FSM prunes the same keys), by the cluster time bounded
// by every alive member's clock.
func (n *Node) maybePrune(now time.Time) {
	now = n.clock.Agreed(now)
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

// errBehind: this leader's state has not caught up with what earlier terms
// committed, so it must not act on it yet (a retry soon succeeds).
var errBehind = errors.New("this node just became the leader and its state has not caught up with the log yet: retry")

// keysNotHeldError: a key cannot activate because members that are alive
// or suspect do not hold it.
type keysNotHeldError struct {
	id      string
	lacking []string
}

func (e *keysNotHeldError) Error() string {
	return fmt.Sprintf("key %s is installed but %s (alive or suspect) do not hold it after %s, so it cannot take over encryption yet; "+
		"it activates once they do or once they are failed: retry with the same request id, or fix or stop them",
		e.id, strings.Join(e.lacking, ", "), activationWait)
}

// revoked is what a revocation committed.
type revoked struct {
	index       uint64   // where everything below is applied
	active      string   // the key that encrypts after it
	replacement string   // a key installed to take over (active, or pending)
	passedOver  []string // failed members that do not hold active
}

// revoke revokes key id with the protections of a rotation: it acts only
// on a caught-up state (a barrier per term, as the leader's rounds), and
// never makes a key active that an alive or suspect member lacks.
// Revoking the key that encrypts hands encryption to the newest earlier
// key (every member held it when it was active) and installs a new key
// that activates as a rotated one does; with no earlier key, the new key
// takes over only once the members hold it (or, after activationWait, only
// failed members lack it), activated before the revocation so that
// sealing never stops. now is the time it commits (commitTime); bind is
// the client request's binding (store.BindRequest), which every write of
// the revocation carries: an id used for another request is refused before
// any of them.
func (n *Node) revoke(ctx context.Context, now time.Time, id, reqID, bind string) (revoked, error) {
	if !n.caughtUp() {
		return revoked{}, errBehind
	}
	if err := n.store.CheckRequest(reqID, bind); err != nil {
		return revoked{}, err
	}
	if _, ok := n.keyMetadata(id, now); !ok {
		return revoked{}, fmt.Errorf("%w: %q", keyring.ErrUnknownKey, id)
	}
	if n.ring.ActiveKeyID(now) != id {
		c, err := n.store.CommitRequest(store.RevokeKey{ReqID: reqID, ID: id}, bind)
		return revoked{index: c.Index, active: n.ring.ActiveKeyID(time.Now())}, err
	}
	var fallback, pendingID string
	var fallbackAt, pendingAt time.Time
	for _, md := range n.ring.List(now) {
		switch {
		case md.ID == id:
		case md.State == keyring.Inactive && md.Activates.After(fallbackAt):
			fallback, fallbackAt = md.ID, md.Activates
		case md.State == keyring.Installed && md.Created.After(pendingAt):
			pendingID, pendingAt = md.ID, md.Created
		}
	}
	replReq := "revoke-" + shortHash(reqID)
	if fallback != "" {
		c, err := n.store.CommitRequest(store.RevokeKey{ReqID: reqID, ID: id}, bind)
		if err != nil {
			return revoked{}, err
		}
		out := revoked{index: c.Index, active: n.ring.ActiveKeyID(time.Now()), replacement: pendingID}
		if pendingID == "" {
			md, index, err := n.rotate(now, replReq, bind)
			if err != nil {
				n.log.Warn("the key was revoked, but installing a new key failed; the next rotation installs one", "error", err)
			}
			// The answer names the replacement: its index is where that is
			// applied too (a follower answering it waits for it).
			out.replacement, out.index = md.ID, max(out.index, index)
		}
		return out, nil
	}
	// No earlier key: a new one must be held everywhere before it encrypts.
	repl := pendingID
	if repl == "" {
		md, _, err := n.rotate(now, replReq, bind)
		if err != nil {
			return revoked{}, err
		}
		repl = md.ID
	}
	n.lead.mu.Lock()
	p, ok := n.lead.pending[repl]
	n.lead.mu.Unlock()
	if !ok {
		p = pendingKey{since: time.Now(), index: n.store.AppliedIndex()}
	}
	var failed []string
	for {
		var lacking []string
		lacking, failed = n.keyLaggards(p.index)
		waited := time.Since(p.since)
		if len(lacking) == 0 && (len(failed) == 0 || waited >= activationWait) {
			break
		}
		if waited >= activationWait {
			return revoked{}, &keysNotHeldError{repl, lacking}
		}
		select {
		case <-ctx.Done():
			return revoked{}, fmt.Errorf("waiting for the members to hold the replacement key %s: %w", repl, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
	if len(failed) > 0 {
		n.log.Warn("activating a replacement key that failed members do not hold", "id", repl, "passed_over", failed)
		n.activationTimeouts.Add(1)
	}
	// The wait took up to activationWait: activate at the time it ended.
	if t, _ := n.clock.Now(); t.After(now) {
		if at, err := n.clock.CommitTime(t); err == nil {
			now = at
		}
	}
	if _, err := n.store.Commit(activation(repl, now)); err != nil {
		return revoked{}, err
	}
	c, err := n.store.CommitRequest(store.RevokeKey{ReqID: reqID, ID: id}, bind)
	if err != nil {
		return revoked{}, err
	}
	return revoked{index: c.Index, active: n.ring.ActiveKeyID(time.Now()), replacement: repl, passedOver: failed}, nil
}

// shortHash is a short fixed-length digest of s, to derive request ids.
func shortHash(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:16])
}

// raftAdapter lets cluster reconcile voters through the store.
type raftAdapter struct{ st *store.Store }

var _ cluster.Raft = raftAdapter{}

func (a raftAdapter) IsLeader() bool { return a.st.IsLeader() }
func (a raftAdapter) Term() uint64   { return a.st.Term() }
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
// gossip says "left", and the leader, asked directly, drops it from the
// Raft configuration. It succeeds only once the node is out of Raft. A
// leave that would not take the node out (the leader keeps
// --bootstrap-expect voters) or would stall the cluster (below quorum) is
// refused before anything changes, unless force. auth is the caller's
// Authorization header, passed on to the leader.
func (n *Node) leave(ctx context.Context, force bool, auth string) error {
	if n.members == nil {
		return &leaveRefused{"this node runs alone (no --cluster-secret-file): there is no cluster to leave"}
	}
	servers, err := n.store.Servers()
	if err != nil {
		return fmt.Errorf("reading the Raft configuration: %w", err)
	}
	up := map[string]bool{}
	for _, m := range n.members.Members() {
		up[m.ID] = m.State == cluster.StateAlive
	}
	leader, _ := n.store.Leader()
	if err := leavePlan(n.cfg.NodeID, leader, servers, up, n.cfg.BootstrapExpect, force); err != nil {
		return err
	}
	inRaft := slices.ContainsFunc(servers, func(s store.Server) bool { return s.ID == n.cfg.NodeID })
	// servers is raft's latest configuration: a removal of this node (an
	// earlier leave) may be in it uncommitted, and only the leader can
	// tell whether it committed.
	inRaft = inRaft || n.store.InCommittedConfiguration(n.cfg.NodeID)
	if inRaft && n.store.IsLeader() {
		if err := n.store.TransferLeadership(); err != nil {
			return fmt.Errorf("moving leadership off this node before it leaves failed (nothing changed; retry): %w", err)
		}
	}
	if err := n.members.Leave(5 * time.Second); err != nil {
		return fmt.Errorf("gossip leave: %w", err)
	}
	if !inRaft {
		n.log.Info("left the cluster (this node was not in the Raft configuration)")
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, leaveWait)
	defer cancel()
	var last error
	for attempt := 0; ; attempt++ {
		out, err := n.askRemoval(ctx, auth, attempt)
		if out {
			n.log.Info("left the cluster")
			return nil
		}
		if err != nil {
			last = err
		}
		select {
		case <-ctx.Done():
			msg := fmt.Sprintf("this node left gossip, but its removal from the Raft configuration is not committed after %s", leaveWait)
			if last != nil {
				msg += " (" + last.Error() + ")"
			}
			n.log.Warn(msg)
			return fmt.Errorf("%s: stop it and run `tether remove %s` on another node", msg, n.cfg.NodeID)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// leaveRefused is a leave refused before anything changed.
type leaveRefused struct{ msg string }

func (e *leaveRefused) Error() string { return e.msg }

// leavePlan refuses a leave that cannot or should not take self out of
// Raft: no leader to commit it; the only voter; a voter whose leave would
// go below --bootstrap-expect (the leader never removes voters below it,
// see cluster/DESIGN.md) or leave fewer alive voters than a quorum, unless
// force. up says which members gossip sees alive.
func leavePlan(self, leader string, servers []store.Server, up map[string]bool, expect int, force bool) error {
	var me *store.Server
	voters, aliveOthers := 0, 0
	for i, s := range servers {
		if s.ID == self {
			me = &servers[i]
		}
		if s.Voter {
			voters++
			if s.ID != self && up[s.ID] {
				aliveOthers++
			}
		}
	}
	if me == nil {
		return nil // not in Raft: leaving gossip is all there is
	}
	if leader == "" {
		return &leaveRefused{"refused: no Raft leader, so nothing can take this node out of the Raft configuration; " +
			"bring a majority of the voters back first, or stop this node and run `tether remove " + self + "` once the cluster has a leader"}
	}
	if !me.Voter {
		return nil // non-voters leave without limit
	}
	if voters == 1 {
		return &leaveRefused{"refused: this node is the cluster's only voter; leaving would end the cluster. Stop it instead"}
	}
	if force {
		return nil
	}
	if len(servers)-1 < expect {
		return &leaveRefused{fmt.Sprintf("refused: the cluster was started with --bootstrap-expect %d and has %d servers; the leader keeps at least %d, "+
			"so it would never take this node out of Raft. To shrink the cluster anyway run `tether leave --force` "+
			"(the cluster then runs with %d voters), or stop this node and run `tether remove %s` on another node",
			expect, len(servers), expect, voters-1, self)}
	}
	if need := (voters-1)/2 + 1; aliveOthers < need {
		return &leaveRefused{fmt.Sprintf("refused: after this node leaves, %d of the %d other voters are alive, below the quorum of %d: "+
			"the cluster would stop taking writes. Bring the failed voters back or `tether remove` them first, or run `tether leave --force`",
			aliveOthers, voters-1, need)}
	}
	return nil
}

// askRemoval asks the leader to remove this node from the Raft
// configuration (DELETE /v1/members/{id}, as a forwarded write) and says
// whether the node is out: only once the removal is committed. Raft's
// view on this node (Servers) drops it as soon as the removal is in its
// log, committed or not, and a removed node seldom learns the commit (the
// leader stops replicating to it), so the leader's answer decides: 200
// once the removal committed. A 404 is not taken for "out": a leader
// of an earlier version gave it for a removal still pending.
func (n *Node) askRemoval(ctx context.Context, auth string, attempt int) (bool, error) {
	if _, ok := n.store.RemovedAt(n.cfg.NodeID); ok {
		return true, nil // this node applied its own removal: committed
	}
	// The leader this node knows, else another alive member, a different
	// one each attempt, which forwards to the leader it knows: a node
	// whose removal is in its log hears from no leader elected after it.
	to, direct := "", false
	if leader, _ := n.store.Leader(); leader != "" && leader != n.cfg.NodeID {
		to, direct = n.leaderAdmin(leader), true
	}
	if to == "" {
		var others []string
		for _, m := range n.members.Members() {
			if m.ID != n.cfg.NodeID && m.State == cluster.StateAlive && m.AdminAddr != "" {
				others = append(others, m.AdminAddr)
			}
		}
		if len(others) == 0 {
			return false, errors.New("no leader known and no other member alive")
		}
		to = others[attempt%len(others)]
	}
	u := url.URL{Scheme: "http", Host: to, Path: "/v1/members/" + url.PathEscape(n.cfg.NodeID)}
	req, err := http.NewRequestWithContext(ctx, http.MethodDelete, u.String(), nil)
	if err != nil {
		return false, err
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	if direct {
		req.Header.Set(hdrForwardedBy, n.cfg.NodeID) // should it no longer lead, it answers 503 rather than forward
	}
	req.Header.Set(hdrRequestID, "leave-"+n.cfg.NodeID)
	resp, err := forwardClient.Do(req)
	if err != nil {
		return false, err
	}
	defer resp.Body.Close()
	var body struct {
		Error string `json:"error"`
	}
	_ = json.NewDecoder(io.LimitReader(resp.Body, 1<<16)).Decode(&body)
	if resp.StatusCode == http.StatusOK {
		return true, nil // the removal is committed
	}
	return false, fmt.Errorf("the admin API at %s answered %d: %s", to, resp.StatusCode, body.Error)
}

// newID is a random 128-bit id in hex.
func newID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
