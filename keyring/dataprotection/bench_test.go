package dataprotection

import (
	"os"
	"testing"
	"time"
)

func benchProtector(b *testing.B, alg, validation string) *Protector {
	b.Helper()
	dir := b.TempDir()
	if err := os.WriteFile(dir+"/k.xml", []byte(keyXML(idA, t0, t0, t0.Add(time.Hour), alg, validation, mkey(1))), 0o600); err != nil {
		b.Fatal(err)
	}
	r, err := Open(dir, Options{Now: func() time.Time { return t0.Add(time.Minute) }})
	if err != nil {
		b.Fatal(err)
	}
	return r.Application("/app/").Protector("Yarp.ReverseProxy.SessionAffinity.CookieSessionAffinityPolicy")
}

// BenchmarkUnprotect is the per-request cost of opening a YARP affinity
// value (a 10-byte destination id): "first" is a value not seen before (the
// full decryption), "again" one the protector has opened already.
func BenchmarkUnprotect(b *testing.B) {
	for _, c := range []struct{ name, alg, val string }{{"CBC-HMACSHA256", "AES_256_CBC", "HMACSHA256"}, {"GCM", "AES_256_GCM", ""}} {
		p := benchProtector(b, c.alg, c.val)
		data, err := p.Protect([]byte("backend-07"))
		if err != nil {
			b.Fatal(err)
		}
		b.Run(c.name+"/first", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				fresh := p.ring.Protector(p.purposes...)
				if _, err := fresh.Unprotect(data); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(c.name+"/again", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := p.Unprotect(data); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkProtect(b *testing.B) {
	p := benchProtector(b, "AES_256_CBC", "HMACSHA256")
	b.ReportAllocs()
	for b.Loop() {
		if _, err := p.Protect([]byte("backend-07")); err != nil {
			b.Fatal(err)
		}
	}
}
