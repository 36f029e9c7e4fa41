package keyring

import (
	"fmt"
	"sync"
	"time"
)

// rotateFraction: MaybeRotate rotates when the newest key has less than
// 1/rotateFraction of its lifetime left.
const rotateFraction = 10

// Manager runs the keyring of a standalone node: a Ring kept in a
// FileStore. Every change is saved before it becomes visible, and before
// the method reports it done; if saving fails nothing changes. (A clustered
// node replicates the Ring through Raft instead.)
type Manager struct {
	opts  Options
	ring  *Ring
	store *FileStore
	mu    sync.Mutex // serializes changes that read the ring first
}

// Open loads the keyring file at path (kek: nil, or 32 bytes from DeriveKEK
// with InfoKeyringFile), creating it if missing, makes sure there is an
// active key at opts.Now() (generating one if there is none or the newest is
// about to expire), and saves the file (so a plaintext file is encrypted
// once a cluster secret is given).
func Open(path string, kek []byte, opts Options) (*Manager, error) {
	opts = opts.withDefaults()
	store, err := OpenFile(path, kek)
	if err != nil {
		return nil, err
	}
	keys, err := store.Load()
	if err != nil {
		return nil, err
	}
	m := &Manager{opts: opts, ring: NewRing(opts), store: store}
	s, err := m.ring.buildState(keys)
	if err != nil {
		return nil, fmt.Errorf("keyring file %s: %w", path, err)
	}
	now := opts.Now()
	if m.needsRotation(s, now) {
		if s, _, err = m.addKey(s, now); err != nil {
			return nil, err
		}
	}
	err = m.ring.update(func(*state) (*state, error) { return s, nil }, m.save)
	if err != nil {
		return nil, err
	}
	return m, nil
}

// String describes the manager without key material.
func (m *Manager) String() string {
	return fmt.Sprintf("keyring.Manager(%s, %d keys)", m.store.Path(), m.ring.Len())
}

// Format keeps every fmt verb from walking into the keys.
func (m *Manager) Format(f fmt.State, verb rune) { fmt.Fprint(f, m.String()) }

// Ring is the managed ring, for the data path (affinity.Keyring).
func (m *Manager) Ring() *Ring { return m.ring }

// List returns every key's metadata at now.
func (m *Manager) List(now time.Time) []Metadata { return m.ring.List(now) }

// ActiveKeyID is the id of the key that encrypts at now, or "".
func (m *Manager) ActiveKeyID(now time.Time) string { return m.ring.ActiveKeyID(now) }

func (m *Manager) save(s *state) error { return m.store.Save(s.keys()) }

// addKey returns s plus a new key. The key activates after ActivationDelay,
// or at once when s has no active key (a delay would leave a gap in which
// nothing can be sealed).
func (m *Manager) addKey(s *state, now time.Time) (*state, Key, error) {
	delay := m.opts.ActivationDelay
	if s.active(now) == nil {
		delay = 0
	}
	k, err := GenerateKey(now, delay, m.opts.Lifetime)
	if err != nil {
		return nil, Key{}, err
	}
	next, err := m.ring.installFn(k)(s)
	if err != nil {
		return nil, Key{}, err
	}
	return next, k, nil
}

// rotate installs a new key into the ring, saved first.
func (m *Manager) rotate(now time.Time) (Metadata, error) {
	var k Key
	err := m.ring.update(func(s *state) (next *state, err error) {
		next, k, err = m.addKey(s, now)
		return next, err
	}, m.save)
	if err != nil {
		return Metadata{}, err
	}
	return k.Metadata(now), nil
}

// Rotate generates a new key and installs it (it activates after
// ActivationDelay), saved before it returns.
func (m *Manager) Rotate(now time.Time) (Metadata, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.rotate(now)
}

// needsRotation: no active key, or the newest usable key has less than a
// tenth of its lifetime left.
func (m *Manager) needsRotation(s *state, now time.Time) bool {
	if s.active(now) == nil {
		return true
	}
	e := s.newest(now)
	life := e.key.Expires.Sub(e.key.Activates)
	return e.key.Expires.Sub(now) <= life/rotateFraction
}

// MaybeRotate rotates when there is no active key or the newest key is
// within a tenth of its lifetime of expiring. Call it periodically (e.g.
// hourly). It reports the new key when it rotated.
func (m *Manager) MaybeRotate(now time.Time) (Metadata, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.needsRotation(m.ring.cur.Load(), now) {
		return Metadata{}, false, nil
	}
	md, err := m.rotate(now)
	if err != nil {
		return Metadata{}, false, err
	}
	return md, true, nil
}

// RevokeKey revokes key id; values sealed with it stop opening at once. If
// that leaves no active key at now, a new key is generated and activated at
// once in the same saved change, so sealing never stops. An unknown id is
// ErrUnknownKey.
func (m *Manager) RevokeKey(id string, now time.Time) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.ring.update(func(s *state) (*state, error) {
		next, err := revokeFn(id)(s)
		if err != nil || next == nil {
			return next, err
		}
		if next.active(now) == nil {
			next, _, err = m.addKey(next, now)
		}
		return next, err
	}, m.save)
}

// Prune removes keys that no longer decrypt at now (past Expires +
// Retention) and returns their ids.
func (m *Manager) Prune(now time.Time) ([]string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var removed []string
	if err := m.ring.update(m.ring.pruneFn(now, &removed), m.save); err != nil {
		return nil, err
	}
	return removed, nil
}
