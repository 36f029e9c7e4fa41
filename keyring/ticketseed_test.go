package keyring

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"
)

// testSeed is a deterministic seed named name.
func testSeed(name string) TicketSeed { return TicketSeed(sha256.Sum256([]byte("seed " + name))) }

// seedDays builds DaySeeds for day (counted from t0's day) from seed names.
func seedDays(day int64, names ...string) DaySeeds {
	d := DaySeeds{Day: dayOf(t0) + day}
	for _, n := range names {
		d.Seeds = append(d.Seeds, testSeed(n))
	}
	return d
}

// seededNames maps TicketKeysWith's answer back to names: "key/day" for a
// key from the keyring alone, "key/day@seed" for a seeded one, days counted
// from t0 (t0's day is 0), seeds from the names given.
func seededNames(r *Ring, now time.Time, seeds *TicketSeeds, scheme TicketScheme, seedNames ...string) []string {
	byKey := map[[TicketKeySize]byte]string{}
	base := dayOf(t0)
	for _, k := range r.Snapshot() {
		for d := base - 30; d < base+200; d++ {
			byKey[ticketKey(k, d)] = fmt.Sprintf("%s/%d", k.ID, d-base)
			for _, n := range seedNames {
				s := testSeed(n)
				byKey[seededTicketKey(k, d, &s)] = fmt.Sprintf("%s/%d@%s", k.ID, d-base, n)
			}
		}
	}
	var names []string
	for _, k := range r.TicketKeysWith(now, seeds, scheme) {
		name, ok := byKey[k]
		if !ok {
			name = "?"
		}
		names = append(names, name)
	}
	return names
}

func TestSeededTicketKeysNeedTheDaysSeedAndKeepTheDailyRules(t *testing.T) {
	names := []string{"s-1", "s1", "s2", "s3", "s3b", "s60", "s61"}
	a, b, c := mkKey("a", 0, 90*day), mkKey("b", 61*day+time.Hour, 150*day), mkKey("c", 0, 100*day)
	r := newTestRing(t, a, b, c)
	if err := r.Revoke("c"); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		desc   string
		seeds  []DaySeeds
		scheme TicketScheme
		at     time.Duration
		want   []string
	}{
		{"no seed: no key seals (tickets off), none opens", nil, TicketsSeeded, 3*day + 12*time.Hour, nil},
		{"the day's seed seals; each day opens under its own seed only; revoked c never",
			[]DaySeeds{seedDays(1, "s1"), seedDays(2, "s2"), seedDays(3, "s3")}, TicketsSeeded, 3*day + 12*time.Hour,
			[]string{"a/3@s3", "a/2@s2", "a/1@s1"}},
		{"without today's seed the latest earlier day's seals (every node opens it)",
			[]DaySeeds{seedDays(1, "s1"), seedDays(2, "s2")}, TicketsSeeded, 3*day + 12*time.Hour,
			[]string{"a/2@s2", "a/1@s1"}},
		{"within the grace after midnight yesterday's seed still seals",
			[]DaySeeds{seedDays(2, "s2"), seedDays(3, "s3")}, TicketsSeeded, 3*day + TicketKeyGrace - time.Second,
			[]string{"a/2@s2", "a/3@s3"}},
		{"a seed past seven days opens nothing",
			[]DaySeeds{seedDays(-1, "s-1"), seedDays(3, "s3")}, TicketsSeeded, 7*day + time.Hour,
			[]string{"a/3@s3"}},
		{"two seeds of a day (a leader change raced it): the first seals, both open",
			[]DaySeeds{seedDays(3, "s3b", "s3")}, TicketsSeeded, 3*day + 12*time.Hour,
			[]string{"a/3@s3b", "a/3@s3"}},
		{"the keyring scheme seals from the keyring alone and opens the seeded keys too",
			[]DaySeeds{seedDays(2, "s2"), seedDays(3, "s3")}, TicketsFromKeyring, 3*day + 12*time.Hour,
			[]string{"a/3", "a/3@s3", "a/2@s2", "a/2", "a/1", "a/0", "a/-1"}},
		{"after the keyring scheme: seeded keys seal, the keyring's still open",
			[]DaySeeds{seedDays(2, "s2"), seedDays(3, "s3")}, TicketsSeededOpenKeyring, 3*day + 12*time.Hour,
			[]string{"a/3@s3", "a/3", "a/2@s2", "a/2", "a/1", "a/0", "a/-1"}},
		{"b activated today at 01:00 and holds only yesterday's seed: it never sealed with it, so nothing seals",
			[]DaySeeds{seedDays(60, "s60")}, TicketsSeeded, 61*day + 2*time.Hour, nil},
		{"with today's seed b seals; a's keys of its days open",
			[]DaySeeds{seedDays(60, "s60"), seedDays(61, "s61")}, TicketsSeeded, 61*day + 2*time.Hour,
			[]string{"b/61@s61", "a/61@s61", "a/60@s60"}},
	}
	for _, tc := range cases {
		seeds := NewTicketSeeds()
		seeds.Adopt(tc.seeds)
		if got := seededNames(r, t0.Add(tc.at), seeds, tc.scheme, names...); !slices.Equal(got, tc.want) {
			t.Errorf("%s: ticket keys %v, want %v", tc.desc, got, tc.want)
		}
	}
}

func TestSeededTicketKeysFollowTheSeedsAsTheyChange(t *testing.T) {
	r := newTestRing(t, mkKey("a", 0, 90*day))
	seeds := NewTicketSeeds()
	now := t0.Add(3*day + time.Hour)
	if got := r.TicketKeysWith(now, seeds, TicketsSeeded); got != nil {
		t.Fatalf("no seed yet: %d keys, want none", len(got))
	}
	if !seeds.Generate(dayOf(now)) || seeds.Generate(dayOf(now)) {
		t.Fatal("Generate: want a seed made once per day")
	}
	first := r.TicketKeysWith(now, seeds, TicketsSeeded)
	if len(first) != 1 {
		t.Fatalf("after Generate: %d keys, want 1", len(first))
	}
	seeds.Adopt([]DaySeeds{{Day: dayOf(now), Seeds: []TicketSeed{testSeed("leader's")}}})
	second := r.TicketKeysWith(now, seeds, TicketsSeeded)
	if len(second) != 2 || second[0] == first[0] || second[1] != first[0] {
		t.Fatal("after adopting the leader's seed: want it sealing and the replaced seed still opening")
	}
	seeds.Clear()
	if got := r.TicketKeysWith(now, seeds, TicketsSeeded); got != nil {
		t.Fatalf("after Clear: %d keys, want none", len(got))
	}
}

func TestTicketSeedsAdoptFillAndPrune(t *testing.T) {
	s := NewTicketSeeds()
	base := dayOf(t0)
	s.Fill([]DaySeeds{seedDays(0, "x")})
	s.Fill([]DaySeeds{seedDays(0, "y")})
	s.Adopt([]DaySeeds{seedDays(0, "z", "x")})
	s.Adopt([]DaySeeds{seedDays(1, "a", "b", "c", "d", "e")})
	s.Adopt([]DaySeeds{{Day: base + 2, Seeds: []TicketSeed{{}}}})
	want := []DaySeeds{seedDays(0, "z", "x"), seedDays(1, "a", "b", "c", "d")}
	got := s.Days()
	if !slices.EqualFunc(got, want, DaySeeds.Equal) {
		t.Fatalf("Days() = %d days, want: Fill keeps a held day, Adopt puts the leader's first and keeps the held, at most %d a day, no zero seed", len(got), MaxSeedsPerDay)
	}

	for d := int64(-10); d <= 10; d++ {
		s.Generate(base + d)
	}
	s.mu.RLock()
	old := s.days[base-7][0]
	s.mu.RUnlock()
	s.Prune(base)
	var days []int64
	for _, d := range s.Days() {
		days = append(days, d.Day-base)
	}
	if !slices.Equal(days, []int64{-6, -5, -4, -3, -2, -1, 0, 1}) {
		t.Fatalf("after Prune: days %v, want today's six before it, today and tomorrow", days)
	}
	if *old != (TicketSeed{}) {
		t.Fatal("a pruned seed was forgotten but not overwritten")
	}
}

func TestSeededTicketKeyKnownAnswers(t *testing.T) {
	// openssl kdf -keylen 32 -kdfopt digest:SHA256 -kdfopt hexkey:$(sha256 of "material a") \
	//   -kdfopt hexsalt:$(sha256 of "seed 20454") -kdfopt "info:tether tls session ticket v3 a 20454" HKDF
	a := mkKey("a", 0, 90*day)
	seed := TicketSeed(sha256.Sum256([]byte("seed 20454")))
	for _, v := range []struct {
		day  int64
		want string
	}{
		{20454, "fb9a6d8ec915362d686c10197c769c4f28fe98c16067d88f29ce8f6e2cfdc77b"},
		{20455, "5fa17b9253ccea79e15df8b33d55b20490703445d0ec3727ddb6b81c4ddba18b"},
	} {
		k := seededTicketKey(a, v.day, &seed)
		if got := hex.EncodeToString(k[:]); got != v.want {
			t.Errorf("seeded ticket key of a, day %d: %s, want %s", v.day, got, v.want)
		}
	}
}

func TestTicketSeedNeverPrinted(t *testing.T) {
	seed := testSeed("x")
	var logged bytes.Buffer
	slog.New(slog.NewTextHandler(&logged, nil)).Info("seed", "seed", seed)
	out := fmt.Sprintf("%v %+v %#v %s %x %X %q", seed, seed, seed, seed, seed, seed, seed) + seed.String() + logged.String()
	for _, enc := range []string{hex.EncodeToString(seed[:]), strings.ToUpper(hex.EncodeToString(seed[:])), hex.EncodeToString(seed[:4]), fmt.Sprintf("[%d %d ", seed[0], seed[1])} {
		if strings.Contains(out, enc) {
			t.Fatalf("a seed was printed: %s", out)
		}
	}
}
