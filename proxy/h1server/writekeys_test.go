package h1server

import (
	"bufio"
	"bytes"
	"io"
	"net/http"
	"net/textproto"
	"strings"
	"testing"
)

// TestWriteKeysIsWriteSubset holds writeKeys to net/http's
// Header.WriteSubset, which writes a response's fields: sorted by name,
// invalid names dropped, CR and LF in a value turned to spaces, values
// trimmed of spaces and tabs.
func TestWriteKeysIsWriteSubset(t *testing.T) {
	for _, h := range []http.Header{
		{},
		{"Content-Length": {"1024"}, "Content-Type": {"text/plain"}, "Date": {"Tue, 01 Dec 2026 12:00:00 GMT"}, "Server": {"x"}},
		{"B": {"2"}, "A": {"1", "3"}, "C": {""}, "Aa": {" x "}, "A-B": {"\ty\t"}},
		{"Set-Cookie": {"a=b; Path=/", "c=d"}, "X-Multi": {"l1\r\nl2", "a\nb", "c\rd"}},
		{"Bad Name": {"v"}, "Bad:Name": {"v"}, "": {"v"}, "Ok": {"  "}, "Tab": {"\t"}},
		{"Z": {"z"}, "Y": {"y"}, "X": {"x"}, "W": {"w"}, "V": {"v"}, "U": {"u"}, "T": {"t"}, "S": {"s"}, "R": {"r"}, "Q": {"q"}, "P": {"p"}, "O": {"o"}, "N": {"n"}},
		{"Obs": {"caf\xc3\xa9", "\x7f", "a\x00b"}},
	} {
		if got, want, ok := writeKeysAndSubset(h); !ok {
			t.Fatalf("WriteSubset(%q) failed", h)
		} else if got != want {
			t.Errorf("writeKeys(%q):\n%q\nwant (WriteSubset):\n%q", h, got, want)
		}
	}
}

// writeKeysAndSubset is what writeKeys and Header.WriteSubset write for h;
// ok is false when WriteSubset fails.
func writeKeysAndSubset(h http.Header) (got, want string, ok bool) {
	var wb bytes.Buffer
	if err := h.WriteSubset(&wb, nil); err != nil {
		return "", "", false
	}
	var gb bytes.Buffer
	bw := bufio.NewWriter(&gb)
	var keys []headerKV
	for k, vs := range h {
		keys = append(keys, headerKV{k, vs})
	}
	writeKeys(bw, keys)
	bw.Flush()
	return gb.String(), wb.String(), true
}

// FuzzWriteKeys: any two fields, as WriteSubset writes them.
func FuzzWriteKeys(f *testing.F) {
	f.Add("Content-Type", "text/plain", "Date", "x")
	f.Add("a b", " v\r\n", "B", "\t")
	f.Fuzz(func(t *testing.T, k1, v1, k2, v2 string) {
		h := http.Header{k1: {v1}, k2: {v2, v1}}
		got, want, ok := writeKeysAndSubset(h)
		if !ok {
			t.Skip()
		}
		if got != want {
			t.Errorf("writeKeys(%q) = %q, want %q", h, got, want)
		}
	})
}

// BenchmarkWriteKeys: a proxied response's fields.
func BenchmarkWriteKeys(b *testing.B) {
	h := http.Header{"Content-Length": {"1024"}, "Content-Type": {"application/octet-stream"},
		"Date": {"Tue, 01 Dec 2026 12:00:00 GMT"}, "Server": {"raw"}, "Set-Cookie": {".Tether.Affinity=CfDJ8AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA; path=/; samesite=lax; httponly"}}
	bw := bufio.NewWriterSize(io.Discard, 4096)
	keys := make([]headerKV, 0, 16)
	for b.Loop() {
		keys = keys[:0]
		for k, vs := range h {
			keys = append(keys, headerKV{k, vs})
		}
		writeKeys(bw, keys)
		bw.Reset(io.Discard)
	}
}

// plainRule is plainValue's known answer, byte by byte: WriteSubset
// writes v unchanged when it has no CR or LF and trimming takes nothing.
func plainRule(v string) bool {
	return !strings.ContainsAny(v, "\r\n") && textproto.TrimString(v) == v
}

func TestPlainValueMatchesWriteSubset(t *testing.T) {
	for n := 0; n <= 19; n++ {
		for pos := 0; pos < n; pos++ {
			for c := 0; c < 256; c++ {
				b := bytes.Repeat([]byte{'a'}, n)
				b[pos] = byte(c)
				if got, want := plainValue(string(b)), plainRule(string(b)); got != want {
					t.Fatalf("plainValue(%q) = %v, want %v", b, got, want)
				}
			}
		}
	}
}

func FuzzPlainValue(f *testing.F) {
	for _, s := range []string{"", "Tue, 01 Dec 2026 12:00:00 GMT", "application/octet-stream", "a\r\nb", " x", "x\t", "0123456789abcdef\n"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		if got, want := plainValue(v), plainRule(v); got != want {
			t.Fatalf("plainValue(%q) = %v, want %v", v, got, want)
		}
	})
}
