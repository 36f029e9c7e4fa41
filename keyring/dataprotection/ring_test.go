package dataprotection

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tether-proxy/tether/test/testutil"
)

var t0 = time.Date(2026, 1, 10, 12, 0, 0, 0, time.UTC)

const (
	idA = "11111111-2222-3333-4444-555555555555"
	idB = "aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee"
)

func mkey(b byte) []byte { return bytes.Repeat([]byte{b}, 64) }

func TestKeyIDRoundTripsInDotNetByteOrder(t *testing.T) {
	id, err := ParseKeyID("{9C15D488-4417-49AB-AE39-ED2F36A9EBE3}")
	if err != nil {
		t.Fatal(err)
	}
	want := []byte{0x88, 0xd4, 0x15, 0x9c, 0x17, 0x44, 0xab, 0x49, 0xae, 0x39, 0xed, 0x2f, 0x36, 0xa9, 0xeb, 0xe3}
	if !bytes.Equal(id[:], want) {
		t.Fatalf("wire bytes %x", id[:])
	}
	if id.String() != "9c15d488-4417-49ab-ae39-ed2f36a9ebe3" {
		t.Fatalf("string %s", id)
	}
	for _, bad := range []string{"", "9c15d488", "9c15d488-4417-49ab-ae39-ed2f36a9ebeZ", "9c15d488+4417-49ab-ae39-ed2f36a9ebe3"} {
		if _, err := ParseKeyID(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestEveryDescriptorAlgorithmRoundTrips(t *testing.T) {
	cases := []struct{ desc, alg, validation string }{
		{"default AES-256-CBC + HMACSHA256", "AES_256_CBC", "HMACSHA256"},
		{"AES-128-CBC + HMACSHA512", "AES_128_CBC", "HMACSHA512"},
		{"AES-192-CBC + HMACSHA256", "AES_192_CBC", "HMACSHA256"},
		{"AES-256-GCM (no validation element)", "AES_256_GCM", ""},
		{"AES-128-GCM", "AES_128_GCM", ""},
	}
	for _, c := range cases {
		t.Run(c.desc, func(t *testing.T) {
			dir := t.TempDir()
			testutil.WriteFile(t, filepath.Join(dir, "key-a.xml"), keyXML(idA, t0, t0, t0.Add(90*24*time.Hour), c.alg, c.validation, mkey(7)))
			r, err := Open(dir, Options{Now: func() time.Time { return t0.Add(time.Hour) }})
			if err != nil {
				t.Fatal(err)
			}
			p := r.Protector("app", "purpose")
			data, err := p.Protect([]byte("dest-1"))
			if err != nil {
				t.Fatal(err)
			}
			if pt, err := p.Unprotect(data); err != nil || string(pt) != "dest-1" {
				t.Fatalf("%q, %v", pt, err)
			}
			data[len(data)-1] ^= 1
			if _, err := p.Unprotect(data); err != ErrInvalid {
				t.Fatalf("tampered: %v", err)
			}
		})
	}
}

func TestUnsupportedAlgorithmMakesKeyUnusableNotRingUnreadable(t *testing.T) {
	dir := t.TempDir()
	testutil.WriteFile(t, filepath.Join(dir, "key-a.xml"), keyXML(idA, t0, t0, t0.Add(time.Hour), "DES_CBC", "HMACSHA256", mkey(1)))
	testutil.WriteFile(t, filepath.Join(dir, "key-b.xml"), keyXML(idB, t0, t0, t0.Add(time.Hour), "AES_256_CBC", "HMACSHA256", mkey(2)))
	r, err := Open(dir, Options{Now: func() time.Time { return t0 }})
	if err != nil {
		t.Fatal(err)
	}
	if w := r.Warnings(); len(w) != 1 || !strings.Contains(w[0], `"DES_CBC"`) {
		t.Fatalf("warnings %q", w)
	}
}

func TestDefaultKeyIsLatestActivatedUsableUnrevokedUnexpired(t *testing.T) {
	day := 24 * time.Hour
	cases := []struct {
		desc string
		// keys A and B: activation and expiration offsets from t0
		aAct, aExp, bAct, bExp time.Duration
		revokeB                bool
		want                   string
	}{
		{"newer activated key wins", -10 * day, 80 * day, -1 * day, 89 * day, false, idB},
		{"a key activating later is not yet default", -10 * day, 80 * day, 1 * day, 90 * day, false, idA},
		{"an expired key is never default", -100 * day, -10 * day, -1 * day, 89 * day, false, idB},
		{"a revoked key is never default", -10 * day, 80 * day, -1 * day, 89 * day, true, idA},
		{"all expired: no default", -100 * day, -10 * day, -90 * day, -1 * day, false, ""},
	}
	for _, c := range cases {
		t.Run(c.desc, func(t *testing.T) {
			dir := t.TempDir()
			testutil.WriteFile(t, filepath.Join(dir, "key-a.xml"), keyXML(idA, t0.Add(c.aAct), t0.Add(c.aAct), t0.Add(c.aExp), "AES_256_CBC", "HMACSHA256", mkey(1)))
			testutil.WriteFile(t, filepath.Join(dir, "key-b.xml"), keyXML(idB, t0.Add(c.bAct), t0.Add(c.bAct), t0.Add(c.bExp), "AES_256_CBC", "HMACSHA256", mkey(2)))
			if c.revokeB {
				testutil.WriteFile(t, filepath.Join(dir, "revocation-b.xml"), `<revocation version="1"><revocationDate>2026-01-01T00:00:00Z</revocationDate><key id="`+idB+`" /><reason>test</reason></revocation>`)
			}
			r, err := Open(dir, Options{Now: func() time.Time { return t0 }})
			if err != nil {
				t.Fatal(err)
			}
			got := ""
			if k := r.DefaultKey(); k != nil {
				got = k.ID.String()
			}
			if got != c.want {
				t.Fatalf("default key %q, want %q", got, c.want)
			}
			_, err = r.Protector("p").Protect([]byte("x"))
			if (c.want == "") != errors.Is(err, ErrNoDefaultKey) {
				t.Fatalf("Protect err %v", err)
			}
		})
	}
}

func TestRevokedKeysNoLongerUnprotectExpiredOnesStillDo(t *testing.T) {
	dir := t.TempDir()
	c := &clock{t: t0}
	testutil.WriteFile(t, filepath.Join(dir, "key-a.xml"), keyXML(idA, t0.Add(-time.Hour), t0.Add(-time.Hour), t0.Add(time.Hour), "AES_256_CBC", "HMACSHA256", mkey(1)))
	r, err := Open(dir, Options{Now: c.Now})
	if err != nil {
		t.Fatal(err)
	}
	p := r.Protector("p")
	data, err := p.Protect([]byte("x"))
	if err != nil {
		t.Fatal(err)
	}
	c.Add(2 * time.Hour) // expired: still opens, as in ASP.NET
	if _, err := p.Unprotect(data); err != nil {
		t.Fatalf("expired key: %v", err)
	}
	// A mass revocation of keys created before now.
	testutil.WriteFile(t, filepath.Join(dir, "revocation-all.xml"), `<revocation version="1"><revocationDate>`+c.Now().Format(time.RFC3339)+`</revocationDate><!-- All keys created before the revocation date are revoked. --><key id="*" /><reason>rotated</reason></revocation>`)
	if err := r.Reload(); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Unprotect(data); err != ErrKeyRevoked {
		t.Fatalf("revoked: %v", err)
	}
}

func TestUnreadableRevocationFailsTheRead(t *testing.T) {
	dir := t.TempDir()
	testutil.WriteFile(t, filepath.Join(dir, "key-a.xml"), keyXML(idA, t0, t0, t0.Add(time.Hour), "AES_256_CBC", "HMACSHA256", mkey(1)))
	testutil.WriteFile(t, filepath.Join(dir, "revocation-x.xml"), `<revocation version="1"><key id="not-a-guid" /></revocation>`)
	if _, err := Open(dir, Options{}); err == nil || !strings.Contains(err.Error(), "revocation") {
		t.Fatalf("err %v", err)
	}
}

func TestOpenRefusesAnEmptyOrMissingDirectoryAndDuplicateKeys(t *testing.T) {
	if _, err := Open(t.TempDir(), Options{}); err == nil || !strings.Contains(err.Error(), "no Data Protection key") {
		t.Fatalf("empty dir: %v", err)
	}
	if _, err := Open("testdata/does-not-exist", Options{}); err == nil {
		t.Fatal("missing dir accepted")
	}
	dir := t.TempDir()
	k := keyXML(idA, t0, t0, t0.Add(time.Hour), "AES_256_CBC", "HMACSHA256", mkey(1))
	testutil.WriteFile(t, filepath.Join(dir, "key-a.xml"), k)
	testutil.WriteFile(t, filepath.Join(dir, "key-a-copy.xml"), k)
	if _, err := Open(dir, Options{}); err == nil || !strings.Contains(err.Error(), "both") {
		t.Fatalf("duplicate: %v", err)
	}
}

func TestUnknownKeyRereadsDirectoryAtMostOncePerMissRefresh(t *testing.T) {
	dirA, dirB := t.TempDir(), t.TempDir()
	testutil.WriteFile(t, filepath.Join(dirA, "key-a.xml"), keyXML(idA, t0, t0, t0.Add(time.Hour), "AES_256_CBC", "HMACSHA256", mkey(1)))
	testutil.WriteFile(t, filepath.Join(dirB, "key-b.xml"), keyXML(idB, t0, t0, t0.Add(time.Hour), "AES_256_CBC", "HMACSHA256", mkey(2)))
	c := &clock{t: t0.Add(time.Minute)}
	ra, err := Open(dirA, Options{Now: c.Now, MissRefresh: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	rb, err := Open(dirB, Options{Now: c.Now})
	if err != nil {
		t.Fatal(err)
	}
	data, err := rb.Protector("p").Protect([]byte("x"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ra.Protector("p").Unprotect(data); err != ErrKeyNotFound {
		t.Fatalf("unknown key: %v", err)
	}
	// The YARP fleet adds key B to the shared directory.
	testutil.WriteFile(t, filepath.Join(dirA, "key-b.xml"), keyXML(idB, t0, t0, t0.Add(time.Hour), "AES_256_CBC", "HMACSHA256", mkey(2)))
	if _, err := ra.Protector("p").Unprotect(data); err != ErrKeyNotFound {
		t.Fatalf("re-read before MissRefresh: %v", err)
	}
	c.Add(11 * time.Second)
	if pt, err := ra.Protector("p").Unprotect(data); err != nil || string(pt) != "x" {
		t.Fatalf("after MissRefresh: %q, %v", pt, err)
	}
}

func TestKeyEncryptedToAnotherCertificateNamesBothThumbprints(t *testing.T) {
	other := otherCert(t)
	_, err := Open("testdata/aspnet-cert-ring", Options{Certificates: []*Certificate{other}})
	if err == nil || !strings.Contains(err.Error(), other.Thumbprint()) || !strings.Contains(err.Error(), "no configured certificate matches") {
		t.Fatalf("err %v", err)
	}
}

func TestStaleRingPicksUpRevocationInTheBackground(t *testing.T) {
	dir := t.TempDir()
	c := &clock{t: t0}
	testutil.WriteFile(t, filepath.Join(dir, "key-a.xml"), keyXML(idA, t0.Add(-time.Hour), t0.Add(-time.Hour), t0.Add(24*time.Hour), "AES_256_CBC", "HMACSHA256", mkey(1)))
	r, err := Open(dir, Options{Now: c.Now, Refresh: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	p := r.Protector("p")
	data, err := p.Protect([]byte("x"))
	if err != nil {
		t.Fatal(err)
	}
	testutil.WriteFile(t, filepath.Join(dir, "revocation-a.xml"), `<revocation version="1"><revocationDate>2026-01-10T12:00:00Z</revocationDate><key id="`+idA+`" /></revocation>`)
	c.Add(2 * time.Minute)
	testutil.Eventually(t, 5*time.Second, "the revocation to be read", func() bool {
		_, err := p.Unprotect(data)
		return err == ErrKeyRevoked
	})
	if r.DefaultKey() != nil {
		t.Fatal("revoked key still default")
	}
}

func TestManagedAndCNGDescriptorsRoundTrip(t *testing.T) {
	mk := base64.StdEncoding.EncodeToString(mkey(9))
	cases := []struct{ desc, deserializer, body string }{
		{"managed Aes + HMACSHA384", "Microsoft.AspNetCore.DataProtection.AuthenticatedEncryption.ConfigurationModel.ManagedAuthenticatedEncryptorDescriptorDeserializer, Microsoft.AspNetCore.DataProtection",
			`<encryption algorithm="Aes" keyLength="256" /><validation algorithm="HMACSHA384" />`},
		{"managed full type names + HMACSHA1", "ManagedAuthenticatedEncryptorDescriptorDeserializer",
			`<encryption algorithm="System.Security.Cryptography.Aes, System.Security.Cryptography" keyLength="128" /><validation algorithm="System.Security.Cryptography.HMACSHA1, System.Security.Cryptography" />`},
		{"CNG CBC AES + SHA512", "CngCbcAuthenticatedEncryptorDescriptorDeserializer",
			`<encryption algorithm="AES" keyLength="192" provider="" /><hash algorithm="SHA512" />`},
		{"CNG GCM AES", "CngGcmAuthenticatedEncryptorDescriptorDeserializer",
			`<encryption algorithm="AES" keyLength="256" />`},
	}
	for _, c := range cases {
		t.Run(c.desc, func(t *testing.T) {
			dir := t.TempDir()
			testutil.WriteFile(t, filepath.Join(dir, "k.xml"), `<key id="`+idA+`" version="1"><creationDate>2026-01-01T00:00:00Z</creationDate><activationDate>2026-01-01T00:00:00Z</activationDate><expirationDate>2027-01-01T00:00:00Z</expirationDate><descriptor deserializerType="`+c.deserializer+`"><descriptor>`+c.body+`<masterKey><value>`+mk+`</value></masterKey></descriptor></descriptor></key>`)
			r, err := Open(dir, Options{Now: func() time.Time { return t0 }})
			if err != nil {
				t.Fatal(err)
			}
			if w := r.Warnings(); len(w) > 0 {
				t.Fatal(w)
			}
			p := r.Protector("p")
			data, err := p.Protect([]byte("x"))
			if err != nil {
				t.Fatal(err)
			}
			if pt, err := p.Unprotect(data); err != nil || string(pt) != "x" {
				t.Fatalf("%q %v", pt, err)
			}
		})
	}
}

func TestKeyFileWithByteOrderMarkReads(t *testing.T) {
	dir := t.TempDir()
	testutil.WriteFile(t, filepath.Join(dir, "key-a.xml"), "\ufeff"+keyXML(idA, t0, t0, t0.Add(time.Hour), "AES_256_CBC", "HMACSHA256", mkey(1)))
	r, err := Open(dir, Options{Now: func() time.Time { return t0 }})
	if err != nil {
		t.Fatal(err)
	}
	if w := r.Warnings(); len(w) > 0 || r.DefaultKey() == nil {
		t.Fatalf("warnings %q, default %v", w, r.DefaultKey())
	}
}

func TestOpenedPayloadsAreRememberedButRecheckedAgainstTheRing(t *testing.T) {
	dir := t.TempDir()
	c := &clock{t: t0}
	testutil.WriteFile(t, filepath.Join(dir, "key-a.xml"), keyXML(idA, t0.Add(-time.Hour), t0.Add(-time.Hour), t0.Add(time.Hour), "AES_256_CBC", "HMACSHA256", mkey(1)))
	r, err := Open(dir, Options{Now: c.Now, MissRefresh: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	p := r.Protector("p")
	data, err := p.Protect([]byte("dest"))
	if err != nil {
		t.Fatal(err)
	}
	first, err := p.Unprotect(data)
	if err != nil {
		t.Fatal(err)
	}
	first[0] = 'X' // the caller's copy
	if again, err := p.Unprotect(data); err != nil || string(again) != "dest" {
		t.Fatalf("remembered payload: %q, %v", again, err)
	}
	// Another purpose chain does not share what this one opened.
	if _, err := r.Protector("q").Unprotect(data); err != ErrInvalid {
		t.Fatalf("other purpose: %v", err)
	}
	// The key file disappears: a remembered payload no longer opens.
	if err := os.Remove(filepath.Join(dir, "key-a.xml")); err != nil {
		t.Fatal(err)
	}
	testutil.WriteFile(t, filepath.Join(dir, "key-b.xml"), keyXML(idB, t0, t0, t0.Add(time.Hour), "AES_256_CBC", "HMACSHA256", mkey(2)))
	c.Add(2 * time.Second)
	if err := r.Reload(); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Unprotect(data); err != ErrKeyNotFound {
		t.Fatalf("key gone: %v", err)
	}
}

func TestConcurrentUnprotectAndReload(t *testing.T) {
	dir := t.TempDir()
	testutil.WriteFile(t, filepath.Join(dir, "key-a.xml"), keyXML(idA, t0, t0, t0.Add(time.Hour), "AES_256_GCM", "", mkey(1)))
	r, err := Open(dir, Options{Now: func() time.Time { return t0.Add(time.Minute) }})
	if err != nil {
		t.Fatal(err)
	}
	p := r.Protector("p")
	var payloads [][]byte
	for i := range 5 {
		d, err := p.Protect([]byte{byte('a' + i)})
		if err != nil {
			t.Fatal(err)
		}
		payloads = append(payloads, d)
	}
	errs := make(chan error, 8)
	for g := range 8 {
		go func() {
			for i := range 200 {
				if g == 0 && i%50 == 0 {
					_ = r.Reload()
				}
				j := (g + i) % len(payloads)
				pt, err := p.Unprotect(payloads[j])
				if err != nil || len(pt) != 1 || pt[0] != byte('a'+j) {
					errs <- fmt.Errorf("payload %d: %q %v", j, pt, err)
					return
				}
			}
			errs <- nil
		}()
	}
	for range 8 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}
