package keyring

import (
	"bytes"
	"encoding/hex"
	"fmt"
	"slices"
	"testing"
	"time"
)

// ticketNames maps TicketKeys' answer back to "key id/day" names, the day
// counted from t0 (t0's day is 0).
func ticketNames(r *Ring, now time.Time) []string {
	byKey := map[[TicketKeySize]byte]string{}
	base := dayOf(t0)
	for _, k := range r.Snapshot() {
		for d := base - 30; d < base+200; d++ {
			byKey[ticketKey(k, d)] = fmt.Sprintf("%s/%d", k.ID, d-base)
		}
	}
	var names []string
	for _, k := range r.TicketKeys(now) {
		name, ok := byKey[k]
		if !ok {
			name = "?"
		}
		names = append(names, name)
	}
	return names
}

func TestTicketKeysSealWithTheDaysKeyAndOpenTheLastSevenDays(t *testing.T) {
	// a: active from day 0 to day 90 (retention to 120); b: installed,
	// activates at day 60 + 12h; c: revoked.
	a, b, c := mkKey("a", 0, 90*day), mkKey("b", 60*day+12*time.Hour, 150*day), mkKey("c", 10*day, 100*day)
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
		{"day 0: a's day-0 key seals; day -1's opens too (a node ahead by less than the grace sealed with it at midnight)", 12 * time.Hour, []string{"a/0", "a/-1"}},
		{"day 3: today's key seals; the days since a activated open", 3*day + 12*time.Hour, []string{"a/3", "a/2", "a/1", "a/0", "a/-1"}},
		{"day 10: seven days open, the oldest from day 4; revoked c never", 10*day + time.Hour,
			[]string{"a/10", "a/9", "a/8", "a/7", "a/6", "a/5", "a/4"}},
		{"day 11, within the grace after midnight: yesterday's key still seals, today's already opens", 11*day + TicketKeyGrace - time.Second,
			[]string{"a/10", "a/11", "a/9", "a/8", "a/7", "a/6", "a/5"}},
		{"day 11 after the grace: today's key seals", 11*day + TicketKeyGrace,
			[]string{"a/11", "a/10", "a/9", "a/8", "a/7", "a/6", "a/5"}},
		{"day 60, b installed for noon: b's day-60 key opens (a node ahead may seal with it)", 60*day + time.Hour,
			[]string{"a/60", "b/60", "a/59", "a/58", "a/57", "a/56", "a/55", "a/54"}},
		{"day 61: b seals; a's keys of the days it was active still open", 61*day + time.Hour,
			[]string{"b/61", "a/61", "b/60", "a/60", "a/59", "a/58", "a/57", "a/56", "a/55"}},
		{"day 95: a expired at day 90: its keys of days 89 and before are gone", 95*day + time.Hour,
			[]string{"b/95", "b/94", "b/93", "b/92", "b/91", "b/90", "b/89", "a/89"}},
		{"day 97: a's days are all past seven days", 97*day + time.Hour,
			[]string{"b/97", "b/96", "b/95", "b/94", "b/93", "b/92", "b/91"}},
		{"back to day 3 (the answer follows the clock, not a cache)", 3*day + 12*time.Hour, []string{"a/3", "a/2", "a/1", "a/0", "a/-1"}},
	}
	for _, tc := range cases {
		if got := ticketNames(r, t0.Add(tc.at)); !slices.Equal(got, tc.want) {
			t.Errorf("%s: ticket keys %v, want %v", tc.desc, got, tc.want)
		}
	}

	if err := r.Revoke("b"); err != nil {
		t.Fatal(err)
	}
	if got := ticketNames(r, t0.Add(61*day+time.Hour)); !slices.Equal(got, []string{"a/61", "a/60", "a/59", "a/58", "a/57", "a/56", "a/55"}) {
		t.Errorf("after revoking b: ticket keys %v, want a's only (a revocation takes effect at once)", got)
	}
}

func TestTicketKeysAreDerivedPerKeyAndDayAndSameOnEveryNode(t *testing.T) {
	a, b := mkKey("a", 0, 90*day), mkKey("b", 0, 90*day)
	b.Material = a.Material // same material, other id
	r1, r2 := newTestRing(t, a, b), newTestRing(t, a, b)
	now := t0.Add(2*day + time.Hour)
	k1, k2 := r1.TicketKeys(now), r2.TicketKeys(now)
	if len(k1) != 8 || !slices.Equal(k1, k2) {
		t.Fatalf("two rings with the same keys gave different ticket keys (%d, %d keys, want 8: two keys, days -1 to 2)", len(k1), len(k2))
	}
	seen := map[[TicketKeySize]byte]bool{}
	for _, k := range k1 {
		if seen[k] {
			t.Error("two ticket keys are equal: keys of other ids or days must differ")
		}
		seen[k] = true
		if bytes.Equal(k[:], a.Material) {
			t.Error("a ticket key is the key material itself: crypto/tls would hold the affinity key")
		}
	}
	if next := r1.TicketKeys(now.Add(day)); next[0] == k1[0] {
		t.Error("the key sealing tickets did not change from one day to the next")
	}
}

// The derivation is part of the wire between nodes (and releases): every
// node must compute the same ticket keys. Vectors from OpenSSL:
//
//	openssl kdf -keylen 32 -kdfopt digest:SHA256 -kdfopt hexkey:$(sha256 of "material a") \
//	  -kdfopt "info:tether tls session ticket v2 a 20454" HKDF
func TestTicketKeyKnownAnswers(t *testing.T) {
	a := mkKey("a", 0, 90*day)
	for _, v := range []struct {
		day  int64
		want string
	}{
		{20454, "20d5f487c216245bf174c238097f79177c04cb50524f119c56c67a3769e71564"},
		{20455, "f5cfba166e617626f58a8496e461406c40ffdb45fb280b371280e3e3fe1e1734"},
	} {
		if dayOf(t0) != 20454 {
			t.Fatalf("dayOf(%s) = %d, want 20454", t0, dayOf(t0))
		}
		k := ticketKey(a, v.day)
		if got := hex.EncodeToString(k[:]); got != v.want {
			t.Errorf("ticket key of a, day %d: %s, want %s", v.day, got, v.want)
		}
	}
}

func TestTicketDaysAreUTCDays(t *testing.T) {
	for _, c := range []struct {
		at   time.Time
		want int64
	}{
		{time.Unix(0, 0), 0},
		{time.Unix(86399, 999), 0},
		{time.Unix(86400, 0), 1},
		{time.Unix(-1, 0), -1},
		{time.Date(2026, 1, 1, 23, 59, 59, 0, time.FixedZone("UTC-5", -5*3600)), 20455},
	} {
		if got := dayOf(c.at); got != c.want {
			t.Errorf("dayOf(%s) = %d, want %d", c.at, got, c.want)
		}
		if s := dayStart(c.want); s.After(c.at) || !c.at.Before(s.Add(TicketKeyRotation)) {
			t.Errorf("dayStart(%d) = %s does not start the day of %s", c.want, s, c.at)
		}
	}
}
