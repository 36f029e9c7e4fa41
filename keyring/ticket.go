package keyring

import (
	"crypto/hkdf"
	"crypto/sha256"
	"time"
)

// InfoTicket is the HKDF info that turns a key's material into a TLS session
// ticket key: a purpose of its own, so a ticket key known to crypto/tls
// reveals nothing of the key that seals affinity values.
const InfoTicket = "tether tls session ticket v1"

// TicketKeySize is the length of a TLS session ticket key
// (crypto/tls.Config.SetSessionTicketKeys).
const TicketKeySize = 32

// ticketMemo is the last answer of TicketKeys, valid for its state while
// now is in [from, until).
type ticketMemo struct {
	s           *state
	from, until time.Time
	keys        [][TicketKeySize]byte
}

// TicketKeys returns the TLS session ticket keys at now, each derived with
// HKDF-SHA256 from one key of the ring (info InfoTicket and the key id):
// first the key's that encrypts at now (it encrypts new tickets), then every
// other key that still decrypts (installed, inactive, expired within
// retention; newest activation first), so a ticket issued by any node under
// any of them resumes on every node, and a rotation or a node whose clock
// runs slightly ahead never breaks resumption. Revoked keys are left out: a
// ticket sealed under one stops resuming at once. Without an active key it
// returns nil (the caller then keeps tickets local).
//
// The answer is cached until the ring changes or a key's activation, expiry
// or retention end passes, so a caller may ask on every handshake. The
// returned slice is shared: do not modify it.
func (r *Ring) TicketKeys(now time.Time) [][TicketKeySize]byte {
	s := r.cur.Load()
	if m := r.tickets.Load(); m != nil && m.s == s && !now.Before(m.from) && now.Before(m.until) {
		return m.keys
	}
	m := &ticketMemo{s: s, from: now, until: now.Add(24 * time.Hour)}
	later := func(t time.Time) {
		if t.After(now) && t.Before(m.until) {
			m.until = t
		}
	}
	if act := s.active(now); act != nil {
		m.keys = append(m.keys, ticketKey(act.key))
		for _, e := range s.order {
			if e == act || e.key.Revoked || !now.Before(e.openUntil) {
				continue
			}
			m.keys = append(m.keys, ticketKey(e.key))
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

func ticketKey(k Key) [TicketKeySize]byte {
	var out [TicketKeySize]byte
	// HKDF with SHA-256 fails only for an output longer than 255*32 bytes.
	b, _ := hkdf.Key(sha256.New, k.Material, nil, InfoTicket+" "+k.ID, TicketKeySize)
	copy(out[:], b)
	return out
}
