package keyring

import (
	"bytes"
	"crypto/hkdf"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"testing"
)

var (
	secretA = []byte("cluster-secret-A-0123456789abcdef")
	secretB = []byte("cluster-secret-B-0123456789abcdef")
	secretC = []byte("cluster-secret-C-0123456789abcdef")
)

func mustSecrets(t *testing.T, held ...HeldSecret) *Secrets {
	t.Helper()
	s, err := RestoreSecrets(held)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func held(secret []byte, st SecretState) HeldSecret {
	return HeldSecret{ID: SecretID(secret), State: st, Secret: secret}
}

// TestSecretIDIsHKDFOfTheSecret: the id is the first 8 bytes of
// HKDF-SHA256(secret, no salt, info "tether cluster secret id v1"), in hex,
// computed here with the standard library's HKDF directly.
func TestSecretIDIsHKDFOfTheSecret(t *testing.T) {
	want, _ := hkdf.Key(sha256.New, secretA, nil, "tether cluster secret id v1", 8)
	if got := SecretID(secretA); got != hex.EncodeToString(want) || !ValidSecretID(got) {
		t.Fatalf("SecretID = %s, want %x", got, want)
	}
	for _, bad := range []string{"", "0123", "0123456789ABCDEF", "0123456789abcdeg", "0123456789abcdef0"} {
		if ValidSecretID(bad) {
			t.Errorf("ValidSecretID(%q) = true", bad)
		}
	}
}

func TestRestoreSecretsRefusesInconsistentSets(t *testing.T) {
	for _, tc := range []struct {
		desc string
		held []HeldSecret
	}{
		{"no primary", []HeldSecret{held(secretA, SecretInstalled)}},
		{"two primaries", []HeldSecret{held(secretA, SecretPrimary), held(secretB, SecretPrimary)}},
		{"a primary without bytes", []HeldSecret{{ID: SecretID(secretA), State: SecretPrimary}}},
		{"bytes of another id", []HeldSecret{{ID: SecretID(secretB), State: SecretPrimary, Secret: secretA}}},
		{"a short secret", []HeldSecret{held([]byte("short"), SecretPrimary)}},
		{"the same secret twice", []HeldSecret{held(secretA, SecretPrimary), held(secretA, SecretInstalled)}},
		{"an unknown state", []HeldSecret{held(secretA, SecretPrimary), held(secretB, "active")}},
	} {
		if _, err := RestoreSecrets(tc.held); err == nil {
			t.Errorf("%s: restored", tc.desc)
		}
	}
}

// TestSecretsFollowTheClusterRecords: a node holding A learns B from the
// record that carries B wrapped under A, accepts both, encrypts with the
// one the records make primary, retires the one they drop (kept for its
// own state at rest until purged after the removal's snapshot), and never
// accepts again a secret it no longer holds.
func TestSecretsFollowTheClusterRecords(t *testing.T) {
	s, _ := NewSecrets(secretA)
	a, b := SecretID(secretA), SecretID(secretB)
	wrapped, under, err := s.WrapSecret(secretB)
	if err != nil || under != a {
		t.Fatalf("WrapSecret: %v under %s", err, under)
	}
	if bytes.Contains(wrapped, secretB) {
		t.Fatal("the wrapped secret holds the secret in clear")
	}
	kekA := s.KEK(InfoRaft)

	// Install: B learned, accepted, A still encrypts.
	if err := s.Sync([]SecretRecord{{ID: a, State: SecretPrimary}, {ID: b, State: SecretInstalled, Wrapped: wrapped}}, nil); err != nil {
		t.Fatal(err)
	}
	if s.PrimaryID() != a || len(s.Accepted()) != 2 || s.State(b) != SecretInstalled {
		t.Fatalf("after install: %+v", s.List())
	}
	// Use: B encrypts; A still accepted.
	calls := 0
	s.Watch(func() { calls++ })
	if err := s.Sync([]SecretRecord{{ID: a, State: SecretInstalled}, {ID: b, State: SecretPrimary, Wrapped: wrapped}}, nil); err != nil {
		t.Fatal(err)
	}
	if s.PrimaryID() != b || !bytes.Equal(s.Primary(), secretB) || len(s.AcceptedKEKs(InfoRaft)) != 2 || calls != 1 {
		t.Fatalf("after use: %+v, %d notifications", s.List(), calls)
	}
	// The same records again change nothing.
	_ = s.Sync([]SecretRecord{{ID: a, State: SecretInstalled}, {ID: b, State: SecretPrimary}}, nil)
	if calls != 1 {
		t.Fatalf("%d notifications for records that changed nothing", calls)
	}
	// Remove A at index 40: retired, not accepted, still opens state at rest.
	if err := s.Sync([]SecretRecord{{ID: b, State: SecretPrimary}}, []RemovedSecret{{ID: a, Index: 40}}); err != nil {
		t.Fatal(err)
	}
	if ids := s.AcceptedIDs(); len(ids) != 1 || ids[0] != b || s.State(a) != SecretRetired {
		t.Fatalf("after remove: accepted %v, %+v", ids, s.List())
	}
	held := s.HeldKEKs(InfoRaft)
	if len(held) != 2 || !bytes.Equal(held[1], kekA) {
		t.Fatal("the retired secret's KEK is not kept for state at rest")
	}
	if _, err := s.UnwrapSecret(b, wrapped); err == nil {
		t.Fatal("a secret wrapped under the removed one still opens from a peer")
	}
	// A snapshot at 39 does not cover the removal; one at 40 does.
	if s.Purge(39) || !s.Has(a) {
		t.Fatal("purged before a snapshot covered the removal")
	}
	if !s.Purge(40) || s.Has(a) || s.State(a) != SecretRetired || len(s.HeldKEKs(InfoRaft)) != 1 {
		t.Fatalf("after purge: %+v", s.List())
	}
	// Records naming A again cannot make a secret without bytes accepted.
	_ = s.Sync([]SecretRecord{{ID: b, State: SecretPrimary}, {ID: a, State: SecretInstalled}}, nil)
	if len(s.AcceptedIDs()) != 1 {
		t.Fatalf("a purged secret is accepted again: %v", s.AcceptedIDs())
	}
}

// TestSecretsKeepTheirPrimaryWhenTheClusterMovedOn: a node that holds
// neither the records' primary nor a way to learn it keeps encrypting
// with its own and says so.
func TestSecretsKeepTheirPrimaryWhenTheClusterMovedOn(t *testing.T) {
	s, _ := NewSecrets(secretA)
	err := s.Sync([]SecretRecord{{ID: SecretID(secretC), State: SecretPrimary}}, []RemovedSecret{{ID: SecretID(secretA), Index: 3}})
	if !errors.Is(err, ErrNoPrimary) || s.PrimaryID() != SecretID(secretA) {
		t.Fatalf("Sync: %v, primary %s", err, s.PrimaryID())
	}
}

// TestSecretsLearnAChain: B wrapped under A and C wrapped under B, the
// records in any order: a node holding A learns both.
func TestSecretsLearnAChain(t *testing.T) {
	hold := func(p []byte, more ...[]byte) *Secrets {
		h := []HeldSecret{{ID: SecretID(p), State: SecretPrimary, Secret: p}}
		for _, m := range more {
			h = append(h, HeldSecret{ID: SecretID(m), State: SecretInstalled, Secret: m})
		}
		return mustSecrets(t, h...)
	}
	wb, _, _ := hold(secretA).WrapSecret(secretB)
	wc, _, _ := hold(secretB).WrapSecret(secretC)
	s := hold(secretA)
	if !s.Learn([]SecretRecord{{ID: SecretID(secretC), Wrapped: wc}, {ID: SecretID(secretB), Wrapped: wb}}) || !s.Has(SecretID(secretC)) {
		t.Fatalf("chain not learned: %+v", s.List())
	}
}

func TestUnwrapAnyTriesEveryKEK(t *testing.T) {
	k1, _ := DeriveKEK(secretA, InfoRaft)
	k2, _ := DeriveKEK(secretB, InfoRaft)
	k3, _ := DeriveKEK(secretC, InfoRaft)
	key, _ := GenerateKey(t0, 0, DefaultLifetime)
	w, _ := WrapKeys(k2, []Key{key})
	if got, err := UnwrapKeysAny([][]byte{k1, k2}, w); err != nil || got[0].ID != key.ID {
		t.Fatalf("UnwrapKeysAny: %v", err)
	}
	if _, err := UnwrapKeysAny([][]byte{k1, k3}, w); !errors.Is(err, ErrUnwrap) {
		t.Fatalf("UnwrapKeysAny without the KEK: %v", err)
	}
	if _, err := UnwrapKeysAny(nil, w); !errors.Is(err, ErrUnwrap) {
		t.Fatalf("UnwrapKeysAny with no KEK: %v", err)
	}
	b, _ := WrapBlob(k3, "p", []byte("x"))
	if p, err := UnwrapBlobAny([][]byte{k1, k3}, "p", b); err != nil || string(p) != "x" {
		t.Fatalf("UnwrapBlobAny: %q %v", p, err)
	}
}

// TestSecretsKeepASecretTheRecordsDoNotKnowYet: a node given the cluster's
// new secret in its file while its own state is older (it was down during
// a forced removal) keeps accepting that secret when its stale records name
// another primary, so the cluster can reach it and bring it up to date; a
// secret the records removed is retired.
func TestSecretsKeepASecretTheRecordsDoNotKnowYet(t *testing.T) {
	s := mustSecrets(t, held(secretB, SecretPrimary), held(secretC, SecretInstalled), held(secretA, SecretRetired))
	stale := []SecretRecord{{ID: SecretID(secretB), State: SecretPrimary}}
	if err := s.Sync(stale, []RemovedSecret{{ID: SecretID(secretA), Index: 7}}); err != nil {
		t.Fatal(err)
	}
	if s.State(SecretID(secretC)) != SecretInstalled || s.PrimaryID() != SecretID(secretB) || s.State(SecretID(secretA)) != SecretRetired {
		t.Fatalf("after stale records: %+v", s.List())
	}
	// The file's secret was primary at start: the records' primary takes
	// over and it stays accepted.
	f := mustSecrets(t, held(secretC, SecretPrimary), held(secretB, SecretInstalled))
	if err := f.Sync(stale, nil); err != nil {
		t.Fatal(err)
	}
	if f.PrimaryID() != SecretID(secretB) || f.State(SecretID(secretC)) != SecretInstalled {
		t.Fatalf("after records naming another primary: %+v", f.List())
	}
}
