package keyring

import (
	"crypto/sha256"
	"testing"
	"time"
)

// t0 is the tests' epoch.
var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

const day = 24 * time.Hour

// mkKey builds a key with deterministic material, activating at
// t0+activates and expiring at t0+expires.
func mkKey(id string, activates, expires time.Duration) Key {
	m := sha256.Sum256([]byte("material " + id))
	return Key{ID: id, Created: t0.Add(activates), Activates: t0.Add(activates), Expires: t0.Add(expires), Material: m[:]}
}

// newTestRing returns a ring with retention 30 days holding keys, whose
// clock fails the test: tests pass times explicitly.
func newTestRing(t *testing.T, keys ...Key) *Ring {
	t.Helper()
	r := NewRing(Options{Retention: 30 * day, Now: func() time.Time {
		t.Error("ring read its clock")
		return t0
	}})
	for _, k := range keys {
		if err := r.Install(k); err != nil {
			t.Fatalf("Install(%s): %v", k.ID, err)
		}
	}
	return r
}
