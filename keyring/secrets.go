package keyring

import (
	"crypto/hkdf"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
)

// The cluster secrets a node holds. A cluster normally has one; while it is
// rotated (tether secret install, use, remove, as Consul's gossip keyring
// install/use/remove) it has two or more:
//
//   - the primary encrypts gossip, proves this node on Raft connections and
//     derives the key-encryption keys new state at rest is wrapped with;
//   - installed secrets are accepted from peers (gossip decrypts with them,
//     Raft proofs made with them hold, key transfers wrapped with them open)
//     but never used to encrypt;
//   - retired secrets were removed from the cluster: nothing a peer sends
//     under them is accepted. The node keeps one only to read its own state
//     written under it (snapshots and log entries older than the removal)
//     until a snapshot taken after the removal makes it needless; then its
//     bytes are purged and only its id is remembered, so a secret file that
//     still holds it is not taken for the cluster's.
//
// Which secret is in which state is the cluster's replicated decision
// (Sync, from the Raft state); Secrets only holds the bytes and applies it.

// SecretState is where a cluster secret stands on this node.
type SecretState string

// Secret states.
const (
	SecretPrimary   SecretState = "primary"
	SecretInstalled SecretState = "installed"
	SecretRetired   SecretState = "retired"
)

// InfoSecretWrap is the DeriveKEK info that protects a new cluster secret
// carried in the Raft log (wrapped under the secret in use).
const InfoSecretWrap = "tether cluster secret wrap v1"

// secretIDInfo derives a secret's public id: it names the secret in logs,
// gossip and the admin API and reveals nothing of it.
const secretIDInfo = "tether cluster secret id v1"

// MaxSecrets bounds the secrets a cluster holds at once.
const MaxSecrets = 4

// SecretID is a cluster secret's id: 16 hex digits of HKDF-SHA256(secret,
// info "tether cluster secret id v1").
func SecretID(secret []byte) string {
	b, _ := hkdf.Key(sha256.New, secret, nil, secretIDInfo, 8)
	return hex.EncodeToString(b)
}

// ValidSecretID reports whether s has the shape of a SecretID.
func ValidSecretID(s string) bool {
	if len(s) != 16 {
		return false
	}
	_, err := hex.DecodeString(s)
	return err == nil && strings.ToLower(s) == s
}

// HeldSecret is one secret a node holds, as it is kept across restarts.
type HeldSecret struct {
	ID     string      `json:"id"`
	State  SecretState `json:"state"`
	Secret []byte      `json:"secret,omitempty"` // nil once purged
	// RetiredAt is the Raft index of the cluster's removal of a retired
	// secret (0: retired for another reason, or not retired).
	RetiredAt uint64 `json:"retired_at,omitempty"`
}

// SecretRecord is the cluster's replicated record of one secret: its state
// and, for a secret installed by the cluster, the secret wrapped under the
// one that was primary then (absent once that one was removed).
type SecretRecord struct {
	ID      string
	State   SecretState // SecretPrimary or SecretInstalled
	Wrapped []byte
}

// RemovedSecret is a secret the cluster removed, at Raft index Index.
type RemovedSecret struct {
	ID    string
	Index uint64
}

// Secrets is the set of cluster secrets one node holds; safe for
// concurrent use. Reads (every Raft handshake, every log entry) take a
// read lock and derived keys are cached.
type Secrets struct {
	mu      sync.RWMutex
	held    []*HeldSecret // primary first, then installed, then retired
	derived map[[2]string][]byte
	watch   []func()
}

// NewSecrets holds one secret, the primary.
func NewSecrets(primary []byte) (*Secrets, error) {
	return RestoreSecrets([]HeldSecret{{ID: SecretID(primary), State: SecretPrimary, Secret: primary}})
}

// RestoreSecrets holds secrets as a node kept them: exactly one primary,
// which has its bytes.
func RestoreSecrets(held []HeldSecret) (*Secrets, error) {
	s := &Secrets{derived: map[[2]string][]byte{}}
	primaries := 0
	for _, h := range held {
		if len(h.Secret) > 0 && len(h.Secret) < MinClusterSecretLen {
			return nil, fmt.Errorf("keyring: cluster secret %s is %d bytes, need at least %d", h.ID, len(h.Secret), MinClusterSecretLen)
		}
		if len(h.Secret) > 0 && SecretID(h.Secret) != h.ID {
			return nil, fmt.Errorf("keyring: cluster secret %s: its bytes have id %s", h.ID, SecretID(h.Secret))
		}
		switch h.State {
		case SecretPrimary:
			primaries++
			if len(h.Secret) == 0 {
				return nil, fmt.Errorf("keyring: the primary cluster secret %s has no bytes", h.ID)
			}
		case SecretInstalled:
			if len(h.Secret) == 0 {
				h.State = SecretRetired // cannot be used for anything
			}
		case SecretRetired:
		default:
			return nil, fmt.Errorf("keyring: cluster secret %s: unknown state %q", h.ID, h.State)
		}
		if slices.ContainsFunc(s.held, func(o *HeldSecret) bool { return o.ID == h.ID }) {
			return nil, fmt.Errorf("keyring: cluster secret %s appears twice", h.ID)
		}
		h.Secret = slices.Clone(h.Secret)
		s.held = append(s.held, &h)
	}
	if primaries != 1 {
		return nil, fmt.Errorf("keyring: %d primary cluster secrets, want exactly one", primaries)
	}
	s.sortLocked()
	return s, nil
}

// stateRank orders the held secrets: primary, installed, retired.
func stateRank(st SecretState) int {
	switch st {
	case SecretPrimary:
		return 0
	case SecretInstalled:
		return 1
	}
	return 2
}

func (s *Secrets) sortLocked() {
	slices.SortStableFunc(s.held, func(a, b *HeldSecret) int { return stateRank(a.State) - stateRank(b.State) })
}

// Watch registers f, called after every change (not under a lock; calls
// may overlap with later changes, so f re-reads what it needs). f must not
// block.
func (s *Secrets) Watch(f func()) {
	s.mu.Lock()
	s.watch = append(s.watch, f)
	s.mu.Unlock()
}

func (s *Secrets) notify() {
	s.mu.RLock()
	w := slices.Clone(s.watch)
	s.mu.RUnlock()
	for _, f := range w {
		f()
	}
}

// PrimaryID is the id of the secret in use.
func (s *Secrets) PrimaryID() string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.held[0].ID
}

// Primary is the secret in use. Callers must not change it.
func (s *Secrets) Primary() []byte {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.held[0].Secret
}

// Accepted are the primary and the installed secrets, primary first.
// Callers must not change them.
func (s *Secrets) Accepted() [][]byte {
	s.mu.RLock()
	defer s.mu.RUnlock()
	var out [][]byte
	for _, h := range s.held {
		if h.State != SecretRetired {
			out = append(out, h.Secret)
		}
	}
	return out
}

// AcceptedIDs are the ids of Accepted, primary first.
func (s *Secrets) AcceptedIDs() []string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	var out []string
	for _, h := range s.held {
		if h.State != SecretRetired {
			out = append(out, h.ID)
		}
	}
	return out
}

// deriveLocked is info's cached key of h (nil when not cached yet); s.mu
// is held, read or write.
func (s *Secrets) deriveLocked(h *HeldSecret, info string) []byte {
	return s.derived[[2]string{h.ID, info}]
}

func (s *Secrets) kek(h *HeldSecret, info string) ([]byte, error) {
	if k := s.deriveLocked(h, info); k != nil {
		return k, nil
	}
	return DeriveKEK(h.Secret, info)
}

// NamedKEK is a key derived from one secret, with the secret's id.
type NamedKEK struct {
	ID  string
	Key []byte
}

// keks derives info's key for every held secret that passes keep, in
// order, caching them.
func (s *Secrets) keks(info string, keep func(*HeldSecret) bool) []NamedKEK {
	s.mu.RLock()
	var out []NamedKEK
	miss := false
	for _, h := range s.held {
		if len(h.Secret) == 0 || !keep(h) {
			continue
		}
		k := s.deriveLocked(h, info)
		if k == nil {
			miss = true
			break
		}
		out = append(out, NamedKEK{h.ID, k})
	}
	s.mu.RUnlock()
	if !miss {
		return out
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	out = out[:0]
	for _, h := range s.held {
		if len(h.Secret) == 0 || !keep(h) {
			continue
		}
		k, err := s.kek(h, info)
		if err != nil {
			continue // held secrets are checked to be long enough
		}
		s.derived[[2]string{h.ID, info}] = k
		out = append(out, NamedKEK{h.ID, k})
	}
	return out
}

func keysOf(named []NamedKEK) [][]byte {
	out := make([][]byte, len(named))
	for i, n := range named {
		out[i] = n.Key
	}
	return out
}

// KEK is info's key-encryption key (DeriveKEK) of the primary: new state is
// wrapped with it.
func (s *Secrets) KEK(info string) []byte {
	return s.keks(info, func(h *HeldSecret) bool { return h.State == SecretPrimary })[0].Key
}

// AcceptedKEKs are info's keys of the accepted secrets, primary first: what
// a peer sends is opened with them.
func (s *Secrets) AcceptedKEKs(info string) [][]byte {
	return keysOf(s.AcceptedNamed(info))
}

// AcceptedNamed is AcceptedKEKs with each key's secret id.
func (s *Secrets) AcceptedNamed(info string) []NamedKEK {
	return s.keks(info, func(h *HeldSecret) bool { return h.State != SecretRetired })
}

// HeldKEKs are info's keys of every secret whose bytes this node holds,
// retired ones last: this node's own state at rest is opened with them.
func (s *Secrets) HeldKEKs(info string) [][]byte {
	return keysOf(s.keks(info, func(*HeldSecret) bool { return true }))
}

// Export is every held secret, bytes included, for the node to keep.
func (s *Secrets) Export() []HeldSecret {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make([]HeldSecret, 0, len(s.held))
	for _, h := range s.held {
		c := *h
		c.Secret = slices.Clone(h.Secret)
		out = append(out, c)
	}
	return out
}

// List is every held secret without its bytes.
func (s *Secrets) List() []HeldSecret {
	out := s.Export()
	for i := range out {
		clear(out[i].Secret)
		out[i].Secret = nil
	}
	return out
}

// Has reports whether this node holds the bytes of secret id.
func (s *Secrets) Has(id string) bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return slices.ContainsFunc(s.held, func(h *HeldSecret) bool { return h.ID == id && len(h.Secret) > 0 })
}

// State is secret id's state on this node ("" when unknown).
func (s *Secrets) State(id string) SecretState {
	s.mu.RLock()
	defer s.mu.RUnlock()
	for _, h := range s.held {
		if h.ID == id {
			return h.State
		}
	}
	return ""
}

func secretPurpose(id string) string { return "tether cluster secret " + id }

// WrapSecret wraps secret under the primary (InfoSecretWrap, bound to the
// secret's id): it returns the blob and the primary's id.
func (s *Secrets) WrapSecret(secret []byte) (wrapped []byte, under string, err error) {
	if len(secret) < MinClusterSecretLen {
		return nil, "", fmt.Errorf("keyring: cluster secret is %d bytes, need at least %d", len(secret), MinClusterSecretLen)
	}
	s.mu.RLock()
	under = s.held[0].ID
	s.mu.RUnlock()
	w, err := WrapBlob(s.KEK(InfoSecretWrap), secretPurpose(SecretID(secret)), secret)
	return w, under, err
}

// UnwrapSecret opens a secret wrapped (WrapSecret) under any accepted
// secret and checks it is secret id.
func (s *Secrets) UnwrapSecret(id string, wrapped []byte) ([]byte, error) {
	return unwrapSecret(id, wrapped, s.AcceptedKEKs(InfoSecretWrap))
}

func unwrapSecret(id string, wrapped []byte, keks [][]byte) ([]byte, error) {
	for _, k := range keks {
		p, err := UnwrapBlob(k, secretPurpose(id), wrapped)
		if err != nil {
			continue
		}
		if SecretID(p) != id || len(p) < MinClusterSecretLen {
			return nil, fmt.Errorf("keyring: the wrapped cluster secret is not secret %s", id)
		}
		return p, nil
	}
	return nil, ErrUnwrap
}

// ErrNoPrimary: the cluster's primary secret is one this node does not
// hold (it was down while it was installed and removed): give it the
// cluster's secret in its secret file.
var ErrNoPrimary = errors.New("keyring: this node does not hold the cluster's primary secret")

// Learn opens the wrapped secrets of records this node lacks with the
// secrets it holds, and keeps them (retired until Sync gives them their
// state). It reports whether it learned any.
func (s *Secrets) Learn(records []SecretRecord) bool {
	learned := false
	for range len(records) { // each pass may open a secret the next one needs
		more := false
		for _, r := range records {
			if len(r.Wrapped) == 0 || s.Has(r.ID) {
				continue
			}
			p, err := unwrapSecret(r.ID, r.Wrapped, s.HeldKEKs(InfoSecretWrap))
			if err != nil {
				continue
			}
			s.mu.Lock()
			if i := slices.IndexFunc(s.held, func(h *HeldSecret) bool { return h.ID == r.ID }); i >= 0 {
				s.held[i].Secret = p
			} else {
				s.held = append(s.held, &HeldSecret{ID: r.ID, State: SecretRetired, Secret: p})
			}
			s.mu.Unlock()
			more, learned = true, true
		}
		if !more {
			break
		}
	}
	return learned
}

// Sync applies the cluster's records: a held secret the records list takes
// their state, one removed lists is retired (with the index of its
// removal); any other keeps its state, but for a primary that the records
// name another one over (it stays accepted: a secret file newer than the
// state this node restored). With no records (the cluster never rotated
// its secret) nothing changes. It returns ErrNoPrimary, and keeps its own
// primary, when it does not hold the records' primary.
func (s *Secrets) Sync(records []SecretRecord, removed []RemovedSecret) error {
	learned := s.Learn(records)
	if len(records) == 0 {
		if learned {
			s.notify()
		}
		return nil
	}
	byID := make(map[string]SecretRecord, len(records))
	primary := ""
	for _, r := range records {
		byID[r.ID] = r
		if r.State == SecretPrimary {
			primary = r.ID
		}
	}
	gone := make(map[string]uint64, len(removed))
	for _, r := range removed {
		gone[r.ID] = r.Index
	}
	s.mu.Lock()
	before := s.snapshotLocked()
	var err error
	if !slices.ContainsFunc(s.held, func(h *HeldSecret) bool { return h.ID == primary && len(h.Secret) > 0 }) {
		err = fmt.Errorf("%w (the cluster's primary is %s, this node holds %s)", ErrNoPrimary, primary, s.held[0].ID)
		primary = s.held[0].ID
	}
	for _, h := range s.held {
		_, listed := byID[h.ID]
		idx, removed := gone[h.ID]
		switch {
		case h.ID == primary:
			h.State, h.RetiredAt = SecretPrimary, 0
		case listed && len(h.Secret) > 0:
			h.State, h.RetiredAt = SecretInstalled, 0
		case removed:
			h.State, h.RetiredAt = SecretRetired, idx
		case h.State == SecretPrimary:
			// Not the cluster's, not removed by it: a secret file this
			// node was given (the state may be older than the file).
			h.State = SecretInstalled
		}
	}
	s.sortLocked()
	changed := learned || before != s.snapshotLocked()
	s.mu.Unlock()
	if changed {
		s.notify()
	}
	return err
}

// snapshotLocked describes the held secrets' ids, states and whether
// their bytes are held, to tell a change.
func (s *Secrets) snapshotLocked() string {
	var b []byte
	for _, h := range s.held {
		b = fmt.Appendf(b, "%s %s %t %d;", h.ID, h.State, len(h.Secret) > 0, h.RetiredAt)
	}
	return string(b)
}

// Purge forgets the bytes of the secrets the cluster removed at or before
// index upTo (a snapshot at upTo or later holds everything this node still
// needs, wrapped under a secret the cluster accepts). Their ids stay, as
// retired. It reports whether it forgot any.
func (s *Secrets) Purge(upTo uint64) bool {
	s.mu.Lock()
	purged := false
	for _, h := range s.held {
		if h.State == SecretRetired && h.RetiredAt != 0 && h.RetiredAt <= upTo && len(h.Secret) > 0 {
			clear(h.Secret)
			h.Secret = nil
			for k := range s.derived {
				if k[0] == h.ID {
					clear(s.derived[k])
					delete(s.derived, k)
				}
			}
			purged = true
		}
	}
	s.mu.Unlock()
	if purged {
		s.notify()
	}
	return purged
}
