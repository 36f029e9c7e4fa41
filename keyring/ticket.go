package keyring

import (
	"crypto/hkdf"
	"crypto/sha256"
	"fmt"
	"strconv"
	"time"
)

// InfoTicket is the HKDF info that turns a key's material alone into the
// TLS session ticket key of one day (TicketsFromKeyring): a purpose of its
// own, so a ticket key known to crypto/tls reveals nothing of the key that
// seals affinity values, nor the ticket key of another day.
const InfoTicket = "tether tls session ticket v2"

// TicketKeySize is the length of a TLS session ticket key
// (crypto/tls.Config.SetSessionTicketKeys).
const TicketKeySize = 32

// Ticket keys rotate as crypto/tls's own automatic ones do: a new key
// every day, each opening tickets for 7 days.
const (
	// TicketKeyRotation is how often the key sealing new tickets changes.
	// Days are UTC days of the caller's clock.
	TicketKeyRotation = 24 * time.Hour
	// TicketKeyLifetime is how long a day's ticket key opens tickets,
	// counted from the start of its day: a ticket resumes at most this
	// long after it was issued.
	TicketKeyLifetime = 7 * TicketKeyRotation
	// TicketKeyGrace is how long after its day starts a day's key begins
	// sealing tickets. Every node opens tickets under the day's key from
	// the day's start, so one whose clock runs ahead by less than this
	// never issues a ticket another node cannot open yet.
	TicketKeyGrace = 5 * time.Minute
)

// ticketDays is how many days' keys open tickets: today's and the six before.
const ticketDays = int64(TicketKeyLifetime / TicketKeyRotation)

// InfoTicketSeeded is the HKDF info of a seeded ticket key: the key's
// material is the input and the day's TicketSeed the salt, so the ticket
// key needs both, and a keyring key alone (a backup and the cluster
// secret) yields none.
const InfoTicketSeeded = "tether tls session ticket v3"

// TicketScheme says which ticket keys TicketKeysWith derives.
type TicketScheme int

const (
	// TicketsFromKeyring seals with keys derived from the keyring keys
	// alone (the scheme of releases before ticket seeds, used while one
	// runs in the cluster), and opens those and the seeded keys of the
	// seeds held (a node that already left the scheme seals with them).
	TicketsFromKeyring TicketScheme = iota
	// TicketsSeeded seals and opens with seeded keys only.
	TicketsSeeded
	// TicketsSeededOpenKeyring seals with seeded keys and opens those
	// and the keys from the keyring alone: for a while after the cluster
	// left TicketsFromKeyring, so its tickets keep resuming.
	TicketsSeededOpenKeyring
)

func (s TicketScheme) String() string {
	switch s {
	case TicketsFromKeyring:
		return "keyring"
	case TicketsSeeded:
		return "seeded"
	case TicketsSeededOpenKeyring:
		return "seeded+keyring"
	}
	return fmt.Sprintf("TicketScheme(%d)", int(s))
}

// ticketMemo is the last answer of TicketKeysWith, valid for its state,
// seeds and scheme while now is in [from, until).
type ticketMemo struct {
	s           *state
	seeds       *TicketSeeds
	gen         uint64
	scheme      TicketScheme
	from, until time.Time
	keys        [][TicketKeySize]byte
}

// TicketKeys returns the TLS session ticket keys at now derived from the
// keyring keys alone: TicketKeysWith(now, nil, TicketsFromKeyring).
func (r *Ring) TicketKeys(now time.Time) [][TicketKeySize]byte {
	return r.TicketKeysWith(now, nil, TicketsFromKeyring)
}

// TicketKeysWith returns the TLS session ticket keys at now, each derived
// with HKDF-SHA256 from one key of the ring and one UTC day: from the key
// alone (info InfoTicket, the key id and the day), or seeded, from the key
// and that day's seed in seeds (info InfoTicketSeeded), as scheme says.
// Every node holding the same ring and seeds computes the same keys.
//
// The first seals new tickets: the day of now-TicketKeyGrace, under the key
// that encrypts at now. A seeded scheme seals with the day's first seed;
// lacking it, with the latest earlier day's of the seven whose tickets
// open (every node opens those), and lacking any, it returns nil. The
// others open tickets: the day keys of today and the six before, under
// every key that still decrypts (installed, active, expired within
// retention) and may have sealed tickets that day, with every seed held
// for the day; newest day first. A ticket thus resumes on every node for
// at most TicketKeyLifetime after it was issued, across a day boundary, a
// rotation of the ring or a node whose clock runs a little ahead, and a
// ticket under a revoked key stops resuming at once. Without an active
// key it returns nil: the caller then issues no tickets.
//
// The answer is cached until the ring or the seeds change, a day or its
// grace ends, or a key's activation, expiry or retention end passes, so a
// caller may ask on every handshake. The returned slice is shared: do not
// modify it.
func (r *Ring) TicketKeysWith(now time.Time, seeds *TicketSeeds, scheme TicketScheme) [][TicketKeySize]byte {
	s := r.cur.Load()
	var gen uint64
	if seeds != nil {
		gen = seeds.gen.Load()
	}
	if m := r.tickets.Load(); m != nil && m.s == s && m.seeds == seeds && m.gen == gen && m.scheme == scheme && !now.Before(m.from) && now.Before(m.until) {
		return m.keys
	}
	if seeds != nil {
		// Seeds change under the write lock, so gen read under the read
		// lock names the seeds derived from.
		seeds.mu.RLock()
		defer seeds.mu.RUnlock()
		gen = seeds.gen.Load()
	}
	today := dayOf(now)
	sealDay := dayOf(now.Add(-TicketKeyGrace))
	m := &ticketMemo{s: s, seeds: seeds, gen: gen, scheme: scheme, from: now, until: dayStart(today + 1)}
	later := func(t time.Time) {
		if t.After(now) && t.Before(m.until) {
			m.until = t
		}
	}
	later(dayStart(sealDay + 1).Add(TicketKeyGrace))
	if act := s.active(now); act != nil {
		if seal, ok := sealingTicketKey(act.key, today, sealDay, seeds, scheme); ok {
			m.keys = append(m.keys, seal)
			open := func(k [TicketKeySize]byte) {
				if k != seal {
					m.keys = append(m.keys, k)
				}
			}
			for day := today; day > today-ticketDays; day-- {
				for _, e := range s.order {
					if e.key.Revoked || !now.Before(e.openUntil) || !mayHaveSealed(e.key, day) {
						continue
					}
					if seeds != nil {
						for _, seed := range seeds.days[day] {
							open(seededTicketKey(e.key, day, seed))
						}
					}
					if scheme != TicketsSeeded {
						open(ticketKey(e.key, day))
					}
				}
			}
		}
	}
	for _, e := range s.order {
		later(e.key.Activates)
		later(e.key.Expires)
		later(e.openUntil)
	}
	r.tickets.Store(m)
	return m.keys
}

// sealingTicketKey is the key that seals new tickets under act on sealDay
// (see TicketKeysWith); false when a seeded scheme holds no seed to seal
// with. The caller holds seeds.mu for reading.
func sealingTicketKey(act Key, today, sealDay int64, seeds *TicketSeeds, scheme TicketScheme) ([TicketKeySize]byte, bool) {
	if scheme == TicketsFromKeyring {
		return ticketKey(act, sealDay), true
	}
	if seeds == nil {
		return [TicketKeySize]byte{}, false
	}
	for day := sealDay; day > today-ticketDays; day-- {
		seed := seeds.sealing(day)
		if seed == nil || (day != sealDay && !mayHaveSealed(act, day)) {
			continue
		}
		return seededTicketKey(act, day, seed), true
	}
	return [TicketKeySize]byte{}, false
}

// mayHaveSealed reports whether a node may have sealed tickets under k's
// key of day: day is sealed from its start plus TicketKeyGrace to the
// next day's, by the sealing node's clock, and k encrypts from its
// activation to its expiry. (A node whose clock runs ahead may thus have
// sealed with k under the day before its activation.)
func mayHaveSealed(k Key, day int64) bool {
	return k.Activates.Before(dayStart(day+1).Add(TicketKeyGrace)) && dayStart(day).Add(TicketKeyGrace).Before(k.Expires)
}

// TicketDay is the UTC day of t, counted from the Unix epoch: the day
// whose ticket keys (and seed) t falls in.
func TicketDay(t time.Time) int64 { return dayOf(t) }

// TicketDayStart is the start of day (UTC).
func TicketDayStart(day int64) time.Time { return dayStart(day) }

// dayOf is the UTC day of t, counted from the Unix epoch.
func dayOf(t time.Time) int64 {
	const secs = int64(TicketKeyRotation / time.Second)
	u := t.Unix()
	d := u / secs
	if u%secs < 0 {
		d--
	}
	return d
}

// dayStart is the start of day.
func dayStart(day int64) time.Time {
	return time.Unix(day*int64(TicketKeyRotation/time.Second), 0).UTC()
}

// ticketKey is k's ticket key of day.
func ticketKey(k Key, day int64) [TicketKeySize]byte {
	var out [TicketKeySize]byte
	// HKDF with SHA-256 fails only for an output longer than 255*32 bytes.
	b, _ := hkdf.Key(sha256.New, k.Material, nil, InfoTicket+" "+k.ID+" "+strconv.FormatInt(day, 10), TicketKeySize)
	copy(out[:], b)
	return out
}

// seededTicketKey is k's ticket key of day under seed.
func seededTicketKey(k Key, day int64, seed *TicketSeed) [TicketKeySize]byte {
	var out [TicketKeySize]byte
	b, _ := hkdf.Key(sha256.New, k.Material, seed[:], InfoTicketSeeded+" "+k.ID+" "+strconv.FormatInt(day, 10), TicketKeySize)
	copy(out[:], b)
	clear(b)
	return out
}
