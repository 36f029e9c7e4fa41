package keyring

import (
	"bytes"
	"slices"
	"testing"
	"time"
)

// ticketIDs maps TicketKeys' answer back to key ids.
func ticketIDs(r *Ring, now time.Time) []string {
	byKey := map[[TicketKeySize]byte]string{}
	for _, k := range r.Snapshot() {
		byKey[ticketKey(k)] = k.ID
	}
	var ids []string
	for _, k := range r.TicketKeys(now) {
		ids = append(ids, byKey[k])
	}
	return ids
}

func TestTicketKeysEncryptWithTheActiveKeyAndDecryptWithEveryOther(t *testing.T) {
	// a: active days 0-90 (retention to 120); b: installed, activates at
	// day 60; c: revoked.
	a, b, c := mkKey("a", 0, 90*day), mkKey("b", 60*day, 150*day), mkKey("c", 10*day, 100*day)
	r := newTestRing(t, a, b, c)
	if err := r.Revoke("c"); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		desc string
		at   time.Duration
		want []string
	}{
		{"before any key activates: none (tickets stay local)", -day, nil},
		{"a encrypts; installed b decrypts; revoked c never", day, []string{"a", "b"}},
		{"once b activates it encrypts and a still decrypts", 61 * day, []string{"b", "a"}},
		{"a expired within its retention still decrypts", 100 * day, []string{"b", "a"}},
		{"a past its retention is gone", 121 * day, []string{"b"}},
		{"back before b activates (the answer follows the clock, not a cache)", 30 * day, []string{"a", "b"}},
	}
	for _, tc := range cases {
		if got := ticketIDs(r, t0.Add(tc.at)); !slices.Equal(got, tc.want) {
			t.Errorf("%s: ticket keys of %v, want %v", tc.desc, got, tc.want)
		}
	}

	if err := r.Revoke("b"); err != nil {
		t.Fatal(err)
	}
	if got := ticketIDs(r, t0.Add(61*day)); !slices.Equal(got, []string{"a"}) {
		t.Errorf("after revoking b: ticket keys of %v, want [a] (a revocation takes effect at once)", got)
	}
}

func TestTicketKeysAreDerivedPerKeyAndSameOnEveryNode(t *testing.T) {
	a, b := mkKey("a", 0, 90*day), mkKey("b", 0, 90*day)
	b.Material = a.Material // same material, other id
	r1, r2 := newTestRing(t, a, b), newTestRing(t, a, b)
	k1, k2 := r1.TicketKeys(t0.Add(day)), r2.TicketKeys(t0.Add(day))
	if len(k1) != 2 || !slices.Equal(k1, k2) {
		t.Fatalf("two rings with the same keys gave different ticket keys (%d, %d keys)", len(k1), len(k2))
	}
	if k1[0] == k1[1] {
		t.Error("two keys with the same material but other ids gave the same ticket key")
	}
	for _, k := range k1 {
		if bytes.Equal(k[:], a.Material) {
			t.Error("a ticket key is the key material itself: crypto/tls would hold the affinity key")
		}
	}
}
