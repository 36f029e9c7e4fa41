package keyring

import (
	"errors"
	"slices"
	"testing"
	"time"
)

func TestActiveKeySelection(t *testing.T) {
	a := mkKey("a", 0, 90*day)
	b := mkKey("b", 10*day, 100*day)
	revokedB := b
	revokedB.Revoked = true
	tieOlder := mkKey("t1", 0, 90*day)
	tieNewer := mkKey("t2", 0, 90*day)
	tieNewer.Created = tieOlder.Created.Add(time.Second)
	tieNewer.Activates = tieOlder.Activates
	idLow, idHigh := mkKey("x1", 0, day), mkKey("x2", 0, day)
	cases := []struct {
		desc string
		keys []Key
		at   time.Time
		want string
	}{
		{"empty ring has no active key", nil, t0, ""},
		{"single key active within its life", []Key{a}, t0.Add(day), "a"},
		{"latest activation not after now wins", []Key{a, b}, t0.Add(11 * day), "b"},
		{"installed key does not encrypt before it activates", []Key{a, b}, t0.Add(9 * day), "a"},
		{"activation instant switches", []Key{a, b}, t0.Add(10 * day), "b"},
		{"revoked newer key falls back to older", []Key{a, revokedB}, t0.Add(11 * day), "a"},
		{"expired key never encrypts", []Key{a}, t0.Add(90 * day), ""},
		{"older key takes over when no newer one is usable", []Key{mkKey("old", 0, 50*day), mkKey("new", 10*day, 20*day)}, t0.Add(30 * day), "old"},
		{"tie on activation: later created wins", []Key{tieOlder, tieNewer}, t0.Add(day), "t2"},
		{"tie on activation and creation: greater id wins", []Key{idHigh, idLow}, t0.Add(time.Hour), "x2"},
	}
	for _, c := range cases {
		r := newTestRing(t, c.keys...)
		if got := r.ActiveKeyID(c.at); got != c.want {
			t.Errorf("%s: ActiveKeyID = %q, want %q", c.desc, got, c.want)
		}
	}
}

func TestStateChangesAreDeterministic(t *testing.T) {
	// newTestRing's clock fails the test if any state change reads it.
	build := func() *Ring {
		r := newTestRing(t, mkKey("b", day, 10*day), mkKey("a", 0, 5*day), mkKey("c", 2*day, 3*day))
		if err := r.Revoke("c"); err != nil {
			t.Fatal(err)
		}
		r.Prune(t0.Add(34 * day)) // removes c (expired day 3, retention 30)
		return r
	}
	s1, s2 := build().Snapshot(), build().Snapshot()
	if len(s1) != 2 || !slices.EqualFunc(s1, s2, same) {
		t.Fatalf("two replicas applying the same changes differ:\n%v\n%v", s1, s2)
	}
	if s1[0].ID != "a" || s1[1].ID != "b" {
		t.Errorf("snapshot order = %v, want a, b (by creation)", s1)
	}
}

func TestInstallIsIdempotentAndRefusesConflicts(t *testing.T) {
	k := mkKey("k", 0, day)
	r := newTestRing(t, k)
	if err := r.Install(k); err != nil {
		t.Errorf("reinstalling the same key: %v", err)
	}
	other := mkKey("k", 0, 2*day)
	if err := r.Install(other); !errors.Is(err, ErrKeyExists) {
		t.Errorf("installing a different key with the same id: %v, want ErrKeyExists", err)
	}
	if r.Len() != 1 {
		t.Errorf("Len = %d", r.Len())
	}
}

func TestInstallCopiesMaterial(t *testing.T) {
	k := mkKey("k", 0, day)
	r := newTestRing(t, k)
	k.Material[0] ^= 0xff
	snap := r.Snapshot()
	if snap[0].Material[0] == k.Material[0] {
		t.Error("ring shares the caller's material slice")
	}
	snap[0].Material[1] ^= 0xff
	if r.Snapshot()[0].Material[1] == snap[0].Material[1] {
		t.Error("snapshot shares the ring's material slice")
	}
}

func TestRevokeRemovePrune(t *testing.T) {
	r := newTestRing(t, mkKey("a", 0, 10*day), mkKey("b", 0, 20*day))
	if err := r.Revoke("zz"); !errors.Is(err, ErrUnknownKey) {
		t.Errorf("Revoke unknown: %v", err)
	}
	if err := r.Revoke("a"); err != nil {
		t.Fatal(err)
	}
	if err := r.Revoke("a"); err != nil {
		t.Errorf("second Revoke: %v", err)
	}
	if got := r.List(t0)[0]; got.ID != "a" || got.State != Revoked {
		t.Errorf("List[0] = %+v", got)
	}
	if err := r.Remove("zz"); !errors.Is(err, ErrUnknownKey) {
		t.Errorf("Remove unknown: %v", err)
	}
	cases := []struct {
		desc string
		at   time.Time
		want []string
	}{
		{"nothing past retention", t0.Add(39 * day), nil},
		{"a pruned at expiry plus retention", t0.Add(40 * day), []string{"a"}},
		{"b pruned later", t0.Add(50 * day), []string{"b"}},
	}
	for _, c := range cases {
		if got := r.Prune(c.at); !slices.Equal(got, c.want) {
			t.Errorf("%s: Prune = %v, want %v", c.desc, got, c.want)
		}
	}
	if r.Len() != 0 {
		t.Errorf("Len = %d after pruning all", r.Len())
	}
}

func TestRestoreIsAllOrNothing(t *testing.T) {
	r := newTestRing(t, mkKey("a", 0, day))
	bad := mkKey("b", 0, day)
	bad.Material = nil
	if err := r.Restore([]Key{mkKey("c", 0, day), bad}); err == nil {
		t.Fatal("Restore accepted an invalid key")
	}
	if err := r.Restore([]Key{mkKey("c", 0, day), mkKey("c", 0, day)}); !errors.Is(err, ErrKeyExists) {
		t.Fatalf("Restore of a duplicate id: %v", err)
	}
	if s := r.Snapshot(); len(s) != 1 || s[0].ID != "a" {
		t.Fatalf("failed Restore changed the ring: %v", s)
	}
	if err := r.Restore([]Key{mkKey("d", 0, day), mkKey("e", 0, day)}); err != nil {
		t.Fatal(err)
	}
	if s := r.Snapshot(); len(s) != 2 || s[0].ID != "d" {
		t.Fatalf("Restore result: %v", s)
	}
}
