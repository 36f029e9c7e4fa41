package keyring

import (
	"crypto/hkdf"
	"crypto/sha256"
	"strconv"
	"time"
)

// InfoTicket is the HKDF info that turns a key's material into the TLS
// session ticket key of one day: a purpose of its own, so a ticket key
// known to crypto/tls reveals nothing of the key that seals affinity
// values, nor the ticket key of another day.
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

// ticketMemo is the last answer of TicketKeys, valid for its state while
// now is in [from, until).
type ticketMemo struct {
	s           *state
	from, until time.Time
	keys        [][TicketKeySize]byte
}

// TicketKeys returns the TLS session ticket keys at now, each derived with
// HKDF-SHA256 from one key of the ring and one UTC day (info InfoTicket,
// the key id and the day), so every node holding the same ring computes the
// same keys with no exchange.
//
// The first seals new tickets: the day of now-TicketKeyGrace, under the key
// that encrypts at now. The others open tickets: the day keys of today and
// the six days before, under every key that still decrypts (installed,
// active, expired within retention) and may have sealed tickets that day;
// newest day first. A ticket thus resumes on every node for at most
// TicketKeyLifetime after it was issued, across a day boundary, a rotation
// of the ring or a node whose clock runs a little ahead, and a ticket
// under a revoked key stops resuming at once. Without an active key it
// returns nil (the caller then keeps tickets local).
//
// The answer is cached until the ring changes, a day or its grace ends, or
// a key's activation, expiry or retention end passes, so a caller may ask
// on every handshake. The returned slice is shared: do not modify it.
func (r *Ring) TicketKeys(now time.Time) [][TicketKeySize]byte {
	s := r.cur.Load()
	if m := r.tickets.Load(); m != nil && m.s == s && !now.Before(m.from) && now.Before(m.until) {
		return m.keys
	}
	today := dayOf(now)
	sealDay := dayOf(now.Add(-TicketKeyGrace))
	m := &ticketMemo{s: s, from: now, until: dayStart(today + 1)}
	later := func(t time.Time) {
		if t.After(now) && t.Before(m.until) {
			m.until = t
		}
	}
	later(dayStart(sealDay + 1).Add(TicketKeyGrace))
	if act := s.active(now); act != nil {
		m.keys = append(m.keys, ticketKey(act.key, sealDay))
		for day := today; day > today-ticketDays; day-- {
			for _, e := range s.order {
				if (e == act && day == sealDay) || e.key.Revoked || !now.Before(e.openUntil) || !mayHaveSealed(e.key, day) {
					continue
				}
				m.keys = append(m.keys, ticketKey(e.key, day))
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

// mayHaveSealed reports whether a node may have sealed tickets under k's
// key of day: day is sealed from its start plus TicketKeyGrace to the
// next day's, by the sealing node's clock, and k encrypts from its
// activation to its expiry. (A node whose clock runs ahead may thus have
// sealed with k under the day before its activation.)
func mayHaveSealed(k Key, day int64) bool {
	return k.Activates.Before(dayStart(day+1).Add(TicketKeyGrace)) && dayStart(day).Add(TicketKeyGrace).Before(k.Expires)
}

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
