package dataprotection

import (
	"os"
	"testing"
	"time"
)

// Key files come from a directory the YARP fleet writes to: parse them as
// untrusted. Nothing may panic, and nothing unbounded may happen.
func FuzzParseKeyFile(f *testing.F) {
	if b, err := os.ReadFile("testdata/aspnet-cert-ring/key-9c15d488-4417-49ab-ae39-ed2f36a9ebe3.xml"); err == nil {
		f.Add(b)
	}
	f.Add([]byte(keyXML(idA, t0, t0, t0.Add(time.Hour), "AES_256_CBC", "HMACSHA256", mkey(1))))
	f.Add([]byte(keyXML(idB, t0, t0, t0.Add(time.Hour), "AES_256_GCM", "", mkey(2))))
	f.Add([]byte(`<revocation version="1"><revocationDate>2026-01-01T00:00:00Z</revocationDate><key id="*" /></revocation>`))
	f.Add([]byte(`<!DOCTYPE x [<!ENTITY a "aaaa">]><key>&a;</key>`))
	f.Add([]byte(`<key id="` + idA + `"><descriptor deserializerType="x.ManagedAuthenticatedEncryptorDescriptorDeserializer"><descriptor><encryption algorithm="System.Security.Cryptography.Aes" keyLength="256"/><validation algorithm="System.Security.Cryptography.HMACSHA256"/><masterKey><value>AAAA</value></masterKey></descriptor></descriptor></key>`))
	f.Fuzz(func(t *testing.T, data []byte) {
		root, err := parseXML(data)
		if err != nil {
			return
		}
		switch root.local {
		case "key":
			k, err := parseKeyElement(root, nil)
			if err == nil && k.enc != nil {
				if _, err := k.enc.decrypt(data, data); err == nil {
					t.Fatal("random data decrypted")
				}
			}
		case "revocation":
			_, _ = parseRevocation(root)
		}
	})
}

// Payloads come from clients (YARP's affinity cookies and headers).
func FuzzUnprotect(f *testing.F) {
	dir := f.TempDir()
	for _, k := range []struct{ file, content string }{
		{"key-a.xml", keyXML(idA, t0, t0, t0.Add(time.Hour), "AES_256_CBC", "HMACSHA256", mkey(1))},
		{"key-b.xml", keyXML(idB, t0, t0.Add(time.Minute), t0.Add(time.Hour), "AES_256_GCM", "", mkey(2))},
	} {
		if err := os.WriteFile(dir+"/"+k.file, []byte(k.content), 0o600); err != nil {
			f.Fatal(err)
		}
	}
	now := t0.Add(30 * time.Second)
	r, err := Open(dir, Options{Now: func() time.Time { return now }, MissRefresh: time.Hour})
	if err != nil {
		f.Fatal(err)
	}
	p := r.Protector("app", "Yarp.ReverseProxy.SessionAffinity.CookieSessionAffinityPolicy")
	for _, s := range []string{"", "dest-1", "a longer destination id with some bytes"} {
		v, err := p.Protect([]byte(s))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(v)
	}
	now = t0.Add(2 * time.Minute) // key B (GCM) is the default from here on
	v, err := p.Protect([]byte("gcm"))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(v)
	f.Add([]byte{0x09, 0xF0, 0xC9, 0xF0})
	f.Fuzz(func(t *testing.T, data []byte) {
		pt, err := p.Unprotect(data)
		if err == nil && len(pt) > len(data) {
			t.Fatalf("plaintext longer than the payload")
		}
	})
}
