package dataprotection

import (
	"encoding/binary"
	"errors"
)

// magicHeader starts every payload (KeyRingBasedDataProtector's
// MAGIC_HEADER_V0); its low nibble is the payload version, always 0.
const magicHeader = 0x09F0C9F0

// headerSize is the magic header and the key id in front of a payload.
const headerSize = 4 + 16

// Errors of Unprotect besides ErrInvalid.
var (
	// ErrInvalid is any malformed, truncated or tampered payload, or one
	// protected under other purposes.
	ErrInvalid = errors.New("dataprotection: payload invalid")
	// ErrKeyNotFound: the payload names a key the ring does not have.
	ErrKeyNotFound = errors.New("dataprotection: key not found in the key ring")
	// ErrKeyRevoked: the payload's key has been revoked (ASP.NET refuses it
	// too, outside DangerousUnprotect).
	ErrKeyRevoked = errors.New("dataprotection: key revoked")
	// ErrNoDefaultKey: Protect found no active key (none activated, all
	// expired, revoked or unreadable).
	ErrNoDefaultKey = errors.New("dataprotection: no active key to protect with")
)

// Protector is ASP.NET's IDataProtector for one purpose chain over a Ring.
// Safe for concurrent use.
type Protector struct {
	ring     *Ring
	purposes []string
	tmpl     []byte
	opened   openedCache
}

// Protector returns the protector for the purpose chain, as
// provider.CreateProtector(p0).CreateProtector(p1)... in ASP.NET. The
// application discriminator, when the app has one, is the first purpose.
func (r *Ring) Protector(purposes ...string) *Protector {
	ps := append([]string(nil), purposes...)
	return &Protector{ring: r, purposes: ps, tmpl: aadTemplate(ps)}
}

// Protector returns a child protector with one more purpose
// (CreateProtector).
func (p *Protector) Protector(purpose string) *Protector {
	return p.ring.Protector(append(append([]string(nil), p.purposes...), purpose)...)
}

// Purposes are the protector's purpose chain.
func (p *Protector) Purposes() []string { return append([]string(nil), p.purposes...) }

// Protect encrypts plaintext with the ring's default key:
// { magic header | key id | encryptor payload }.
func (p *Protector) Protect(plaintext []byte) ([]byte, error) {
	k := p.ring.defaultKey()
	if k == nil {
		return nil, ErrNoDefaultKey
	}
	body, err := k.enc.encrypt(p.ring.rand, plaintext, aadFor(p.tmpl, k.ID))
	if err != nil {
		return nil, err
	}
	out := make([]byte, headerSize, headerSize+len(body))
	binary.BigEndian.PutUint32(out, magicHeader)
	copy(out[4:], k.ID[:])
	return append(out, body...), nil
}

// Unprotect decrypts a payload from Protect (here or in ASP.NET). A key the
// ring does not know makes it re-read the key ring directory first (at most
// once per MissRefresh), as ASP.NET refreshes its ring on an unknown key.
// Payloads that opened are remembered (openedCache), so a client sending
// the same affinity value on every request costs one decryption, not one
// per request. The returned slice is the caller's.
func (p *Protector) Unprotect(data []byte) ([]byte, error) {
	if len(data) < headerSize {
		return nil, ErrInvalid
	}
	h := binary.BigEndian.Uint32(data)
	if h&^0xF != magicHeader || h&0xF != 0 {
		return nil, ErrInvalid
	}
	var id KeyID
	copy(id[:], data[4:headerSize])
	if pt, ok := p.opened.get(p.ring, id, data); ok {
		return pt, nil
	}
	k := p.ring.key(id)
	if k == nil {
		return nil, ErrKeyNotFound
	}
	if k.Revoked {
		return nil, ErrKeyRevoked
	}
	if k.enc == nil {
		return nil, k.Err
	}
	pt, err := k.enc.decrypt(data[headerSize:], aadFor(p.tmpl, id))
	if err != nil {
		return nil, ErrInvalid
	}
	p.opened.put(id, data, pt)
	return pt, nil
}

// aadTemplate is the additional authenticated data for purposes with a zero
// key id: { magic header | key id | purpose count (uint32 BE) | purposes },
// each purpose its UTF-8 length as a 7-bit encoded integer (BinaryWriter's
// string prefix) and its UTF-8 bytes.
func aadTemplate(purposes []string) []byte {
	b := make([]byte, headerSize, headerSize+4+16*len(purposes))
	binary.BigEndian.PutUint32(b, magicHeader)
	b = binary.BigEndian.AppendUint32(b, uint32(len(purposes)))
	for _, s := range purposes {
		b = binary.AppendUvarint(b, uint64(len(s)))
		b = append(b, s...)
	}
	return b
}

// aadFor is the template with the key id filled in.
func aadFor(tmpl []byte, id KeyID) []byte {
	b := append([]byte(nil), tmpl...)
	copy(b[4:headerSize], id[:])
	return b
}
