package h1wire

import (
	"bytes"
	"net/textproto"
	"strings"
	"testing"

	"golang.org/x/net/http/httpguts"
)

// byteRule is FieldReader's rule for a value, byte by byte: the known
// answer for valueEnd.
func byteRule(v []byte, ascii bool) bool {
	for _, c := range v {
		if c < 0x20 && c != '\t' || c == 0x7f || ascii && c >= 0x7f {
			return false
		}
	}
	return true
}

// checkValueEnd holds valueEnd on v and a CRLF to byteRule: the line
// ends at the first byte the rule refuses when that is a CR before an
// LF, and is refused when it is any other.
func checkValueEnd(t *testing.T, v []byte, ascii bool) {
	t.Helper()
	b := append(v[:len(v):len(v)], "\r\n"...)
	want := -1
	for j := 0; j < len(b); j++ {
		if !byteRule(b[j:j+1], ascii) {
			if b[j] == '\r' && j+1 < len(b) && b[j+1] == '\n' {
				want = j
			}
			break
		}
	}
	if got := valueEnd(b, 0, ascii); got != want {
		t.Fatalf("valueEnd(%q, %v) = %d, want %d", b, ascii, got, want)
	}
}

func TestValueEndMatchesByteRule(t *testing.T) {
	for _, ascii := range []bool{false, true} {
		for n := 0; n <= 19; n++ {
			for pos := 0; pos < n; pos++ {
				for c := 0; c < 256; c++ {
					b := bytes.Repeat([]byte{'a'}, n)
					b[pos] = byte(c)
					checkValueEnd(t, b, ascii)
					if pos+1 < n {
						b[pos+1] = '\n' // a CR here ends the line
						checkValueEnd(t, b, ascii)
					}
				}
			}
		}
	}
}

func FuzzValueEnd(f *testing.F) {
	for _, s := range []string{"", "abc", "Tue, 01 Dec 2026 12:00:00 GMT", "a\tb\x7fcdefghij", "\x80\x1f\x20\x7e\x7f\xff0123", "abcdefgh\r\nX: y", "a\rb"} {
		f.Add([]byte(s), false)
		f.Add([]byte(s), true)
	}
	f.Fuzz(func(t *testing.T, v []byte, ascii bool) {
		checkValueEnd(t, v, ascii)
	})
}

// FieldReader's key is textproto.CanonicalMIMEHeaderKey for a token name
// of at most 64 bytes (the known answer), and any other name is refused.
func FuzzFieldKey(f *testing.F) {
	for _, s := range []string{"Content-Type", "content-type", "CONTENT-LENGTH", "X-Tether-Trace-Id", "x", "-a-", "Set-cookie", "a b", "Ünicode", "a\r\nb", strings.Repeat("a", 65)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		if name == "" || strings.IndexByte(name, ':') >= 0 {
			return
		}
		all := []byte(name + ": v\r\n\r\n")
		fr := NewFieldReader(all, string(all), 0)
		got, _, _, ok := fr.Next(false)
		token := len(name) <= 64
		for _, c := range []byte(name) {
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || bytes.IndexByte([]byte("!#$%&'*+-.^_`|~"), c) >= 0) {
				token = false
			}
		}
		if ok != token {
			t.Fatalf("Next's key %q: ok %v, want %v", name, ok, token)
		}
		if ok && got != textproto.CanonicalMIMEHeaderKey(name) {
			t.Fatalf("Next's key %q = %q, textproto says %q", name, got, textproto.CanonicalMIMEHeaderKey(name))
		}
	})
}

// The names FieldReader hands out for the common names lie in
// knownNames, whose every slice the lean rule takes without a look
// (but an empty one, which it refuses as it always did).
func TestKnownNamesTakeNoCheck(t *testing.T) {
	for i := 0; i < len(parserNames); {
		j := i + 1
		for j < len(parserNames) && !(knownNames[j] >= 'A' && knownNames[j] <= 'Z' && knownNames[j-1] != '-') {
			j++
		}
		name := knownNames[i:j]
		k := knownName([]byte(name + ": v"))
		if k != name || !knownSpan.holds(k) {
			t.Errorf("knownName(%q) = %q, in knownNames: %v", name, k, knownSpan.holds(k))
		}
		i = j
	}
	for i := 0; i <= len(knownNames); i++ {
		for j := i; j <= len(knownNames); j++ {
			k := knownNames[i:j]
			if got, want := validField(k, nil), httpguts.ValidHeaderFieldName(k) && k != "Expect" && k != "Upgrade"; got != want {
				t.Fatalf("validField(%q) = %v, want %v", k, got, want)
			}
		}
	}
	if validField(knownNames[3:3], nil) {
		t.Fatal("an empty name taken")
	}
}

// TestTableNameIsTheTablesSlice: the names the proxy sets on every request
// come from the table as its own slices (so KnownName vouches for them),
// and a name not in it is refused at once.
func TestTableNameIsTheTablesSlice(t *testing.T) {
	for _, n := range []string{"X-Forwarded-For", "X-Forwarded-Proto", "X-Forwarded-Host", "X-Forwarded-Port",
		"X-Original-Host", "X-Original-Url", "X-Tether-Trace-Id", "Traceparent"} {
		k := TableName(n)
		if k != n || !KnownName(k) {
			t.Errorf("TableName(%q) = %q, KnownName %v", n, k, KnownName(k))
		}
		if KnownName(strings.Clone(n)) {
			t.Errorf("a copy of %q taken as the table's", n)
		}
	}
	for _, n := range []string{"", "X-Not-There", "accept"} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("TableName(%q) did not panic", n)
				}
			}()
			TableName(n)
		}()
	}
}
