package keyring

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// clock is a settable time source.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time      { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *clock) Set(t time.Time)     { c.mu.Lock(); c.now = t; c.mu.Unlock() }
func (c *clock) Add(d time.Duration) { c.Set(c.Now().Add(d)) }

func openManager(t *testing.T, path string, kek []byte, opts Options) *Manager {
	t.Helper()
	m, err := Open(path, kek, opts)
	if err != nil {
		t.Fatalf("Open(%s): %v", path, err)
	}
	return m
}

func TestManagerOpenCreatesActiveKeyAndKeepsIt(t *testing.T) {
	path := filepath.Join(t.TempDir(), "keyring.json")
	clk := &clock{now: t0}
	kek := mustKEK(t, testSecret, InfoKeyringFile)
	m := openManager(t, path, kek, Options{Now: clk.Now})
	id := m.ActiveKeyID(t0)
	if id == "" {
		t.Fatal("no active key after Open")
	}
	md := m.List(t0)
	if len(md) != 1 || md[0].State != Active || !md[0].Expires.Equal(t0.Add(DefaultLifetime)) {
		t.Errorf("List = %+v, want one active key with a 90-day lifetime", md)
	}
	st, err := os.Stat(path)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("keyring file: %v, %v", st, err)
	}
	clk.Add(day)
	m2 := openManager(t, path, kek, Options{Now: clk.Now})
	if got := m2.ActiveKeyID(clk.Now()); got != id || m2.Ring().Len() != 1 {
		t.Errorf("reopened: active %q (want %q), %d keys", got, id, m2.Ring().Len())
	}
	if _, err := Open(path, mustKEK(t, []byte("some other cluster secret"), InfoKeyringFile), Options{Now: clk.Now}); err == nil ||
		!strings.Contains(err.Error(), "cannot be decrypted with the given cluster secret") {
		t.Errorf("Open with the wrong secret: %v", err)
	}
}

func TestManagerChangesAreSavedBeforeReported(t *testing.T) {
	path := filepath.Join(t.TempDir(), "keyring.json")
	clk := &clock{now: t0}
	m := openManager(t, path, nil, Options{Now: clk.Now, Lifetime: 10 * day, Retention: day})
	first := m.ActiveKeyID(t0)
	reopen := func() *Ring {
		return openManager(t, path, nil, Options{Now: clk.Now, Lifetime: 10 * day, Retention: day}).Ring()
	}

	md, err := m.Rotate(t0.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if md.ID == first || md.State != Active || reopen().ActiveKeyID(t0.Add(time.Hour)) != md.ID {
		t.Errorf("rotation to %+v not visible after reopening", md)
	}
	clk.Set(t0.Add(time.Hour)) // the new key is active: revoking first needs no replacement
	if err := m.RevokeKey(first, clk.Now()); err != nil {
		t.Fatal(err)
	}
	if st := reopen().List(t0)[0]; st.ID != first || st.State != Revoked {
		t.Errorf("revocation not saved: %+v", st)
	}
	if err := m.RevokeKey("nope", clk.Now()); !errors.Is(err, ErrUnknownKey) {
		t.Errorf("RevokeKey unknown: %v", err)
	}
	removed, err := m.Prune(t0.Add(11 * day))
	if err != nil || len(removed) != 1 || removed[0] != first {
		t.Fatalf("Prune = %v, %v", removed, err)
	}
	if r := reopen(); r.Len() != 1 {
		t.Errorf("pruned key still in the file: %v", r.List(t0))
	}
}

func TestManagerRotationWithActivationDelay(t *testing.T) {
	clk := &clock{now: t0}
	m := openManager(t, filepath.Join(t.TempDir(), "k"), nil, Options{Now: clk.Now, ActivationDelay: time.Hour})
	old := m.ActiveKeyID(t0)
	v, err := m.Ring().Seal(purposeCookie, destID)
	if err != nil {
		t.Fatal(err)
	}
	md, err := m.Rotate(t0)
	if err != nil {
		t.Fatal(err)
	}
	if md.State != Installed || m.ActiveKeyID(t0) != old {
		t.Errorf("new key %+v encrypts before its activation delay", md)
	}
	if m.ActiveKeyID(t0.Add(time.Hour)) != md.ID {
		t.Errorf("new key not active after the delay")
	}
	clk.Set(t0.Add(2 * time.Hour))
	if _, err := m.Ring().Open(purposeCookie, v); err != nil {
		t.Errorf("value sealed before rotation: %v", err)
	}
}

func TestMaybeRotate(t *testing.T) {
	cases := []struct {
		desc   string
		setup  func(t *testing.T, m *Manager)
		at     time.Time
		rotate bool
	}{
		{"fresh key is kept", nil, t0.Add(day), false},
		{"more than a tenth of the lifetime left", nil, t0.Add(80 * day), false},
		{"a tenth of the lifetime left rotates", nil, t0.Add(81 * day), true},
		{"expired key rotates", nil, t0.Add(100 * day), true},
		{"pending newer key: no second rotation", func(t *testing.T, m *Manager) {
			if _, err := m.Rotate(t0.Add(85 * day)); err != nil {
				t.Fatal(err)
			}
		}, t0.Add(85*day + time.Minute), false},
		{"only revoked keys rotates", func(t *testing.T, m *Manager) {
			id := m.ActiveKeyID(t0)
			// Revoke through the ring (RevokeKey would replace the key itself).
			if err := m.Ring().Revoke(id); err != nil {
				t.Fatal(err)
			}
		}, t0.Add(day), true},
	}
	for _, c := range cases {
		m := openManager(t, filepath.Join(t.TempDir(), "k"), nil, Options{Now: func() time.Time { return t0 }, ActivationDelay: time.Hour})
		if c.setup != nil {
			c.setup(t, m)
		}
		md, rotated, err := m.MaybeRotate(c.at)
		if err != nil || rotated != c.rotate {
			t.Errorf("%s: rotated = %t, %v; want %t", c.desc, rotated, err, c.rotate)
			continue
		}
		if rotated && m.ActiveKeyID(c.at) == "" {
			t.Errorf("%s: no active key right after rotating (new key %+v)", c.desc, md)
		}
	}
}

func TestManagerRevokeActiveKeyKeepsSealing(t *testing.T) {
	clk := &clock{now: t0}
	m := openManager(t, filepath.Join(t.TempDir(), "k"), nil, Options{Now: clk.Now, ActivationDelay: time.Hour})
	old := m.ActiveKeyID(t0)
	v, _ := m.Ring().Seal(purposeCookie, destID)
	if err := m.RevokeKey(old, t0); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Ring().Open(purposeCookie, v); err != ErrRevoked {
		t.Errorf("value of the revoked key: %v, want ErrRevoked", err)
	}
	if id := m.ActiveKeyID(t0); id == "" || id == old {
		t.Fatalf("active key after revoking the only key: %q", id)
	}
	if _, err := m.Ring().Seal(purposeCookie, destID); err != nil {
		t.Errorf("Seal after revocation: %v", err)
	}
}

func TestManagerSaveFailureChangesNothing(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "k")
	m := openManager(t, path, nil, Options{Now: func() time.Time { return t0 }})
	id := m.ActiveKeyID(t0)
	// Make the rename fail: the file's path becomes a non-empty directory.
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(path, "x"), 0o700); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Rotate(t0); err == nil {
		t.Fatal("Rotate reported success without saving")
	}
	if err := m.RevokeKey(id, t0); err == nil {
		t.Fatal("RevokeKey reported success without saving")
	}
	if m.Ring().Len() != 1 || m.ActiveKeyID(t0) != id {
		t.Errorf("unsaved change became visible: %v", m.List(t0))
	}
}

func TestManagerEncryptsPlaintextFileOnceSecretGiven(t *testing.T) {
	path := filepath.Join(t.TempDir(), "k")
	clk := &clock{now: t0}
	openManager(t, path, nil, Options{Now: clk.Now})
	kek := mustKEK(t, testSecret, InfoKeyringFile)
	openManager(t, path, kek, Options{Now: clk.Now})
	b, _ := os.ReadFile(path)
	if !strings.Contains(string(b), `"encrypted": true`) || strings.Contains(string(b), `"material"`) {
		t.Errorf("file not encrypted after opening with a secret:\n%s", b)
	}
	if _, err := Open(path, nil, Options{Now: clk.Now}); err == nil {
		t.Error("encrypted file opened without the secret")
	}
}
