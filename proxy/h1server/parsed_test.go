package h1server

import (
	"bytes"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"testing"
	"unsafe"

	"github.com/tether-proxy/tether/proxy/internal/h1wire"
)

// in: s lies in the string head.
func in(head, s string) bool {
	lo := uintptr(unsafe.Pointer(unsafe.StringData(head)))
	off := uintptr(unsafe.Pointer(unsafe.StringData(s))) - lo
	return off < uintptr(len(head)) && uintptr(len(s)) <= uintptr(len(head))-off
}

// checkParsedHead holds the loop's parser to what the lean writer takes
// on trust from the head's string (cancelhook.Ctx.SetParsed): the target,
// the host and every value lie in it (but for the constant Cache-Control
// a Pragma adds) with no byte outside visible ASCII, space and tab; and
// the head the lean writer makes of a request whose fields are the
// parsed ones, and slices of them taken as a transform might (from at
// and to, as values and as names), is the same with the head's string
// given as without it.
func checkParsedHead(t *testing.T, b []byte, from, to uint8) {
	end := h1wire.HeadEnd(b)
	if end < 0 {
		return
	}
	var sc headScratch
	var r http.Request
	if !parseRequestHeadInto(b[:end], 0, &r, &sc) {
		return
	}
	head := sc.head
	plain := func(s string) bool {
		for i := 0; i < len(s); i++ {
			if c := s[i]; c < ' ' && c != '\t' || c > '~' {
				return false
			}
		}
		return true
	}
	if !in(head, r.RequestURI) || !in(head, r.Host) || !plain(r.RequestURI) || !plain(r.Host) {
		t.Fatalf("head %q: target %q or host %q not a plain slice of the head", b[:end], r.RequestURI, r.Host)
	}
	// The fields as parsed, then with one more field each: a slice of a
	// value or a name (as a transform might make one), as a value and as
	// a name.
	base := http.Header{}
	var cuts []string
	cut := func(s string) string {
		i, j := int(from)%(len(s)+1), int(to)%(len(s)+1)
		if i > j {
			i, j = j, i
		}
		return s[i:j]
	}
	for k, vs := range r.Header {
		base[k] = vs
		cuts = append(cuts, cut(k))
		for _, v := range vs {
			if (!in(head, v) || !plain(v)) && !(k == "Cache-Control" && v == "no-cache") {
				t.Fatalf("head %q: value %q of %s not a plain slice of the head", b[:end], v, k)
			}
			cuts = append(cuts, cut(v))
		}
	}
	same := func(h http.Header) {
		req := &http.Request{Method: http.MethodGet, URL: &url.URL{Scheme: "http", Host: "backend:80", Path: "/"}, Host: "backend", Header: h}
		trusted, tres := h1wire.AppendRequestHead(nil, req, true, head, h1wire.Beside{}, nil)
		checked, cres := h1wire.AppendRequestHead(nil, req, true, "", h1wire.Beside{}, nil)
		if tres != cres || !slices.Equal(sortedLines(trusted), sortedLines(checked)) {
			t.Fatalf("head %q: the lean head with the parsed head's string (%v)\n%q\nwithout it (%v)\n%q", b[:end], tres, trusted, cres, checked)
		}
	}
	same(base)
	for _, s := range cuts {
		for _, extra := range []http.Header{{"X-Slice": {s}}, {s: {"v"}}} {
			h := maps.Clone(base)
			maps.Copy(h, extra)
			same(h)
		}
	}
}

// sortedLines: the map's order is random.
func sortedLines(b []byte) []string {
	var ls []string
	for l := range bytes.SplitSeq(b, []byte("\r\n")) {
		ls = append(ls, string(l))
	}
	sort.Strings(ls)
	return ls
}

var parsedSeeds = []string{
	"GET /x HTTP/1.1\r\nHost: front.example\r\nUser-Agent: ua\r\nCookie: a=1; b=2\r\n\r\n",
	"GET /x?y HTTP/1.1\r\nHost: h\r\nX-A: a b\r\nX-A:  c\t\r\nPragma: no-cache\r\nx-lower: v v \r\n\r\n",
	"GET / HTTP/1.1\r\nHost: h\r\nAccept: */*\r\nAccept-Encoding: gzip\r\nX-Empty:\r\nReferer: http://e/\r\n\r\n",
}

func TestParsedHeadVouchesForItsValues(t *testing.T) {
	for _, s := range parsedSeeds {
		for from := range 12 {
			for to := range 12 {
				checkParsedHead(t, []byte(s), uint8(from), uint8(to))
			}
		}
	}
}

func FuzzParsedHead(f *testing.F) {
	for _, s := range parsedSeeds {
		f.Add([]byte(s), uint8(1), uint8(3))
	}
	for _, s := range parseSeeds {
		f.Add([]byte(s), uint8(0), uint8(2))
	}
	f.Fuzz(func(t *testing.T, b []byte, from, to uint8) { checkParsedHead(t, b, from, to) })
}
