package h1server

import (
	"bufio"
	"bytes"
	"io"
	"net/http"
	"net/textproto"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/tether-proxy/tether/proxy/internal/h1wire"
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
	writeKeys(bw, keys, "")
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

// FuzzWriteKeysParsed: the fields of a head the lean parser read, with
// slices of its values added as values and as names (as a transform may
// make them) and one value of any bytes, go out the same with the
// parser's string as without it, and as WriteSubset writes them; every
// value the parser handed out lies in that string.
func FuzzWriteKeysParsed(f *testing.F) {
	f.Add("X-A: a b\r\nX-B:\tc\t d \r\nServer: s\r\n", uint8(1), uint8(3), "x\r\ny")
	f.Add("Content-Type: text/plain\r\nX-N: Name-X y\r\nX-N: v\r\n", uint8(0), uint8(6), " v\t")
	f.Add("x-low: A\r\nDate: d\r\n", uint8(2), uint8(2), "")
	f.Fuzz(func(t *testing.T, fields string, i, j uint8, extra string) {
		head := "HTTP/1.1 200 OK\r\n" + fields + "Content-Length: 0\r\n\r\n"
		br := bufio.NewReaderSize(strings.NewReader(head), len(head)+16)
		var fs h1wire.Fields
		lr, err := h1wire.ReadHead(br, &http.Request{Method: http.MethodGet}, &fs, nil)
		if lr == nil || err != nil {
			t.Skip()
		}
		parsed, h := fs.Head(), lr.Response.Header
		if parsed == "" {
			t.Fatal("a parsed head without its string")
		}
		var vals []string
		for k, vs := range h {
			for _, v := range vs {
				if !h1wire.Within(parsed, v) {
					t.Fatalf("%s's value %q is not in the parsed string %q", k, v, parsed)
				}
				vals = append(vals, v)
			}
		}
		slices.Sort(vals) // the same slices whatever the map's order
		for n, v := range vals {
			a, b := min(int(i), len(v)), min(int(j), len(v))
			if a > b {
				a, b = b, a
			}
			s := v[a:b]
			h["X-Slice-"+strconv.Itoa(n)] = []string{s, v[a:]}
			h[s] = append(h[s], "n")
			if k := http.CanonicalHeaderKey(s); k != s {
				h[k] = append(h[k], v[:b])
			}
		}
		h["X-Extra"] = []string{extra}
		var keys []headerKV
		for k, vs := range h {
			keys = append(keys, headerKV{k, vs})
		}
		with, without := writeKeysOf(keys, parsed), writeKeysOf(keys, "")
		if with != without {
			t.Fatalf("with the parsed string:\n%q\nwithout:\n%q", with, without)
		}
		var wb bytes.Buffer
		if err := h.WriteSubset(&wb, nil); err != nil {
			t.Fatal(err)
		}
		if with != wb.String() {
			t.Fatalf("writeKeys:\n%q\nWriteSubset:\n%q", with, wb.String())
		}
	})
}

// FuzzListedHead: a head the lean parser leaves as a list
// (h1wire.Fields.KeepList) makes the map it makes without one (Map), and
// its fields written from the list, one key per field as scanList makes
// them, are what WriteSubset writes of that map: the same names in the
// same order, a name's values in theirs.
func FuzzListedHead(f *testing.F) {
	f.Add("X-A: a b\r\nX-B:\tc\t d \r\nServer: s\r\n")
	f.Add("Set-Cookie: a\r\nX-Z: z\r\nSet-Cookie: b\r\nx-low: A\r\nSet-Cookie: c\r\nX-Z: y\r\n")
	f.Add("Connection: close\r\nX-A: a\r\n")
	f.Add("Content-Encoding: gzip\r\n")
	f.Add("M: 1\r\nL: 2\r\nK: 3\r\nJ: 4\r\nI: 5\r\nH: 6\r\nG: 7\r\nF: 8\r\nE: 9\r\nD: 10\r\nC: 11\r\nB: 12\r\nA: 13\r\nM: 14\r\nA: 15\r\n")
	f.Fuzz(func(t *testing.T, fields string) {
		head := "HTTP/1.1 200 OK\r\n" + fields + "Content-Length: 0\r\n\r\n"
		read := func(list bool) (*h1wire.Fields, http.Header) {
			br := bufio.NewReaderSize(strings.NewReader(head), len(head)+16)
			var fs h1wire.Fields
			if list {
				fs.KeepList()
			}
			lr, err := h1wire.ReadHead(br, &http.Request{Method: http.MethodGet}, &fs, nil)
			if lr == nil || err != nil {
				t.Skip()
			}
			return &fs, lr.Response.Header
		}
		_, want := read(false)
		fs, h := read(true)
		if !fs.Listed() {
			if !reflect.DeepEqual(h, want) {
				t.Fatalf("not listed: %q, want %q", h, want)
			}
			return
		}
		if h != nil {
			t.Fatalf("listed, and a map %q too", h)
		}
		names, vals := fs.List()
		var keys []headerKV
		for i, k := range names {
			keys = append(keys, headerKV{k, vals[i : i+1]})
		}
		got := writeKeysOf(keys, fs.Head())
		var wb bytes.Buffer
		if err := want.WriteSubset(&wb, nil); err != nil {
			t.Fatal(err)
		}
		if got != wb.String() {
			t.Fatalf("from the list:\n%q\nWriteSubset of the map:\n%q", got, wb.String())
		}
		if m := fs.Map(); !reflect.DeepEqual(m, want) || fs.Listed() {
			t.Fatalf("Map: %q, want %q", m, want)
		}
	})
}

// writeKeysOf is what writeKeys writes of keys, given parsed.
func writeKeysOf(keys []headerKV, parsed string) string {
	var b bytes.Buffer
	bw := bufio.NewWriter(&b)
	writeKeys(bw, slices.Clone(keys), parsed)
	bw.Flush()
	return b.String()
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
		writeKeys(bw, keys, "")
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
