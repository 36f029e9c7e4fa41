package leader

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/tether-proxy/tether/cluster"
	"github.com/tether-proxy/tether/keyring"
	"github.com/tether-proxy/tether/node/clustertime"
	"github.com/tether-proxy/tether/store"
)

// ensureKey gives a cluster with no key that can encrypt one: the keys of
// a standalone keyring file if the data dir has one (its sessions carry
// over), else a new key, active at once (nobody can have been sealing).
func (l *Leader) ensureKey(now time.Time) error {
	ring := l.cfg.Ring
	if ring.ActiveKeyID(now) != "" || l.rotationUnderWay(now) {
		return nil
	}
	if ring.Len() == 0 {
		imported, err := l.importKeyringFile(now)
		if err != nil {
			l.log.Warn("the standalone keyring file was not imported", "error", err)
		} else if imported > 0 && ring.ActiveKeyID(now) != "" {
			return nil
		}
	}
	k, err := keyring.GenerateKey(now, 0, keyring.DefaultLifetime)
	if err != nil {
		return err
	}
	if _, err := l.cfg.Store.Apply(store.InstallKey{Key: k}); err != nil {
		return err
	}
	l.log.Info("key created", "id", k.ID)
	return nil
}

// importKeyringFile installs the keys of the keyring.json a standalone
// node of an earlier version left in the data dir.
func (l *Leader) importKeyringFile(now time.Time) (int, error) {
	if l.cfg.KeyringFile == "" {
		return 0, nil
	}
	var kek []byte
	if l.cfg.KeyringKEK != nil {
		var err error
		if kek, err = l.cfg.KeyringKEK(); err != nil {
			return 0, err
		}
	}
	path := l.cfg.KeyringFile
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
		if _, err := l.cfg.Store.Apply(store.InstallKey{ReqID: "import-" + k.ID, Key: k}); err != nil {
			return 0, fmt.Errorf("importing key %s: %w", k.ID, err)
		}
		if revoked {
			if _, err := l.cfg.Store.Apply(store.RevokeKey{ReqID: "import-revoke-" + k.ID, ID: k.ID}); err != nil {
				return 0, fmt.Errorf("importing key %s: %w", k.ID, err)
			}
		}
	}
	l.log.Info("imported the standalone keyring file", "file", path, "keys", len(keys))
	return len(keys), nil
}

// rotationUnderWay: a key is installed and waits for its activation (see
// underWay).
func (l *Leader) rotationUnderWay(now time.Time) bool {
	return slices.ContainsFunc(l.cfg.Ring.List(now), func(md keyring.Metadata) bool { return underWay(md, now) })
}

// underWay reports whether md is a rotation under way at cluster time now:
// installed, with an activation no later than a rotation's placeholder. A
// key set to activate further out (a committed time an earlier release let
// one leader's clock push ahead) is not one: it does not hold automatic
// rotation back; the leader activates it like any installed key, once
// every member holds it.
func underWay(md keyring.Metadata, now time.Time) bool {
	return md.State == keyring.Installed && !md.Activates.After(now.Add(PendingActivation+clustertime.Tolerance))
}

// RotateNow is a client's rotation: Rotate at the cluster time, on a
// state that caught up with the log, refusing a request id already used
// for another request before anything is written.
func (l *Leader) RotateNow(reqID, bind string) (keyring.Metadata, uint64, error) {
	if !l.CaughtUp() {
		return keyring.Metadata{}, 0, ErrBehind
	}
	if err := l.cfg.Store.CheckRequest(reqID, bind); err != nil {
		return keyring.Metadata{}, 0, err
	}
	now, err := l.cfg.Clock.Known()
	if err != nil {
		return keyring.Metadata{}, 0, err
	}
	at, err := l.cfg.Clock.CommitTime(now)
	if err != nil {
		return keyring.Metadata{}, 0, err
	}
	return l.Rotate(at, reqID, bind)
}

// Rotate installs a new key that the leader activates once every alive
// member holds it durably. It returns once the key is committed, with the
// key that was committed and its index: a retry of a rotation that
// already committed (same request id) answers with the first try's key,
// not with the one it generated for itself, which the FSM never installed.
//
// bind is the client request's binding (store.BindRequest; "" for a
// rotation the leader starts itself).
func (l *Leader) Rotate(now time.Time, reqID, bind string) (keyring.Metadata, uint64, error) {
	k, err := keyring.GenerateKey(now, PendingActivation, keyring.DefaultLifetime)
	if err != nil {
		return keyring.Metadata{}, 0, err
	}
	c, err := l.cfg.Store.CommitRequest(store.InstallKey{ReqID: reqID, Key: k}, bind)
	if err != nil {
		return keyring.Metadata{}, 0, err
	}
	id := cmp.Or(c.Value, k.ID)
	md, ok := l.keyMetadata(id, now)
	if !ok {
		return keyring.Metadata{}, 0, fmt.Errorf("the rotation committed key %s, which this keyring no longer holds (pruned)", id)
	}
	if md.State == keyring.Installed {
		l.st.mu.Lock()
		if l.st.pending == nil {
			l.st.pending = map[string]pendingKey{}
		}
		if _, ok := l.st.pending[id]; !ok {
			l.st.pending[id] = pendingKey{since: time.Now(), index: c.Index}
		}
		l.st.mu.Unlock()
	}
	if id == k.ID {
		l.log.Info("key installed; it activates once every member holds it", "id", id, "index", c.Index)
	}
	l.wake()
	return md, c.Index, nil
}

// wake runs a round soon (the node's wake channel has room for one).
func (l *Leader) wake() {
	select {
	case l.cfg.Wake <- struct{}{}:
	default:
	}
}

// keyMetadata is key id's metadata in this node's keyring.
func (l *Leader) keyMetadata(id string, now time.Time) (keyring.Metadata, bool) {
	for _, md := range l.cfg.Ring.List(now) {
		if md.ID == id {
			return md, true
		}
	}
	return keyring.Metadata{}, false
}

// PendingIndex is the index every member must hold durably before the
// installed key id activates, as this leader remembers it.
func (l *Leader) PendingIndex(id string) (uint64, bool) {
	l.st.mu.Lock()
	defer l.st.mu.Unlock()
	p, ok := l.st.pending[id]
	return p.index, ok
}

// activatePending activates installed keys once every alive or suspect
// member holds them durably. Failed members hold a key up for at most
// ActivationWait; then it activates without them, naming them. A member
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
func (l *Leader) activatePending(now time.Time) {
	var ids []string
	var floor time.Time // the latest activation of a key that is activated
	mds := l.cfg.Ring.List(now)
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
	l.st.mu.Lock()
	defer l.st.mu.Unlock()
	if l.st.pending == nil {
		l.st.pending = map[string]pendingKey{}
	}
	for id := range l.st.pending {
		if !slices.Contains(ids, id) {
			delete(l.st.pending, id)
		}
	}
	l.st.lag, l.st.laggards = 0, 0
	for _, id := range ids {
		p, ok := l.st.pending[id]
		if !ok {
			// Installed by an earlier leader: everything this leader has
			// applied is at least what that key needs.
			p = pendingKey{since: time.Now(), index: l.cfg.Store.AppliedIndex()}
			l.st.pending[id] = p
		}
		waited := time.Since(p.since)
		lacking, failed := l.keyLaggards(p.index)
		if len(lacking) > 0 || (len(failed) > 0 && waited < ActivationWait) {
			if waited > l.st.lag {
				l.st.lag = waited
			}
			l.st.laggards = max(l.st.laggards, len(lacking)+len(failed))
			if len(lacking) > 0 && waited >= ActivationWait && !p.warned {
				l.log.Warn("a key waits for members that are alive or suspect but do not hold it yet; it activates once they do (or once they are failed)",
					"id", id, "waited", waited.Round(time.Millisecond).String(), "waiting_for", lacking)
				p.warned = true
				l.st.pending[id] = p
			}
			continue
		}
		if !now.After(floor) {
			continue // a key just activated at now: the next round
		}
		if len(failed) > 0 {
			l.log.Warn("activating a key that failed members do not hold: they cannot open values sealed with it until they catch up",
				"id", id, "waited", waited.Round(time.Millisecond).String(), "passed_over", failed)
			l.activationTimeouts.Add(1)
		}
		// At the cluster time: a key an earlier leader created ahead of it
		// activates now all the same.
		if _, err := l.cfg.Store.Apply(activation(id, now)); err != nil {
			l.log.Warn("activating key failed", "id", id, "error", err)
			continue
		}
		floor = now
		l.activationLag.Observe(waited.Seconds())
		delete(l.st.pending, id)
		l.log.Info("key activated", "id", id, "after", waited.Round(time.Millisecond).String())
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
// (passed over after ActivationWait). Members that left are not counted,
// nor those a committed Raft configuration removed (RemovedFromRaft),
// whatever gossip last said of them.
func (l *Leader) keyLaggards(index uint64) (lacking, failed []string) {
	st := l.cfg.Store
	if l.cfg.Members == nil {
		if st.DurableIndex() < index {
			return []string{l.cfg.Self}, nil
		}
		return nil, nil
	}
	durable := func(m cluster.Member) uint64 {
		if m.ID == l.cfg.Self {
			return st.DurableIndex()
		}
		return max(m.Durable, l.cfg.Reports.of(m.ID))
	}
	members := l.cfg.Members.Members()
	if l.cfg.RemovedFromRaft != nil {
		members = slices.DeleteFunc(members, l.cfg.RemovedFromRaft)
	}
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
func (l *Leader) maybeRotate(now time.Time) error {
	var newest *keyring.Metadata
	for _, md := range l.cfg.Ring.List(now) {
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
	if newest.Expires.Sub(now) > life/RotateFraction {
		return nil
	}
	md, _, err := l.Rotate(now, "", "")
	if err == nil {
		l.log.Info("key rotated automatically", "id", md.ID)
	}
	return err
}

// maybePrune removes keys past their retention (the time travels in the
// command, so every FSM prunes the same keys), by the cluster time bounded
// by every alive member's clock.
func (l *Leader) maybePrune(now time.Time) {
	now = l.cfg.Clock.Agreed(now)
	retention := l.cfg.Ring.Retention()
	for _, md := range l.cfg.Ring.List(now) {
		if !now.Before(md.Expires.Add(retention)) {
			if _, err := l.cfg.Store.Apply(store.PruneKeys{Now: now}); err != nil {
				l.log.Warn("pruning keys failed", "error", err)
			}
			return
		}
	}
}

// ErrBehind: this leader's state has not caught up with what earlier
// terms committed, so it must not act on it yet (a retry soon succeeds).
var ErrBehind = errors.New("this node just became the leader and its state has not caught up with the log yet: retry")

// KeysNotHeldError: a key cannot activate because members that are alive
// or suspect do not hold it.
type KeysNotHeldError struct {
	id      string
	lacking []string
}

func (e *KeysNotHeldError) Error() string {
	return fmt.Sprintf("key %s is installed but %s (alive or suspect) do not hold it after %s, so it cannot take over encryption yet; "+
		"it activates once they do or once they are failed: retry with the same request id, or fix or stop them",
		e.id, strings.Join(e.lacking, ", "), ActivationWait)
}

// Revoked is what a revocation committed.
type Revoked struct {
	Index       uint64   // where everything below is applied
	Active      string   // the key that encrypts after it
	Replacement string   // a key installed to take over (active, or pending)
	PassedOver  []string // failed members that do not hold Active
}

// Revoke revokes key id with the protections of a rotation: it acts only
// on a caught-up state (a barrier per term, as the leader's rounds), and
// never makes a key active that an alive or suspect member lacks.
// Revoking the key that encrypts hands encryption to the newest earlier
// key (every member held it when it was active) and installs a new key
// that activates as a rotated one does; with no earlier key, the new key
// takes over only once the members hold it (or, after ActivationWait, only
// failed members lack it), activated before the revocation so that
// sealing never stops. It commits at the cluster time; bind is the client
// request's binding (store.BindRequest), which every write of the
// revocation carries: an id used for another request is refused before
// any of them.
func (l *Leader) Revoke(ctx context.Context, id, reqID, bind string) (Revoked, error) {
	st, ring := l.cfg.Store, l.cfg.Ring
	now, err := l.cfg.Clock.Known()
	if err != nil {
		return Revoked{}, err
	}
	if now, err = l.cfg.Clock.CommitTime(now); err != nil {
		return Revoked{}, err
	}
	if !l.CaughtUp() {
		return Revoked{}, ErrBehind
	}
	if err := st.CheckRequest(reqID, bind); err != nil {
		return Revoked{}, err
	}
	if _, ok := l.keyMetadata(id, now); !ok {
		return Revoked{}, fmt.Errorf("%w: %q", keyring.ErrUnknownKey, id)
	}
	if ring.ActiveKeyID(now) != id {
		c, err := st.CommitRequest(store.RevokeKey{ReqID: reqID, ID: id}, bind)
		return Revoked{Index: c.Index, Active: ring.ActiveKeyID(time.Now())}, err
	}
	var fallback, pendingID string
	var fallbackAt, pendingAt time.Time
	for _, md := range ring.List(now) {
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
		c, err := st.CommitRequest(store.RevokeKey{ReqID: reqID, ID: id}, bind)
		if err != nil {
			return Revoked{}, err
		}
		out := Revoked{Index: c.Index, Active: ring.ActiveKeyID(time.Now()), Replacement: pendingID}
		if pendingID == "" {
			md, index, err := l.Rotate(now, replReq, bind)
			if err != nil {
				l.log.Warn("the key was revoked, but installing a new key failed; the next rotation installs one", "error", err)
			}
			// The answer names the replacement: its index is where that is
			// applied too (a follower answering it waits for it).
			out.Replacement, out.Index = md.ID, max(out.Index, index)
		}
		return out, nil
	}
	// No earlier key: a new one must be held everywhere before it encrypts.
	repl := pendingID
	if repl == "" {
		md, _, err := l.Rotate(now, replReq, bind)
		if err != nil {
			return Revoked{}, err
		}
		repl = md.ID
	}
	l.st.mu.Lock()
	p, ok := l.st.pending[repl]
	l.st.mu.Unlock()
	if !ok {
		p = pendingKey{since: time.Now(), index: st.AppliedIndex()}
	}
	var failed []string
	for {
		var lacking []string
		lacking, failed = l.keyLaggards(p.index)
		waited := time.Since(p.since)
		if len(lacking) == 0 && (len(failed) == 0 || waited >= ActivationWait) {
			break
		}
		if waited >= ActivationWait {
			return Revoked{}, &KeysNotHeldError{repl, lacking}
		}
		select {
		case <-ctx.Done():
			return Revoked{}, fmt.Errorf("waiting for the members to hold the replacement key %s: %w", repl, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
	if len(failed) > 0 {
		l.log.Warn("activating a replacement key that failed members do not hold", "id", repl, "passed_over", failed)
		l.activationTimeouts.Add(1)
	}
	// The wait took up to ActivationWait: activate at the time it ended.
	if t, _ := l.cfg.Clock.Now(); t.After(now) {
		if at, err := l.cfg.Clock.CommitTime(t); err == nil {
			now = at
		}
	}
	if _, err := st.Commit(activation(repl, now)); err != nil {
		return Revoked{}, err
	}
	c, err := st.CommitRequest(store.RevokeKey{ReqID: reqID, ID: id}, bind)
	if err != nil {
		return Revoked{}, err
	}
	return Revoked{Index: c.Index, Active: ring.ActiveKeyID(time.Now()), Replacement: repl, PassedOver: failed}, nil
}

// shortHash is a short fixed-length digest of s, to derive request ids.
func shortHash(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:16])
}
