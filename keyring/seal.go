package keyring

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/binary"
	"time"
)

const (
	wireVersion = 1
	nonceSize   = 12
	tagSize     = 16
	// MaxValueLen bounds an encoded value; Open rejects longer input before
	// decoding it, and Seal refuses to produce it.
	MaxValueLen = 4096
	// minRaw is the shortest decodable value: version, id length, a
	// one-byte id, nonce and tag.
	minRaw = 2 + 1 + nonceSize + tagSize
)

// b64 is base64url without padding, strict: non-canonical trailing bits
// are rejected, so every accepted value has exactly one encoding.
var b64 = base64.RawURLEncoding.Strict()

// Purpose encodes parts (policy, cluster id, key name) unambiguously: each
// part is length-prefixed, so ("a|b", "c") and ("a", "b|c") differ.
func Purpose(parts ...string) []byte {
	n := 0
	for _, p := range parts {
		n += binary.MaxVarintLen64 + len(p)
	}
	b := make([]byte, 0, n)
	for _, p := range parts {
		b = binary.AppendUvarint(b, uint64(len(p)))
		b = append(b, p...)
	}
	return b
}

// Seal encrypts plaintext with the key active now, bound to purpose.
func (r *Ring) Seal(purpose, plaintext []byte) (string, error) {
	return r.SealAt(r.now(), purpose, plaintext)
}

// SealAt is Seal with the given time.
func (r *Ring) SealAt(now time.Time, purpose, plaintext []byte) (string, error) {
	e := r.cur.Load().active(now)
	if e == nil {
		return "", ErrNoActiveKey
	}
	hl := len(e.hdr)
	rawLen := hl + nonceSize + len(plaintext) + tagSize
	encLen := b64.EncodedLen(rawLen)
	if encLen > MaxValueLen {
		return "", ErrTooLarge
	}
	// One buffer: raw value | additional data | encoded value.
	buf := make([]byte, rawLen+hl+len(purpose)+encLen)
	raw := buf[:rawLen:rawLen]
	aad := buf[rawLen : rawLen+hl+len(purpose)]
	enc := buf[rawLen+len(aad):]
	copy(raw, e.hdr)
	nonce := raw[hl : hl+nonceSize]
	_, _ = rand.Read(nonce) // never fails since Go 1.24
	copy(aad, e.hdr)
	copy(aad[hl:], purpose)
	e.aead.Seal(raw[:hl+nonceSize], nonce, plaintext, aad)
	b64.Encode(enc, raw)
	return string(enc), nil
}

// Open decrypts value sealed for purpose. Any failure is one of ErrTooLarge,
// ErrMalformed, ErrUnknownKey, ErrRevoked, ErrExpired or ErrAuth. It never
// panics on any input.
func (r *Ring) Open(purpose []byte, value string) ([]byte, error) {
	return r.OpenAt(r.now(), purpose, value)
}

// OpenAt is Open with the given time.
func (r *Ring) OpenAt(now time.Time, purpose []byte, value string) ([]byte, error) {
	if len(value) > MaxValueLen {
		return nil, ErrTooLarge
	}
	rawLen := b64.DecodedLen(len(value))
	if rawLen < minRaw {
		return nil, ErrMalformed
	}
	// One allocation: raw value | additional data (sized for the longest
	// header). The plaintext is decrypted in place.
	buf := make([]byte, rawLen+2+MaxIDLen+len(purpose))
	raw := buf[:rawLen:rawLen]
	n, ok := decode(raw, value)
	// The decoder skips \r and \n; accept only the one canonical encoding.
	if !ok || b64.EncodedLen(n) != len(value) || n < minRaw {
		return nil, ErrMalformed
	}
	raw = raw[:n]
	idLen := int(raw[1])
	if raw[0] != wireVersion || idLen == 0 || idLen > MaxIDLen || n < 2+idLen+nonceSize+tagSize {
		return nil, ErrMalformed
	}
	hl := 2 + idLen
	e := r.cur.Load().byID[string(raw[2:hl])]
	switch {
	case e == nil:
		return nil, ErrUnknownKey
	case e.key.Revoked:
		return nil, ErrRevoked
	case !now.Before(e.openUntil):
		return nil, ErrExpired
	}
	aad := buf[rawLen:]
	copy(aad, raw[:hl])
	copy(aad[hl:], purpose)
	aad = aad[:hl+len(purpose)]
	nonce := raw[hl : hl+nonceSize]
	ct := raw[hl+nonceSize:]
	pt, err := e.aead.Open(ct[:0], nonce, ct, aad)
	if err != nil {
		return nil, ErrAuth
	}
	return pt[:len(pt):len(pt)], nil
}

// decode decodes value into dst through a small stack buffer, in chunks
// of whole quanta, so the string is not copied to the heap.
func decode(dst []byte, value string) (int, bool) {
	var chunk [256]byte // a multiple of 4: only the last chunk is partial
	n := 0
	for len(value) > 0 {
		c := copy(chunk[:], value)
		value = value[c:]
		m, err := b64.Decode(dst[n:], chunk[:c])
		if err != nil {
			return 0, false
		}
		n += m
	}
	return n, true
}

// KeyIDOf returns the key id a well-formed sealed value names, without
// opening it, and false for anything else (malformed, or an id no key can
// have). It lets a node that does not hold the key decide whether it is
// worth asking for it; the id is not authenticated until Open succeeds.
func KeyIDOf(value string) (string, bool) {
	if len(value) > MaxValueLen {
		return "", false
	}
	rawLen := b64.DecodedLen(len(value))
	if rawLen < minRaw {
		return "", false
	}
	raw := make([]byte, rawLen)
	n, ok := decode(raw, value)
	if !ok || b64.EncodedLen(n) != len(value) || n < minRaw {
		return "", false
	}
	idLen := int(raw[1])
	if raw[0] != wireVersion || idLen == 0 || idLen > MaxIDLen || n < 2+idLen+nonceSize+tagSize {
		return "", false
	}
	id := string(raw[2 : 2+idLen])
	if !validID(id) {
		return "", false
	}
	return id, true
}
