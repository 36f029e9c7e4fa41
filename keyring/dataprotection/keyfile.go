package dataprotection

import (
	"encoding/base64"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Key is one Data Protection key of the ring.
type Key struct {
	ID                          KeyID
	Created, Activated, Expires time.Time
	Revoked                     bool
	// File is the key file the key came from.
	File string
	// Err says why the key cannot be used (encrypted with a certificate
	// that was not given, DPAPI, an unknown algorithm); nil when usable.
	Err error

	enc encryptor
}

// Usable reports whether the key can protect and unprotect.
func (k *Key) Usable() bool { return k.enc != nil }

// revocation is one <revocation> element: a single key, or every key
// created before date (id "*").
type revocation struct {
	all  bool
	id   KeyID
	date time.Time
}

// parseKeyElement reads <key id=".." version="1"> with its dates and
// descriptor. Errors in the id or dates make the key unreadable (ASP.NET
// skips such a key); errors in the descriptor only make it unusable (Err),
// so that a payload naming it gets a clear error.
func parseKeyElement(e *element, certs []*Certificate) (*Key, error) {
	idText, err := e.requiredAttr("id")
	if err != nil {
		return nil, err
	}
	id, err := ParseKeyID(idText)
	if err != nil {
		return nil, err
	}
	k := &Key{ID: id}
	for _, d := range []struct {
		name string
		dst  *time.Time
	}{{"creationDate", &k.Created}, {"activationDate", &k.Activated}, {"expirationDate", &k.Expires}} {
		c, err := e.requiredChild(d.name)
		if err != nil {
			return nil, fmt.Errorf("key %s: %w", id, err)
		}
		if *d.dst, err = parseDate(c.text()); err != nil {
			return nil, fmt.Errorf("key %s: <%s>: %w", id, d.name, err)
		}
	}
	k.enc, k.Err = keyEncryptor(e, certs)
	if k.Err != nil {
		k.Err = fmt.Errorf("key %s: %w", id, k.Err)
	}
	return k, nil
}

// keyEncryptor reads <descriptor deserializerType=".."><descriptor>..
// </descriptor></descriptor>, decrypting any <encryptedSecret> first.
func keyEncryptor(e *element, certs []*Certificate) (encryptor, error) {
	outer, err := e.requiredChild("descriptor")
	if err != nil {
		return nil, err
	}
	deser, err := outer.requiredAttr("deserializerType")
	if err != nil {
		return nil, err
	}
	inner := outer.elements()
	if len(inner) != 1 {
		return nil, fmt.Errorf("<descriptor> must hold exactly one element, has %d", len(inner))
	}
	desc, err := decryptSecrets(inner[0], certs)
	if err != nil {
		return nil, err
	}
	switch name := typeName(deser); name {
	case "AuthenticatedEncryptorDescriptorDeserializer":
		return descriptorEncryptor(desc)
	case "CngCbcAuthenticatedEncryptorDescriptorDeserializer":
		return cngCBCEncryptor(desc)
	case "CngGcmAuthenticatedEncryptorDescriptorDeserializer":
		return cngGCMEncryptor(desc)
	case "ManagedAuthenticatedEncryptorDescriptorDeserializer":
		return managedEncryptor(desc)
	default:
		return nil, fmt.Errorf("unsupported descriptor deserializer %q", deser)
	}
}

// typeName is the simple name of a .NET assembly-qualified type name:
// "Ns.Type, Assembly, Version=.." is "Type".
func typeName(aqn string) string {
	t, _, _ := strings.Cut(aqn, ",")
	t = strings.TrimSpace(t)
	if i := strings.LastIndexByte(t, '.'); i >= 0 {
		t = t[i+1:]
	}
	return t
}

// descriptorEncryptor is AuthenticatedEncryptorDescriptorDeserializer, the
// default: <encryption algorithm="AES_256_CBC"/>, <validation
// algorithm="HMACSHA256"/> (not for GCM), <masterKey>.
func descriptorEncryptor(d *element) (encryptor, error) {
	alg, err := d.childAttr("encryption", "algorithm")
	if err != nil {
		return nil, err
	}
	var (
		bits int
		gcm  bool
	)
	switch alg {
	case "AES_128_CBC":
		bits = 128
	case "AES_192_CBC":
		bits = 192
	case "AES_256_CBC":
		bits = 256
	case "AES_128_GCM":
		bits, gcm = 128, true
	case "AES_192_GCM":
		bits, gcm = 192, true
	case "AES_256_GCM":
		bits, gcm = 256, true
	default:
		return nil, fmt.Errorf("unsupported encryption algorithm %q", alg)
	}
	mk, err := masterKey(d)
	if err != nil {
		return nil, err
	}
	if gcm {
		return newGCM(mk, bits)
	}
	valg, err := d.childAttr("validation", "algorithm")
	if err != nil {
		return nil, err
	}
	switch valg {
	case "HMACSHA256":
		return newCBCHMAC(mk, bits, 256)
	case "HMACSHA512":
		return newCBCHMAC(mk, bits, 512)
	default:
		return nil, fmt.Errorf("unsupported validation algorithm %q", valg)
	}
}

// cngCBCEncryptor is CngCbcAuthenticatedEncryptorDescriptorDeserializer:
// <encryption algorithm="AES" keyLength="256"/>, <hash algorithm="SHA256"/>.
func cngCBCEncryptor(d *element) (encryptor, error) {
	bits, err := aesKeyLength(d, func(a string) bool { return strings.EqualFold(a, "AES") })
	if err != nil {
		return nil, err
	}
	halg, err := d.childAttr("hash", "algorithm")
	if err != nil {
		return nil, err
	}
	mk, err := masterKey(d)
	if err != nil {
		return nil, err
	}
	if n, ok := shaBits[strings.ToUpper(halg)]; ok {
		return newCBCHMAC(mk, bits, n)
	}
	return nil, fmt.Errorf("unsupported hash algorithm %q", halg)
}

// cngGCMEncryptor is CngGcmAuthenticatedEncryptorDescriptorDeserializer.
func cngGCMEncryptor(d *element) (encryptor, error) {
	bits, err := aesKeyLength(d, func(a string) bool { return strings.EqualFold(a, "AES") })
	if err != nil {
		return nil, err
	}
	mk, err := masterKey(d)
	if err != nil {
		return nil, err
	}
	return newGCM(mk, bits)
}

// managedEncryptor is ManagedAuthenticatedEncryptorDescriptorDeserializer:
// friendly or full .NET type names for the algorithms (<encryption
// algorithm="Aes" keyLength="256"/>, <validation algorithm="HMACSHA256"/>;
// HMACSHA1, 256, 384 and 512).
func managedEncryptor(d *element) (encryptor, error) {
	bits, err := aesKeyLength(d, func(a string) bool { return strings.HasPrefix(typeName(a), "Aes") })
	if err != nil {
		return nil, err
	}
	valg, err := d.childAttr("validation", "algorithm")
	if err != nil {
		return nil, err
	}
	mk, err := masterKey(d)
	if err != nil {
		return nil, err
	}
	if n, ok := shaBits[strings.TrimPrefix(typeName(valg), "HMAC")]; ok && strings.HasPrefix(typeName(valg), "HMAC") {
		return newCBCHMAC(mk, bits, n)
	}
	return nil, fmt.Errorf("unsupported validation algorithm %q", valg)
}

// shaBits are the digest sizes of the hash names CNG descriptors use (and,
// after "HMAC", the managed descriptor's type names).
var shaBits = map[string]int{"SHA1": 160, "SHA256": 256, "SHA384": 384, "SHA512": 512}

func aesKeyLength(d *element, isAES func(string) bool) (int, error) {
	enc, err := d.requiredChild("encryption")
	if err != nil {
		return 0, err
	}
	alg, err := enc.requiredAttr("algorithm")
	if err != nil {
		return 0, err
	}
	if !isAES(alg) {
		return 0, fmt.Errorf("unsupported encryption algorithm %q", alg)
	}
	kl, err := enc.requiredAttr("keyLength")
	if err != nil {
		return 0, err
	}
	bits, err := strconv.Atoi(strings.TrimSpace(kl))
	if err != nil || bits != 128 && bits != 192 && bits != 256 {
		return 0, fmt.Errorf("unsupported AES keyLength %q", kl)
	}
	return bits, nil
}

// masterKey is the base64 text of the single <masterKey> (whitespace
// ignored, as Convert.FromBase64String does).
func masterKey(d *element) ([]byte, error) {
	mks := d.children("masterKey")
	if len(mks) != 1 {
		return nil, fmt.Errorf("descriptor must hold exactly one <masterKey>, has %d", len(mks))
	}
	s := strings.Map(func(r rune) rune {
		if r == ' ' || r == '\t' || r == '\r' || r == '\n' {
			return -1
		}
		return r
	}, mks[0].text())
	mk, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		return nil, fmt.Errorf("<masterKey> is not base64: %w", err)
	}
	if len(mk) == 0 {
		return nil, fmt.Errorf("<masterKey> is empty")
	}
	return mk, nil
}

// parseRevocation reads <revocation version="1"> with <revocationDate> and
// <key id="guid|*"/>. ASP.NET treats an unreadable revocation as fatal,
// and so does the ring: a revocation must never be missed.
func parseRevocation(e *element) (revocation, error) {
	var r revocation
	id, err := e.childAttr("key", "id")
	if err != nil {
		return r, err
	}
	if strings.TrimSpace(id) == "*" {
		d, err := e.requiredChild("revocationDate")
		if err != nil {
			return r, err
		}
		if r.date, err = parseDate(d.text()); err != nil {
			return r, fmt.Errorf("<revocationDate>: %w", err)
		}
		r.all = true
		return r, nil
	}
	r.id, err = ParseKeyID(id)
	return r, err
}

// parseDate reads an xsd:dateTime as XmlConvert.ToDateTimeOffset: with an
// offset or Z, or without one (taken as UTC here; ASP.NET always writes
// one).
func parseDate(s string) (time.Time, error) {
	s = strings.TrimSpace(s)
	for _, layout := range []string{time.RFC3339Nano, "2006-01-02T15:04:05.999999999"} {
		if t, err := time.Parse(layout, s); err == nil {
			return t, nil
		}
	}
	return time.Time{}, fmt.Errorf("invalid date %q", s)
}
