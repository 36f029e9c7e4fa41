package h1wire

import (
	"bytes"
	"net/textproto"
	"testing"
)

// byteRule is FieldReader's rule for a value, byte by byte: the known
// answer for validValue.
func byteRule(v []byte, ascii bool) bool {
	for _, c := range v {
		if c < 0x20 && c != '\t' || c == 0x7f || ascii && c >= 0x7f {
			return false
		}
	}
	return true
}

func TestValidValueMatchesByteRule(t *testing.T) {
	for _, ascii := range []bool{false, true} {
		for n := 0; n <= 19; n++ {
			for pos := 0; pos < n; pos++ {
				for c := 0; c < 256; c++ {
					b := bytes.Repeat([]byte{'a'}, n)
					b[pos] = byte(c)
					if got, want := validValue(b, ascii), byteRule(b, ascii); got != want {
						t.Fatalf("validValue(%q, %v) = %v, want %v", b, ascii, got, want)
					}
				}
			}
		}
	}
}

func FuzzValidValue(f *testing.F) {
	for _, s := range []string{"", "abc", "Tue, 01 Dec 2026 12:00:00 GMT", "a\tb\x7fcdefghij", "\x80\x1f\x20\x7e\x7f\xff0123"} {
		f.Add([]byte(s), false)
		f.Add([]byte(s), true)
	}
	f.Fuzz(func(t *testing.T, v []byte, ascii bool) {
		if got, want := validValue(v, ascii), byteRule(v, ascii); got != want {
			t.Fatalf("validValue(%q, %v) = %v, want %v", v, ascii, got, want)
		}
	})
}

// canonicalKey is textproto.CanonicalMIMEHeaderKey for token names (the
// known answer), and refuses any other.
func FuzzCanonicalKey(f *testing.F) {
	for _, s := range []string{"Content-Type", "content-type", "CONTENT-LENGTH", "X-Tether-Trace-Id", "x", "-a-", "Set-cookie", "a b", "Ünicode", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		if name == "" || len(name) > 64 {
			return
		}
		got, ok := canonicalKey(nil, []byte(name), name)
		token := true
		for _, c := range []byte(name) {
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || bytes.IndexByte([]byte("!#$%&'*+-.^_`|~"), c) >= 0) {
				token = false
			}
		}
		if ok != token {
			t.Fatalf("canonicalKey(%q): ok %v, want %v", name, ok, token)
		}
		if ok && got != textproto.CanonicalMIMEHeaderKey(name) {
			t.Fatalf("canonicalKey(%q) = %q, textproto says %q", name, got, textproto.CanonicalMIMEHeaderKey(name))
		}
	})
}
