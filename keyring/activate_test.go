package keyring

import (
	"errors"
	"testing"
	"time"
)

func TestActivateMovesActivationAndKeepsLifetime(t *testing.T) {
	cases := []struct {
		desc          string
		at            time.Duration // from t0
		wantActivates time.Duration
		wantExpires   time.Duration
	}{
		{"earlier activation moves both times", 2 * day, 2 * day, 42 * day},
		{"activation at the same time is a no-op", 10 * day, 10 * day, 50 * day},
		{"already active by then: later time is a no-op", 20 * day, 10 * day, 50 * day},
	}
	for _, c := range cases {
		r := newTestRing(t, mkKey("k", 10*day, 50*day))
		if err := r.Activate("k", t0.Add(c.at)); err != nil {
			t.Fatalf("%s: Activate: %v", c.desc, err)
		}
		k := r.Snapshot()[0]
		if !k.Activates.Equal(t0.Add(c.wantActivates)) || !k.Expires.Equal(t0.Add(c.wantExpires)) {
			t.Errorf("%s: activates %s expires %s, want t0+%s and t0+%s", c.desc, k.Activates, k.Expires, c.wantActivates, c.wantExpires)
		}
	}
}

func TestActivateRefusesUnknownRevokedAndZeroTime(t *testing.T) {
	revoked := mkKey("r", 10*day, 50*day)
	revoked.Revoked = true
	r := newTestRing(t, mkKey("k", 10*day, 50*day), revoked)
	if err := r.Activate("nope", t0); !errors.Is(err, ErrUnknownKey) {
		t.Errorf("unknown id: err %v, want ErrUnknownKey", err)
	}
	if err := r.Activate("r", t0); !errors.Is(err, ErrRevoked) {
		t.Errorf("revoked key: err %v, want ErrRevoked", err)
	}
	if err := r.Activate("k", time.Time{}); err == nil {
		t.Error("zero time accepted")
	}
}

func TestActivatedKeyEncryptsFromItsNewTime(t *testing.T) {
	r := newTestRing(t, mkKey("old", 0, 90*day), mkKey("new", 10*day, 100*day))
	if got := r.ActiveKeyID(t0.Add(day)); got != "old" {
		t.Fatalf("before Activate: %q encrypts, want old", got)
	}
	if err := r.Activate("new", t0.Add(day)); err != nil {
		t.Fatal(err)
	}
	if got := r.ActiveKeyID(t0.Add(day)); got != "new" {
		t.Errorf("after Activate: %q encrypts, want new", got)
	}
}

func TestListReportsExactlyOneActiveKey(t *testing.T) {
	r := newTestRing(t, mkKey("old", 0, 90*day), mkKey("mid", 5*day, 95*day), mkKey("new", 20*day, 100*day),
		mkKey("gone", 0, day))
	got := map[string]State{}
	for _, md := range r.List(t0.Add(10 * day)) {
		got[md.ID] = md.State
	}
	want := map[string]State{"old": Inactive, "mid": Active, "new": Installed, "gone": Expired}
	for id, st := range want {
		if got[id] != st {
			t.Errorf("key %s: state %s, want %s", id, got[id], st)
		}
	}
}

func TestInactiveStateHasItsJSONName(t *testing.T) {
	b, _ := Inactive.MarshalText()
	var s State
	if string(b) != "inactive" || s.UnmarshalText(b) != nil || s != Inactive {
		t.Errorf("Inactive marshals as %q and parses back as %s", b, s)
	}
}

func TestRevokeAndInstallIsAtomic(t *testing.T) {
	r := newTestRing(t, mkKey("a", 0, 90*day))
	repl := mkKey("b", 0, 90*day)
	if err := r.RevokeAndInstall("missing", repl); !errors.Is(err, ErrUnknownKey) {
		t.Fatalf("unknown id: err %v", err)
	}
	if r.Len() != 1 {
		t.Fatalf("failed RevokeAndInstall installed the replacement")
	}
	clash := mkKey("a", 1, 90*day) // same id as a, different key
	if err := r.RevokeAndInstall("a", clash); !errors.Is(err, ErrKeyExists) {
		t.Fatalf("clashing replacement: err %v", err)
	}
	if r.Snapshot()[0].Revoked {
		t.Fatal("failed RevokeAndInstall revoked the key")
	}
	for i := 0; i < 2; i++ { // the second time is a no-op
		if err := r.RevokeAndInstall("a", repl); err != nil {
			t.Fatalf("round %d: %v", i, err)
		}
	}
	if got := r.ActiveKeyID(t0.Add(day)); got != "b" || r.Len() != 2 {
		t.Errorf("after RevokeAndInstall: %q encrypts, %d keys", got, r.Len())
	}
}
