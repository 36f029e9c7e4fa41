package h2server

import (
	"strings"
	"testing"

	"golang.org/x/net/http/httpguts"
)

// TestValidValue: validValue says what httpguts.ValidHeaderFieldValue
// says, for every byte at every place of a word.
func TestValidValue(t *testing.T) {
	for b := 0; b < 256; b++ {
		for n := 1; n <= 17; n++ {
			for at := 0; at < n; at++ {
				v := []byte(strings.Repeat("a", n))
				v[at] = byte(b)
				if got, want := validValue(string(v)), httpguts.ValidHeaderFieldValue(string(v)); got != want {
					t.Fatalf("%q: %v, httpguts %v", v, got, want)
				}
			}
		}
	}
	for _, v := range []string{"", "text/plain; charset=utf-8", "Tue, 01 Dec 2026 12:00:00 GMT", "a\tb", "é€", "\x80\xff\x7e\x20"} {
		if got, want := validValue(v), httpguts.ValidHeaderFieldValue(v); got != want {
			t.Errorf("%q: %v, httpguts %v", v, got, want)
		}
	}
}

func FuzzValidValue(f *testing.F) {
	f.Add("text/plain")
	f.Add("a\x7fb\x1fc\td")
	f.Fuzz(func(t *testing.T, v string) {
		if got, want := validValue(v), httpguts.ValidHeaderFieldValue(v); got != want {
			t.Fatalf("%q: %v, httpguts %v", v, got, want)
		}
	})
}
