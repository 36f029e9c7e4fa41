package keyring

import (
	"bytes"
	"encoding/base64"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"
)

var (
	purposeCookie = Purpose("Cookie", "c1", ".Tether.Affinity")
	destID        = []byte("destination-0001-eu1") // ~20 bytes, as in a cookie
)

// keyIDOf reads the key id out of a sealed value.
func keyIDOf(t *testing.T, v string) string {
	t.Helper()
	raw, err := base64.RawURLEncoding.DecodeString(v)
	if err != nil || len(raw) < 2 || len(raw) < 2+int(raw[1]) {
		t.Fatalf("value %q does not decode: %v", v, err)
	}
	return string(raw[2 : 2+int(raw[1])])
}

func mustSeal(t *testing.T, r *Ring, at time.Time, purpose, pt []byte) string {
	t.Helper()
	v, err := r.SealAt(at, purpose, pt)
	if err != nil {
		t.Fatalf("SealAt(%s): %v", at, err)
	}
	return v
}

// reencode applies f to the decoded value and encodes it again.
func reencode(t *testing.T, v string, f func([]byte) []byte) string {
	t.Helper()
	raw, err := base64.RawURLEncoding.DecodeString(v)
	if err != nil {
		t.Fatal(err)
	}
	return base64.RawURLEncoding.EncodeToString(f(raw))
}

func TestOpenRules(t *testing.T) {
	type setup struct {
		r       *Ring
		value   string
		purpose []byte
		at      time.Time
	}
	a := mkKey("a", 0, 10*day)
	b := mkKey("b", 5*day, 100*day)
	cases := []struct {
		desc    string
		setup   func(t *testing.T) setup
		wantErr error
	}{
		{"value sealed with the old key opens after rotation", func(t *testing.T) setup {
			r := newTestRing(t, a)
			v := mustSeal(t, r, t0.Add(day), purposeCookie, destID)
			if err := r.Install(b); err != nil {
				t.Fatal(err)
			}
			if id := keyIDOf(t, mustSeal(t, r, t0.Add(6*day), purposeCookie, destID)); id != "b" {
				t.Fatalf("after rotation the value is sealed with %q, want b", id)
			}
			return setup{r, v, purposeCookie, t0.Add(6 * day)}
		}, nil},
		{"installed key decrypts before it activates", func(t *testing.T) setup {
			r := newTestRing(t, a, b)
			if id := keyIDOf(t, mustSeal(t, r, t0.Add(day), purposeCookie, destID)); id != "a" {
				t.Fatalf("installed key b encrypted before activation (value id %q)", id)
			}
			v := mustSeal(t, r, t0.Add(5*day), purposeCookie, destID) // another node, clock ahead
			return setup{r, v, purposeCookie, t0.Add(day)}
		}, nil},
		{"revoked key fails at once", func(t *testing.T) setup {
			r := newTestRing(t, a)
			v := mustSeal(t, r, t0.Add(day), purposeCookie, destID)
			if err := r.Revoke("a"); err != nil {
				t.Fatal(err)
			}
			return setup{r, v, purposeCookie, t0.Add(day)}
		}, ErrRevoked},
		{"expired key opens within retention", func(t *testing.T) setup {
			r := newTestRing(t, a)
			v := mustSeal(t, r, t0.Add(day), purposeCookie, destID)
			return setup{r, v, purposeCookie, t0.Add(40*day - time.Nanosecond)}
		}, nil},
		{"expired key fails after retention", func(t *testing.T) setup {
			r := newTestRing(t, a)
			v := mustSeal(t, r, t0.Add(day), purposeCookie, destID)
			return setup{r, v, purposeCookie, t0.Add(40 * day)}
		}, ErrExpired},
		{"removed key is unknown", func(t *testing.T) setup {
			r := newTestRing(t, a, b)
			v := mustSeal(t, r, t0.Add(day), purposeCookie, destID)
			if err := r.Remove("a"); err != nil {
				t.Fatal(err)
			}
			return setup{r, v, purposeCookie, t0.Add(day)}
		}, ErrUnknownKey},
		{"value from another ring's key id is unknown", func(t *testing.T) setup {
			v := mustSeal(t, newTestRing(t, mkKey("other", 0, day)), t0, purposeCookie, destID)
			return setup{newTestRing(t, a), v, purposeCookie, t0}
		}, ErrUnknownKey},
		{"same key id with other material fails authentication", func(t *testing.T) setup {
			forged := mkKey("a", 0, 10*day)
			forged.Material = bytes.Repeat([]byte{7}, KeySize)
			v := mustSeal(t, newTestRing(t, forged), t0, purposeCookie, destID)
			return setup{newTestRing(t, a), v, purposeCookie, t0}
		}, ErrAuth},
		{"value for another cluster is refused", func(t *testing.T) setup {
			r := newTestRing(t, a)
			v := mustSeal(t, r, t0, Purpose("Cookie", "c2", ".Tether.Affinity"), destID)
			return setup{r, v, purposeCookie, t0}
		}, ErrAuth},
		{"value for another policy is refused", func(t *testing.T) setup {
			r := newTestRing(t, a)
			v := mustSeal(t, r, t0, Purpose("CustomHeader", "c1", ".Tether.Affinity"), destID)
			return setup{r, v, purposeCookie, t0}
		}, ErrAuth},
		{"value for another key name is refused", func(t *testing.T) setup {
			r := newTestRing(t, a)
			v := mustSeal(t, r, t0, Purpose("Cookie", "c1", "Other"), destID)
			return setup{r, v, purposeCookie, t0}
		}, ErrAuth},
		{"empty value is malformed", func(t *testing.T) setup {
			return setup{newTestRing(t, a), "", purposeCookie, t0}
		}, ErrMalformed},
		{"oversized value is rejected before decoding", func(t *testing.T) setup {
			return setup{newTestRing(t, a), strings.Repeat("A", MaxValueLen+1), purposeCookie, t0}
		}, ErrTooLarge},
		{"non-base64url characters are malformed", func(t *testing.T) setup {
			return setup{newTestRing(t, a), strings.Repeat("+/", 30), purposeCookie, t0}
		}, ErrMalformed},
		{"padding is malformed", func(t *testing.T) setup {
			r := newTestRing(t, a)
			return setup{r, mustSeal(t, r, t0, purposeCookie, []byte("x")) + "=", purposeCookie, t0}
		}, ErrMalformed},
		{"non-canonical trailing bits are malformed", func(t *testing.T) setup {
			r := newTestRing(t, a)
			v := mustSeal(t, r, t0, purposeCookie, destID[:1]) // 32 raw bytes: the last char has 2 unused bits
			const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
			last := alphabet[strings.IndexByte(alphabet, v[len(v)-1])^1]
			return setup{r, v[:len(v)-1] + string(last), purposeCookie, t0}
		}, ErrMalformed},
		{"embedded newline is malformed", func(t *testing.T) setup {
			r := newTestRing(t, a)
			v := mustSeal(t, r, t0, purposeCookie, destID)
			return setup{r, v[:10] + "\n" + v[10:], purposeCookie, t0}
		}, ErrMalformed},
		{"unknown version is malformed", func(t *testing.T) setup {
			r := newTestRing(t, a)
			v := reencode(t, mustSeal(t, r, t0, purposeCookie, destID), func(b []byte) []byte { b[0] = 2; return b })
			return setup{r, v, purposeCookie, t0}
		}, ErrMalformed},
		{"zero id length is malformed", func(t *testing.T) setup {
			r := newTestRing(t, a)
			v := reencode(t, mustSeal(t, r, t0, purposeCookie, destID), func(b []byte) []byte { b[1] = 0; return b })
			return setup{r, v, purposeCookie, t0}
		}, ErrMalformed},
		{"id length beyond the value is malformed", func(t *testing.T) setup {
			r := newTestRing(t, a)
			v := reencode(t, mustSeal(t, r, t0, purposeCookie, destID), func(b []byte) []byte { b[1] = MaxIDLen; return b[:40] })
			return setup{r, v, purposeCookie, t0}
		}, ErrMalformed},
	}
	for _, c := range cases {
		s := c.setup(t)
		got, err := s.r.OpenAt(s.at, s.purpose, s.value)
		if c.wantErr == nil {
			if err != nil || !bytes.Equal(got, destID) {
				t.Errorf("%s: Open = %q, %v; want %q", c.desc, got, err, destID)
			}
			continue
		}
		if err != c.wantErr { // bare sentinels: no allocation, nothing from the input
			t.Errorf("%s: Open err = %v, want %v", c.desc, err, c.wantErr)
		}
		if got != nil {
			t.Errorf("%s: Open returned %q with an error", c.desc, got)
		}
	}
}

func TestWireFormat(t *testing.T) {
	r := newTestRing(t, mkKey("a1", 0, day))
	v := mustSeal(t, r, t0, purposeCookie, destID)
	if strings.ContainsAny(v, "=+/") {
		t.Errorf("value %q is not base64url without padding", v)
	}
	raw, err := base64.RawURLEncoding.DecodeString(v)
	if err != nil {
		t.Fatal(err)
	}
	if raw[0] != 1 || raw[1] != 2 || string(raw[2:4]) != "a1" {
		t.Errorf("header = %v, want version 1, id length 2, id a1", raw[:4])
	}
	if want := 2 + 2 + 12 + len(destID) + 16; len(raw) != want {
		t.Errorf("raw length %d, want %d", len(raw), want)
	}
	if bytes.Contains(raw, destID) {
		t.Error("plaintext visible in the value")
	}
	if v2 := mustSeal(t, r, t0, purposeCookie, destID); v2 == v {
		t.Error("two seals of the same plaintext are equal: nonce reused")
	}
}

func TestTamperedByteAnywhereFails(t *testing.T) {
	r := newTestRing(t, mkKey("a", 0, day))
	v := mustSeal(t, r, t0, purposeCookie, destID)
	raw, _ := base64.RawURLEncoding.DecodeString(v)
	for i := range raw {
		for _, bit := range []byte{0x01, 0x80} {
			tv := reencode(t, v, func(b []byte) []byte { b[i] ^= bit; return b })
			if got, err := r.OpenAt(t0, purposeCookie, tv); err == nil {
				t.Errorf("raw byte %d bit %#x flipped: opened to %q", i, bit, got)
			}
		}
	}
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
	for i := range v {
		for _, c := range []byte{alphabet[(strings.IndexByte(alphabet, v[i])+1)%64], alphabet[(strings.IndexByte(alphabet, v[i])+63)%64]} {
			tv := v[:i] + string(c) + v[i+1:]
			if got, err := r.OpenAt(t0, purposeCookie, tv); err == nil {
				t.Errorf("char %d changed to %c: opened to %q", i, c, got)
			}
		}
	}
}

func TestTruncatedFails(t *testing.T) {
	r := newTestRing(t, mkKey("a", 0, day))
	v := mustSeal(t, r, t0, purposeCookie, destID)
	for n := 0; n < len(v); n++ {
		if got, err := r.OpenAt(t0, purposeCookie, v[:n]); err == nil {
			t.Errorf("truncated to %d chars: opened to %q", n, got)
		}
	}
	if _, err := r.OpenAt(t0, purposeCookie, v+"AAAA"); err == nil {
		t.Error("extended value opened")
	}
}

func TestSealLimits(t *testing.T) {
	r := newTestRing(t, mkKey("a", 0, day))
	if _, err := newTestRing(t).SealAt(t0, purposeCookie, destID); err != ErrNoActiveKey {
		t.Errorf("empty ring: %v, want ErrNoActiveKey", err)
	}
	if _, err := r.SealAt(t0.Add(day), purposeCookie, destID); err != ErrNoActiveKey {
		t.Errorf("only an expired key: %v, want ErrNoActiveKey", err)
	}
	if _, err := r.SealAt(t0, purposeCookie, make([]byte, MaxValueLen)); err != ErrTooLarge {
		t.Errorf("huge plaintext: %v, want ErrTooLarge", err)
	}
	largest := make([]byte, MaxValueLen*3/4-(2+1+nonceSize+tagSize))
	v := mustSeal(t, r, t0, purposeCookie, largest)
	if len(v) > MaxValueLen {
		t.Fatalf("sealed %d chars", len(v))
	}
	if got, err := r.OpenAt(t0, purposeCookie, v); err != nil || len(got) != len(largest) {
		t.Errorf("largest value: %d bytes, %v", len(got), err)
	}
	if got, err := r.OpenAt(t0, purposeCookie, mustSeal(t, r, t0, purposeCookie, nil)); err != nil || len(got) != 0 {
		t.Errorf("empty plaintext: %q, %v", got, err)
	}
}

func TestSealAndOpenUseTheRingClock(t *testing.T) {
	var mu sync.Mutex
	now := t0.Add(day)
	r := NewRing(Options{Now: func() time.Time { mu.Lock(); defer mu.Unlock(); return now }})
	if err := r.Install(mkKey("a", 0, 10*day)); err != nil {
		t.Fatal(err)
	}
	v, err := r.Seal(purposeCookie, destID)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Open(purposeCookie, v); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	now = t0.Add(10*day + DefaultRetention)
	mu.Unlock()
	if _, err := r.Open(purposeCookie, v); err != ErrExpired {
		t.Errorf("Open past default retention: %v, want ErrExpired", err)
	}
	if _, err := r.Seal(purposeCookie, destID); err != ErrNoActiveKey {
		t.Errorf("Seal with expired key: %v", err)
	}
}

func TestPurposeIsUnambiguous(t *testing.T) {
	pairs := [][2][]byte{
		{Purpose("a|b", "c"), Purpose("a", "b|c")},
		{Purpose("ab", ""), Purpose("a", "b")},
		{Purpose("a"), Purpose("a", "")},
	}
	for _, p := range pairs {
		if bytes.Equal(p[0], p[1]) {
			t.Errorf("Purpose collision: %q", p[0])
		}
	}
}

func TestConcurrentSealOpenDuringChanges(t *testing.T) {
	r := newTestRing(t, mkKey("a", 0, 100*day))
	at := t0.Add(day)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 300; i++ {
				v, err := r.SealAt(at, purposeCookie, destID)
				if err == nil {
					_, err = r.OpenAt(at, purposeCookie, v)
				}
				if err != nil && err != ErrRevoked { // the key may be revoked in between
					errs <- err
					return
				}
			}
		}()
	}
	for i := 0; i < 50; i++ {
		id := string(rune('b'+i%20)) + strings.Repeat("x", i)
		k := mkKey(id, 0, 50*day)
		if err := r.Install(k); err != nil {
			t.Fatal(err)
		}
		if err := r.Revoke(id); err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func FuzzOpen(f *testing.F) {
	r := NewRing(Options{Now: func() time.Time { return t0 }})
	if err := r.Install(mkKey("a", 0, day)); err != nil {
		f.Fatal(err)
	}
	v, err := r.SealAt(t0, purposeCookie, destID)
	if err != nil {
		f.Fatal(err)
	}
	for _, s := range []string{v, "", "A", "AAAA", v[:len(v)-1], v + "A", strings.Repeat("_", 4097), "AQFh" + v[4:], "\n\n\n\n", "====", "AUB" + strings.Repeat("A", 60)} {
		f.Add(s, purposeCookie)
	}
	f.Fuzz(func(t *testing.T, value string, purpose []byte) {
		pt, err := r.OpenAt(t0, purpose, value)
		if err == nil {
			// Only destID was ever sealed, only for purposeCookie (values
			// from any process of this test open: the key is fixed).
			if !bytes.Equal(purpose, purposeCookie) || !bytes.Equal(pt, destID) {
				t.Fatalf("Open(%q, %q) = %q: a value that was never sealed opened", purpose, value, pt)
			}
			return
		}
		switch {
		case errors.Is(err, ErrTooLarge), errors.Is(err, ErrMalformed), errors.Is(err, ErrUnknownKey),
			errors.Is(err, ErrRevoked), errors.Is(err, ErrExpired), errors.Is(err, ErrAuth):
		default:
			t.Fatalf("unexpected error %v", err)
		}
	})
}

// benchRing holds one key active now, on the real clock.
func benchRing(b *testing.B) *Ring {
	k := mkKey("0123456789abcdef", 0, day)
	k.Created, k.Activates, k.Expires = time.Now().Add(-day), time.Now().Add(-day), time.Now().Add(100*day)
	r := NewRing(Options{})
	if err := r.Install(k); err != nil {
		b.Fatal(err)
	}
	return r
}

func BenchmarkSeal(b *testing.B) {
	r := benchRing(b)
	b.ReportAllocs()
	defer reportCPU(b)()
	for b.Loop() {
		if _, err := r.Seal(purposeCookie, destID); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkOpen(b *testing.B) {
	r := benchRing(b)
	v, err := r.Seal(purposeCookie, destID)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	defer reportCPU(b)()
	for b.Loop() {
		if _, err := r.Open(purposeCookie, v); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkOpenTampered is the cost of a forged cookie (failure path).
func BenchmarkOpenTampered(b *testing.B) {
	r := benchRing(b)
	v, _ := r.Seal(purposeCookie, destID)
	v = v[:len(v)-2] + "AA"
	b.ReportAllocs()
	defer reportCPU(b)()
	for b.Loop() {
		if _, err := r.Open(purposeCookie, v); err == nil {
			b.Fatal("tampered value opened")
		}
	}
}

func BenchmarkSealOpenParallel(b *testing.B) {
	r := benchRing(b)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			v, err := r.Seal(purposeCookie, destID)
			if err == nil {
				_, err = r.Open(purposeCookie, v)
			}
			if err != nil {
				b.Fatal(err)
			}
		}
	})
}
