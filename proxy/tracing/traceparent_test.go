package tracing

import (
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
)

// Vectors from the W3C Trace Context recommendation (§3.2 and its test
// suite's traceparent cases), not from this code.
func TestParse(t *testing.T) {
	cases := []struct {
		desc, in string
		want     Parent
		ok       bool
	}{
		{"the recommendation's example", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", Parent{"4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7", 1}, true},
		{"not sampled", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00", Parent{"4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7", 0}, true},
		{"unknown flags are read", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-09", Parent{"4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7", 9}, true},
		{"a later version may append fields", "cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-what-the-future-will-be-like", Parent{"4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7", 1}, true},
		{"a later version of exactly 55 characters", "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", Parent{"4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7", 1}, true},
		{"version ff is invalid", "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", Parent{}, false},
		{"version 00 with more fields is invalid", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x", Parent{}, false},
		{"a later version's extra fields need a '-'", "cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01x", Parent{}, false},
		{"upper-case hex is invalid", "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01", Parent{}, false},
		{"upper-case version is invalid", "0A-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", Parent{}, false},
		{"all-zero trace-id is invalid", "00-00000000000000000000000000000000-00f067aa0ba902b7-01", Parent{}, false},
		{"all-zero parent-id is invalid", "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01", Parent{}, false},
		{"short trace-id", "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01", Parent{}, false},
		{"wrong separator", "00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", Parent{}, false},
		{"non-hex flags", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0g", Parent{}, false},
		{"surrounding space is not trimmed", " 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", Parent{}, false},
		{"empty", "", Parent{}, false},
	}
	for _, c := range cases {
		t.Run(c.desc, func(t *testing.T) {
			got, ok := Parse(c.in)
			if ok != c.ok || got != c.want {
				t.Errorf("Parse = %+v, %v; want %+v, %v", got, ok, c.want, c.ok)
			}
		})
	}
}

func TestParseHeaderWantsExactlyOne(t *testing.T) {
	v := "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	if _, ok := ParseHeader([]string{v, v}); ok {
		t.Error("two traceparent headers must be invalid")
	}
	if _, ok := ParseHeader(nil); ok {
		t.Error("no traceparent header must be invalid")
	}
	if _, ok := ParseHeader([]string{v}); !ok {
		t.Error("one valid header must parse")
	}
}

func TestFormat(t *testing.T) {
	h := Format("4bf92f3577b34da6a3ce929d0e0e4736", "", Sampled)
	p, ok := Parse(h)
	if !ok || p.TraceID != "4bf92f3577b34da6a3ce929d0e0e4736" || p.Flags != Sampled || p.SpanID == "00f067aa0ba902b7" {
		t.Fatalf("Format = %q (%+v, %v)", h, p, ok)
	}
	if h[36:52] != p.SpanID || h[3:35] != p.TraceID {
		t.Fatal("trace and span ids are not at their documented offsets")
	}
	n := Format("", "", 0)
	if q, ok := Parse(n); !ok || q.TraceID == p.TraceID || q.Flags != 0 {
		t.Fatalf("new trace %q", n)
	}
	if got := Format("not-a-trace-id", "00f067aa0ba902b7", 0); !strings.HasSuffix(got, "-00f067aa0ba902b7-00") || got[3:35] == "not-a-trace-id" {
		t.Fatalf("Format with an invalid trace id = %q", got)
	}
	if a := testing.AllocsPerRun(100, func() { _ = Format("4bf92f3577b34da6a3ce929d0e0e4736", "", 1) }); a != 1 {
		t.Errorf("Format allocates %v times, want 1", a)
	}
}

// FuzzParse: any input either fails or yields ids that format back to the
// same traceparent (for version 00), and never panics.
func FuzzParse(f *testing.F) {
	f.Add("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	f.Add("cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x")
	f.Add("ff-00000000000000000000000000000000-0000000000000000-00")
	f.Fuzz(func(t *testing.T, s string) {
		p, ok := Parse(s)
		if !ok {
			return
		}
		if !ValidTraceID(p.TraceID) || len(p.SpanID) != 16 {
			t.Fatalf("Parse(%q) accepted bad ids %+v", s, p)
		}
		if s[:2] == "00" && Format(p.TraceID, p.SpanID, p.Flags) != s {
			t.Fatalf("Parse(%q) does not round-trip", s)
		}
	})
}

// TestPutHexMatchesStrconv: the word-at-a-time hex of an id is
// strconv's, zero-padded to 16 digits, for every nibble value in every
// position and for random values.
func TestPutHexMatchesStrconv(t *testing.T) {
	vals := []uint64{0, 1, 9, 10, 15, 16, 0x0123456789abcdef, 0xfedcba9876543210, 0xffffffffffffffff, 0x8000000000000000, 0xa0a0a0a09f9f9f9f}
	for pos := 0; pos < 64; pos += 4 {
		for d := uint64(0); d < 16; d++ {
			vals = append(vals, d<<pos, ^(d << pos))
		}
	}
	for range 10000 {
		vals = append(vals, rand.Uint64())
	}
	var b [16]byte
	for _, v := range vals {
		putHex(b[:], v)
		want := strconv.FormatUint(v, 16)
		want = strings.Repeat("0", 16-len(want)) + want
		if string(b[:]) != want {
			t.Fatalf("putHex(%#x) = %q, want %q", v, b[:], want)
		}
	}
}
