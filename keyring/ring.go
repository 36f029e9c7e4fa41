package keyring

import (
	"cmp"
	"crypto/aes"
	"crypto/cipher"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Defaults of Options.
const (
	DefaultLifetime  = 90 * 24 * time.Hour
	DefaultRetention = 30 * 24 * time.Hour
)

// Errors. Open returns them bare (no key material, no plaintext, nothing
// from the input), so the failure path does not allocate.
var (
	ErrMalformed   = errors.New("keyring: malformed value")
	ErrTooLarge    = errors.New("keyring: value too large")
	ErrUnknownKey  = errors.New("keyring: unknown key")
	ErrRevoked     = errors.New("keyring: key revoked")
	ErrExpired     = errors.New("keyring: key expired beyond its retention period")
	ErrAuth        = errors.New("keyring: value failed authentication")
	ErrNoActiveKey = errors.New("keyring: no active key")
	ErrKeyExists   = errors.New("keyring: a different key with this id is installed")
)

// Options configure a Ring (Retention, Now) and a Manager (all fields).
// Zero values take the defaults.
type Options struct {
	// Lifetime is the time a new key stays active (Manager). Default 90 days.
	Lifetime time.Duration
	// Retention is how long an expired key still decrypts. Default 30 days.
	// Every node of a cluster must use the same value.
	Retention time.Duration
	// ActivationDelay is the time between installing a rotated key and its
	// activation (Manager). Default 0, fine for a standalone node.
	ActivationDelay time.Duration
	// Now is the clock of Seal and Open. Default time.Now.
	Now func() time.Time
}

func (o Options) withDefaults() Options {
	if o.Lifetime <= 0 {
		o.Lifetime = DefaultLifetime
	}
	if o.Retention <= 0 {
		o.Retention = DefaultRetention
	}
	if o.ActivationDelay < 0 {
		o.ActivationDelay = 0
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return o
}

// Ring is a set of keys. Reads (Seal, Open, List, ...) load an immutable
// snapshot atomically and never lock; changes are serialized and swap in a
// new snapshot. A Ring is safe for concurrent use.
type Ring struct {
	retention time.Duration
	now       func() time.Time

	mu  sync.Mutex // serializes changes
	cur atomic.Pointer[state]
	// tickets caches TicketKeys' derivation (ticket.go).
	tickets atomic.Pointer[ticketMemo]
}

// state is an immutable set of keys.
type state struct {
	byID  map[string]*entry
	order []*entry // encryption preference: latest Activates, Created, ID first
}

// entry is one installed key with its cached AEAD.
type entry struct {
	key       Key
	aead      cipher.AEAD // created once at install; safe for concurrent use
	openUntil time.Time   // Expires + retention
	hdr       []byte      // version | id length | id: the value's prefix
}

// NewRing returns an empty ring.
func NewRing(opts Options) *Ring {
	opts = opts.withDefaults()
	r := &Ring{retention: opts.Retention, now: opts.Now}
	r.cur.Store(&state{byID: map[string]*entry{}})
	return r
}

// Retention is how long expired keys keep decrypting.
func (r *Ring) Retention() time.Duration { return r.retention }

// String describes the ring without key material.
func (r *Ring) String() string { return fmt.Sprintf("keyring.Ring(%d keys)", len(r.cur.Load().order)) }

// Format keeps %v, %+v and %#v on a *Ring from walking into its keys.
func (r *Ring) Format(f fmt.State, verb rune) { fmt.Fprint(f, r.String()) }

func (r *Ring) newEntry(k Key) (*entry, error) {
	if err := k.validate(); err != nil {
		return nil, err
	}
	k = k.clone()
	block, err := aes.NewCipher(k.Material)
	if err != nil {
		return nil, fmt.Errorf("keyring: key %s: %v", k.ID, err)
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, fmt.Errorf("keyring: key %s: %v", k.ID, err)
	}
	hdr := make([]byte, 0, 2+len(k.ID))
	hdr = append(hdr, wireVersion, byte(len(k.ID)))
	hdr = append(hdr, k.ID...)
	return &entry{key: k, aead: aead, openUntil: k.Expires.Add(r.retention), hdr: hdr}, nil
}

// newState builds a state from entries (no duplicate ids).
func newState(entries []*entry) *state {
	s := &state{byID: make(map[string]*entry, len(entries)), order: entries}
	for _, e := range entries {
		s.byID[e.key.ID] = e
	}
	slices.SortFunc(s.order, func(a, b *entry) int {
		if c := b.key.Activates.Compare(a.key.Activates); c != 0 {
			return c
		}
		if c := b.key.Created.Compare(a.key.Created); c != 0 {
			return c
		}
		return cmp.Compare(b.key.ID, a.key.ID)
	})
	return s
}

// with returns a copy of s where fn has edited the entry list.
func (s *state) with(fn func([]*entry) []*entry) *state {
	return newState(fn(slices.Clone(s.order)))
}

// update applies fn to the current state under the change lock. commit, when
// not nil, runs before the new state becomes visible (Manager saves there);
// if it fails nothing changes.
func (r *Ring) update(fn func(*state) (*state, error), commit func(*state) error) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	next, err := fn(r.cur.Load())
	if err != nil || next == nil {
		return err
	}
	if commit != nil {
		if err := commit(next); err != nil {
			return err
		}
	}
	r.cur.Store(next)
	return nil
}

// Install adds k. Installing the very same key again is a no-op; a different
// key with the same id is ErrKeyExists. Deterministic: no clock, no
// randomness, no I/O.
func (r *Ring) Install(k Key) error { return r.update(r.installFn(k), nil) }

func (r *Ring) installFn(k Key) func(*state) (*state, error) {
	return func(s *state) (*state, error) {
		e, err := r.newEntry(k)
		if err != nil {
			return nil, err
		}
		if old, ok := s.byID[k.ID]; ok {
			if same(old.key, e.key) {
				return nil, nil
			}
			return nil, fmt.Errorf("%w: %s", ErrKeyExists, k.ID)
		}
		return s.with(func(es []*entry) []*entry { return append(es, e) }), nil
	}
}

// Revoke marks key id revoked: it stops encrypting and decrypting at once.
// Revoking a revoked key is a no-op. Deterministic.
func (r *Ring) Revoke(id string) error { return r.update(revokeFn(id), nil) }

func revokeFn(id string) func(*state) (*state, error) {
	return func(s *state) (*state, error) {
		old, ok := s.byID[id]
		if !ok {
			return nil, fmt.Errorf("%w: %q", ErrUnknownKey, id)
		}
		if old.key.Revoked {
			return nil, nil
		}
		e := *old
		e.key.Revoked = true
		return s.with(func(es []*entry) []*entry {
			for i := range es {
				if es[i] == old {
					es[i] = &e
				}
			}
			return es
		}), nil
	}
}

// Activate makes key id activate at at, keeping its lifetime (Expires moves
// by as much as Activates). A key already activated at or before at is left
// alone, so applying the same command twice, or late, changes nothing.
// Unknown ids are ErrUnknownKey; revoked keys cannot be activated.
// Deterministic: no clock, no randomness, no I/O.
func (r *Ring) Activate(id string, at time.Time) error {
	return r.update(r.activateFn(id, at), nil)
}

func (r *Ring) activateFn(id string, at time.Time) func(*state) (*state, error) {
	return func(s *state) (*state, error) {
		old, ok := s.byID[id]
		if !ok {
			return nil, fmt.Errorf("%w: %q", ErrUnknownKey, id)
		}
		if at.IsZero() {
			return nil, fmt.Errorf("keyring: activate key %s: activation time is zero", id)
		}
		if old.key.Revoked {
			return nil, fmt.Errorf("%w: %s cannot be activated", ErrRevoked, id)
		}
		at = canonicalTime(at)
		if !at.Before(old.key.Activates) {
			return nil, nil
		}
		k := old.key
		k.Expires = at.Add(k.Expires.Sub(k.Activates))
		k.Activates = at
		e, err := r.newEntry(k)
		if err != nil {
			return nil, err
		}
		return s.with(func(es []*entry) []*entry {
			for i := range es {
				if es[i] == old {
					es[i] = e
				}
			}
			return es
		}), nil
	}
}

// RevokeAndInstall revokes key id and installs replacement in one step:
// readers see both changes or neither, and on any error nothing changes.
// Deterministic.
func (r *Ring) RevokeAndInstall(id string, replacement Key) error {
	return r.update(func(s *state) (*state, error) {
		next, err := revokeFn(id)(s)
		if err != nil {
			return nil, err
		}
		if next == nil { // already revoked
			next = s
		}
		after, err := r.installFn(replacement)(next)
		if err != nil {
			return nil, err
		}
		if after == nil { // replacement already installed
			if next == s {
				return nil, nil
			}
			return next, nil
		}
		return after, nil
	}, nil)
}

// Remove deletes key id from the ring; values sealed with it become
// ErrUnknownKey. Deterministic.
func (r *Ring) Remove(id string) error {
	return r.update(func(s *state) (*state, error) {
		if _, ok := s.byID[id]; !ok {
			return nil, fmt.Errorf("%w: %q", ErrUnknownKey, id)
		}
		return s.with(func(es []*entry) []*entry {
			return slices.DeleteFunc(es, func(e *entry) bool { return e.key.ID == id })
		}), nil
	}, nil)
}

// Prune removes the keys that no longer decrypt at now (now >= Expires +
// Retention) and returns their ids, sorted. now is given by the caller (the
// leader puts it in the Raft command), so Prune is deterministic.
func (r *Ring) Prune(now time.Time) []string {
	var removed []string
	_ = r.update(r.pruneFn(now, &removed), nil)
	return removed
}

func (r *Ring) pruneFn(now time.Time, removed *[]string) func(*state) (*state, error) {
	return func(s *state) (*state, error) {
		*removed = (*removed)[:0]
		for _, e := range s.order {
			if !now.Before(e.openUntil) {
				*removed = append(*removed, e.key.ID)
			}
		}
		if len(*removed) == 0 {
			return nil, nil
		}
		slices.Sort(*removed)
		return s.with(func(es []*entry) []*entry {
			return slices.DeleteFunc(es, func(e *entry) bool { return !now.Before(e.openUntil) })
		}), nil
	}
}

// Restore replaces every key with keys (an FSM snapshot or a file). It is
// all or nothing: on a bad or duplicate key the ring is unchanged.
func (r *Ring) Restore(keys []Key) error {
	s, err := r.buildState(keys)
	if err != nil {
		return err
	}
	return r.update(func(*state) (*state, error) { return s, nil }, nil)
}

func (r *Ring) buildState(keys []Key) (*state, error) {
	entries := make([]*entry, 0, len(keys))
	seen := make(map[string]bool, len(keys))
	for _, k := range keys {
		if seen[k.ID] {
			return nil, fmt.Errorf("%w: %s appears twice", ErrKeyExists, k.ID)
		}
		seen[k.ID] = true
		e, err := r.newEntry(k)
		if err != nil {
			return nil, err
		}
		entries = append(entries, e)
	}
	return newState(entries), nil
}

// Snapshot returns copies of all keys, material included, ordered by
// creation time then id (deterministic, for FSM snapshots and files).
func (r *Ring) Snapshot() []Key { return r.cur.Load().keys() }

func (s *state) keys() []Key {
	keys := make([]Key, 0, len(s.order))
	for _, e := range s.order {
		k := e.key
		k.Material = append([]byte(nil), k.Material...)
		keys = append(keys, k)
	}
	sortKeys(keys)
	return keys
}

func sortKeys(keys []Key) {
	slices.SortFunc(keys, func(a, b Key) int {
		if c := a.Created.Compare(b.Created); c != 0 {
			return c
		}
		return cmp.Compare(a.ID, b.ID)
	})
}

// List returns every key's metadata at now, ordered by creation time.
// Exactly one key is Active (the one that encrypts, if any); other activated,
// unexpired keys are Inactive.
func (r *Ring) List(now time.Time) []Metadata {
	s := r.cur.Load()
	enc := s.active(now)
	out := make([]Metadata, 0, len(s.order))
	for _, e := range s.order {
		md := e.key.Metadata(now)
		if md.State == Active && e != enc {
			md.State = Inactive
		}
		out = append(out, md)
	}
	slices.SortFunc(out, func(a, b Metadata) int {
		if c := a.Created.Compare(b.Created); c != 0 {
			return c
		}
		return cmp.Compare(a.ID, b.ID)
	})
	return out
}

// Has reports whether the ring holds key id, in any state.
func (r *Ring) Has(id string) bool {
	_, ok := r.cur.Load().byID[id]
	return ok
}

// Len is the number of keys in the ring, in any state.
func (r *Ring) Len() int { return len(r.cur.Load().order) }

// ActiveKeyID is the id of the key that encrypts at now, or "" if none.
func (r *Ring) ActiveKeyID(now time.Time) string {
	if e := r.cur.Load().active(now); e != nil {
		return e.key.ID
	}
	return ""
}

// active is the key that encrypts at now.
func (s *state) active(now time.Time) *entry {
	for _, e := range s.order {
		if !e.key.Revoked && !now.Before(e.key.Activates) && now.Before(e.key.Expires) {
			return e
		}
	}
	return nil
}

// newest is the non-revoked, unexpired key with the latest activation
// (possibly not active yet): what automatic rotation looks at.
func (s *state) newest(now time.Time) *entry {
	for _, e := range s.order {
		if !e.key.Revoked && now.Before(e.key.Expires) {
			return e
		}
	}
	return nil
}
