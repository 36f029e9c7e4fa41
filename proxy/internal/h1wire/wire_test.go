package h1wire_test

import (
	"bufio"
	"bytes"
	"errors"
	"github.com/tether-proxy/tether/proxy/internal/h1wire"
	"github.com/tether-proxy/tether/proxy/lean"
	"golang.org/x/net/http/httpguts"
	"io"
	"net/http"
	"net/url"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// The lean path's own wire code is held to the standard library's: every
// request head it writes must read back as Request.Write's does, and every
// response head it parses must give what http.ReadResponse gives from the
// same bytes. The standard library is the known answer here.

// headLines splits a request head into its request line, its Host line
// and each field's lines in order (Request.Write sorts the fields; the
// lean writer does not, and field order across names carries no meaning).
func headLines(t *testing.T, b []byte) (first, host string, fields map[string][]string) {
	t.Helper()
	s := string(b)
	if !strings.HasSuffix(s, "\r\n\r\n") {
		t.Fatalf("head %q does not end with an empty line", s)
	}
	lines := strings.Split(strings.TrimSuffix(s, "\r\n\r\n"), "\r\n")
	if len(lines) < 2 {
		t.Fatalf("head %q: no Host line", s)
	}
	fields = map[string][]string{}
	for _, l := range lines[2:] {
		k, _, _ := strings.Cut(l, ":")
		fields[k] = append(fields[k], l)
	}
	return lines[0], lines[1], fields
}

func stdlibHead(t *testing.T, req *http.Request) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := req.Write(&b); err != nil {
		t.Fatalf("Request.Write: %v", err)
	}
	return b.Bytes()
}

func leanHead(req *http.Request) ([]byte, bool, error) {
	var b bytes.Buffer
	bw := bufio.NewWriter(&b)
	ok, err := h1wire.WriteRequestHead(bw, req)
	if err == nil {
		err = bw.Flush()
	}
	return b.Bytes(), ok, err
}

func sameHead(t *testing.T, req *http.Request) bool {
	t.Helper()
	got, ok, err := leanHead(req)
	if err != nil {
		t.Fatalf("h1wire.WriteRequestHead: %v", err)
	}
	if !ok {
		if len(got) != 0 {
			t.Fatalf("h1wire.WriteRequestHead declined but wrote %q", got)
		}
		return false
	}
	want := stdlibHead(t, req)
	f1, h1, m1 := headLines(t, got)
	f2, h2, m2 := headLines(t, want)
	if f1 != f2 || h1 != h2 || !reflect.DeepEqual(m1, m2) {
		t.Fatalf("lean head differs from Request.Write's:\nlean:\n%s\nstdlib:\n%s", got, want)
	}
	return true
}

func TestWriteRequestHeadMatchesRequestWrite(t *testing.T) {
	mk := func(method, rawURL, host string, h http.Header) *http.Request {
		u, err := url.Parse(rawURL)
		if err != nil {
			t.Fatal(err)
		}
		if h == nil {
			h = http.Header{}
		}
		return &http.Request{Method: method, URL: u, Host: host, Header: h}
	}
	cases := []struct {
		name string
		req  *http.Request
		lean bool // the lean writer takes it
	}{
		{"plain GET", mk("GET", "http://b:8080/a/b?x=1", "front.example", http.Header{"Accept": {"*/*"}}), true},
		{"empty method is GET", mk("", "http://b/", "", nil), true},
		{"no Host: the URL's", mk("GET", "http://b:81/p", "", nil), true},
		{"empty path is /", mk("GET", "http://b", "h", nil), true},
		{"escaped path kept", mk("GET", "http://b/a%2Fb/c%20d", "h", nil), true},
		{"force query", mk("GET", "http://b/p?", "h", nil), true},
		{"no User-Agent: Go's default", mk("GET", "http://b/", "h", nil), true},
		{"empty User-Agent: none", mk("GET", "http://b/", "h", http.Header{"User-Agent": {""}}), true},
		{"User-Agent trimmed", mk("GET", "http://b/", "h", http.Header{"User-Agent": {"  curl/8 \t"}}), true},
		{"User-Agent of spaces: written empty", mk("GET", "http://b/", "h", http.Header{"User-Agent": {" \t "}}), true},
		{"User-Agent present, no values", mk("GET", "http://b/", "h", http.Header{"User-Agent": nil}), true},
		{"values trimmed, order kept", mk("GET", "http://b/", "h", http.Header{"X-A": {" 1", "2 ", "\t3\t"}, "Cookie": {"a=1", "b=2"}}), true},
		{"excluded fields dropped", mk("GET", "http://b/", "h", http.Header{"Content-Length": {"5"}, "Transfer-Encoding": {"chunked"}, "Trailer": {"X"}, "Host": {"evil"}}), true},
		{"POST without body: Content-Length 0", mk("POST", "http://b/", "h", nil), true},
		{"PUT without body: Content-Length 0", mk("PUT", "http://b/", "h", nil), true},
		{"PATCH without body: Content-Length 0", mk("PATCH", "http://b/", "h", nil), true},
		{"DELETE without body: none", mk("DELETE", "http://b/", "h", nil), true},
		{"OPTIONS", mk("OPTIONS", "http://b/x", "h", nil), true},
		{"IPv6 host", mk("GET", "http://[::1]:80/", "", nil), true},
		{"IPv6 zone: declined", mk("GET", "http://b/", "[fe80::1%25eth0]:80", nil), false},
		{"non-ASCII host: declined (punycode)", mk("GET", "http://b/", "bücher.example", nil), false},
		{"invalid Host: declined", mk("GET", "http://b/", "a b", nil), false},
		{"opaque URL: declined", &http.Request{Method: "GET", URL: &url.URL{Scheme: "http", Opaque: "//b/x", Host: "b"}, Host: "b", Header: http.Header{}}, false},
		{"CONNECT: declined", mk("CONNECT", "http://b:443", "b:443", nil), false},
		{"Close: declined", func() *http.Request { r := mk("GET", "http://b/", "h", nil); r.Close = true; return r }(), false},
		{"control byte in path: declined", &http.Request{Method: "GET", URL: &url.URL{Scheme: "http", Host: "b", Path: "/a", RawPath: "/a\x01"}, Host: "b", Header: http.Header{}}, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := sameHead(t, c.req); got != c.lean {
				t.Fatalf("lean writer took it: %v, want %v", got, c.lean)
			}
		})
	}
}

func FuzzWriteRequestHead(f *testing.F) {
	f.Add("GET", "/a/b", "x=1", "front", "Accept", "*/*", "X-Multi", " a , b ")
	f.Add("POST", "/%2F", "", "[::1]:8080", "User-Agent", "", "Cookie", "a=1")
	f.Add("", "", "", "h", "Content-Length", "3", "Te", "trailers")
	f.Fuzz(func(t *testing.T, method, path, query, host, k1, v1, k2, v2 string) {
		req := &http.Request{Method: method, URL: &url.URL{Scheme: "http", Host: "backend:80", Path: path, RawQuery: query},
			Host: host, Header: http.Header{k1: {v1}}}
		req.Header[k2] = append(req.Header[k2], v2)
		lt := &lean.Transport{}
		if !lt.Covers(req) {
			return // never given to the lean writer
		}
		var b bytes.Buffer
		if req.Write(&b) != nil {
			// The standard library refuses it: the lean writer must too.
			if _, ok, _ := leanHead(req); ok {
				t.Fatalf("lean writer wrote a request Request.Write refuses: %+v", req)
			}
			return
		}
		sameHead(t, req)
	})
}

// stdlibResponse is http.ReadResponse's reading of b, the body read to
// its end.
type readBack struct {
	resp *http.Response
	body []byte
	err  error // reading the body
	rest []byte
}

// reusedFields are the containers readBoth's second lean reading reuses,
// head after head.
var reusedFields h1wire.Fields

func readBoth(t *testing.T, raw []byte, method string) (fast, std *readBack) {
	t.Helper()
	req := &http.Request{Method: method, URL: &url.URL{Path: "/"}}
	read := func(lean bool) *readBack {
		br := bufio.NewReaderSize(bytes.NewReader(raw), 4096)
		var resp *http.Response
		var err error
		if lean {
			// Containers reused from an earlier head read it as new ones do.
			reused, rerr := h1wire.ReadHead(bufio.NewReaderSize(bytes.NewReader(raw), 4096), req, &reusedFields, nil)
			resp, err = h1wire.ReadResponseHead(br, req)
			if (reused == nil) != (resp == nil) || (rerr == nil) != (err == nil) ||
				resp != nil && !reflect.DeepEqual(reused.Response.Header, resp.Header) {
				t.Fatalf("h1wire.ReadHead with reused fields differs for %q", raw)
			}
			if resp == nil {
				if err != nil {
					t.Fatalf("h1wire.ReadResponseHead declined with an error: %v", err)
				}
				if br.Buffered() > 0 {
					if b, _ := br.Peek(br.Buffered()); !bytes.Equal(b, raw[:len(b)]) {
						t.Fatal("h1wire.ReadResponseHead consumed bytes it declined")
					}
				}
				return nil
			}
		} else if resp, err = http.ReadResponse(br, req); err != nil {
			return &readBack{err: err}
		}
		body, err := io.ReadAll(resp.Body)
		rest, _ := io.ReadAll(br)
		resp.Body = nil
		return &readBack{resp: resp, body: body, err: err, rest: rest}
	}
	return read(true), read(false)
}

func sameResponse(t *testing.T, raw []byte, method string) bool {
	t.Helper()
	fast, std := readBoth(t, raw, method)
	if fast == nil {
		return false
	}
	if std.resp == nil {
		t.Fatalf("lean parser took %q, which http.ReadResponse refuses: %v", raw, std.err)
	}
	f, s := fast.resp, std.resp
	if f.Status != s.Status || f.StatusCode != s.StatusCode || f.Proto != s.Proto || f.ProtoMajor != s.ProtoMajor ||
		f.ProtoMinor != s.ProtoMinor || !reflect.DeepEqual(f.Header, s.Header) || f.ContentLength != s.ContentLength ||
		f.Close != s.Close || !reflect.DeepEqual(f.TransferEncoding, s.TransferEncoding) || !reflect.DeepEqual(f.Trailer, s.Trailer) ||
		f.Uncompressed != s.Uncompressed {
		t.Fatalf("lean parser's response differs for %q:\nlean   %+v\nstdlib %+v", raw, f, s)
	}
	if !bytes.Equal(fast.body, std.body) || (fast.err == nil) != (std.err == nil) || !bytes.Equal(fast.rest, std.rest) {
		t.Fatalf("lean body differs for %q: lean %q (err %v, rest %q), stdlib %q (err %v, rest %q)",
			raw, fast.body, fast.err, fast.rest, std.body, std.err, std.rest)
	}
	return true
}

func TestReadResponseHeadMatchesReadResponse(t *testing.T) {
	cases := []struct {
		name, raw, method string
		lean              bool // the lean parser takes it
	}{
		{"plain", "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 5\r\n\r\nhello", "GET", true},
		{"next response left alone", "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nhiHTTP/1.1 200 OK\r\n", "GET", true},
		{"empty body", "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", "GET", true},
		{"no reason phrase", "HTTP/1.1 404\r\nContent-Length: 0\r\n\r\n", "GET", true},
		{"odd reason phrase", "HTTP/1.1 503 Slow Down Please \r\nContent-Length: 0\r\n\r\n", "GET", true},
		{"names canonicalised", "HTTP/1.1 200 OK\r\ncontent-length: 1\r\nx-CUSTOM-thing: v\r\nset-cookie: a=1\r\nSet-Cookie: b=2\r\n\r\nx", "GET", true},
		{"a name thrice among others", "HTTP/1.1 200 OK\r\nSet-Cookie: a=1\r\nX-A: 1\r\nset-cookie: b=2\r\nContent-Length: 1\r\nX-B: 2\r\nSET-COOKIE: c=3\r\nX-A: 3\r\n\r\nx", "GET", true},
		{"a name twice at the start", "HTTP/1.1 200 OK\r\nVary: a\r\nVary: b\r\nContent-Length: 1\r\nX: y\r\n\r\nx", "GET", true},
		{"a name twice at the end", "HTTP/1.1 200 OK\r\nContent-Length: 1\r\nX: 1\r\nY: 2\r\nx: 3\r\n\r\nx", "GET", true},
		{"values trimmed", "HTTP/1.1 200 OK\r\nContent-Length:  3 \r\nX-A:\t a b \t\r\nX-Empty:\r\n\r\nabc", "GET", true},
		{"obs-text value", "HTTP/1.1 200 OK\r\nContent-Length: 0\r\nX-A: caf\xc3\xa9\r\n\r\n", "GET", true},
		{"leading zeros in length", "HTTP/1.1 200 OK\r\nContent-Length: 007\r\n\r\n1234567", "GET", true},
		{"Connection: close", "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 1\r\n\r\nx", "GET", true},
		{"Connection: keep-alive kept", "HTTP/1.1 200 OK\r\nConnection: keep-alive\r\nContent-Length: 1\r\n\r\nx", "GET", true},
		{"Connection: Upgrade, Close", "HTTP/1.1 200 OK\r\nConnection: Upgrade, Close\r\nContent-Length: 1\r\n\r\nx", "GET", true},
		{"short body", "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc", "GET", true},
		{"POST response", "HTTP/1.1 201 Created\r\nLocation: /x\r\nContent-Length: 2\r\n\r\nok", "POST", true},
		// Declined: http.ReadResponse's own rules apply.
		{"HEAD", "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n", "HEAD", false},
		{"204", "HTTP/1.1 204 No Content\r\n\r\n", "GET", false},
		{"304", "HTTP/1.1 304 Not Modified\r\nContent-Length: 9\r\n\r\n", "GET", false},
		{"1xx", "HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n", "GET", false},
		{"HTTP/1.0", "HTTP/1.0 200 OK\r\nContent-Length: 1\r\n\r\nx", "GET", false},
		{"chunked", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nx\r\n0\r\n\r\n", "GET", false},
		{"chunked and length (smuggling shape)", "HTTP/1.1 200 OK\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", "GET", false},
		{"two lengths", "HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\nx", "GET", false},
		{"two different lengths", "HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nxy", "GET", false},
		{"bad length", "HTTP/1.1 200 OK\r\nContent-Length: 1x\r\n\r\nx", "GET", false},
		{"signed length", "HTTP/1.1 200 OK\r\nContent-Length: +1\r\n\r\nx", "GET", false},
		{"empty length", "HTTP/1.1 200 OK\r\nContent-Length: \r\n\r\n", "GET", false},
		{"no length: body to the end", "HTTP/1.1 200 OK\r\nX: y\r\n\r\nall of it", "GET", false},
		{"Trailer announced", "HTTP/1.1 200 OK\r\nTrailer: X\r\nContent-Length: 1\r\n\r\nx", "GET", false},
		{"Pragma", "HTTP/1.1 200 OK\r\nPragma: no-cache\r\nContent-Length: 0\r\n\r\n", "GET", false},
		{"folded line", "HTTP/1.1 200 OK\r\nX-A: a\r\n b\r\nContent-Length: 0\r\n\r\n", "GET", false},
		{"bare LF", "HTTP/1.1 200 OK\nContent-Length: 0\n\n", "GET", false},
		{"bare LF in a field", "HTTP/1.1 200 OK\r\nX: a\nContent-Length: 0\r\n\r\n", "GET", false},
		{"space before colon", "HTTP/1.1 200 OK\r\nContent-Length : 0\r\n\r\n", "GET", false},
		{"invalid name byte", "HTTP/1.1 200 OK\r\nX(y): 1\r\nContent-Length: 0\r\n\r\n", "GET", false},
		{"control byte in a value", "HTTP/1.1 200 OK\r\nX: a\x01b\r\nContent-Length: 0\r\n\r\n", "GET", false},
		{"CR in a value", "HTTP/1.1 200 OK\r\nX: a\rb\r\nContent-Length: 0\r\n\r\n", "GET", false},
		{"status not three digits", "HTTP/1.1 2000 OK\r\nContent-Length: 0\r\n\r\n", "GET", false},
		{"incomplete head", "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n", "GET", false},
		{"garbage", "hello world\r\n\r\n", "GET", false},
		{"head larger than the buffer", "HTTP/1.1 200 OK\r\nX: " + strings.Repeat("a", 5000) + "\r\nContent-Length: 0\r\n\r\n", "GET", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := sameResponse(t, []byte(c.raw), c.method); got != c.lean {
				t.Fatalf("lean parser took it: %v, want %v", got, c.lean)
			}
		})
	}
}

// stallReader gives its bytes, then stalls: a further Read is a wait for
// bytes the peer will never send (a backend that already ended its head).
type stallReader struct {
	b       []byte
	stalled bool
}

var errStalled = errors.New("read past a complete head")

func (r *stallReader) Read(p []byte) (int, error) {
	if len(r.b) == 0 {
		r.stalled = true
		return 0, errStalled
	}
	n := copy(p, r.b)
	r.b = r.b[n:]
	return n, nil
}

// noWaitPastHead: a head that ended (its blank line, LF or CRLF, as
// http.ReadResponse finds it) within the buffer is read without waiting
// for more bytes.
func noWaitPastHead(t *testing.T, raw []byte) {
	t.Helper()
	end := h1wire.HeadEnd(raw)
	if end < 0 || end > 4096 {
		return
	}
	r := &stallReader{b: raw[:end]}
	h1wire.PeekHead(bufio.NewReaderSize(r, 4096))
	if r.stalled {
		t.Fatalf("h1wire.PeekHead waited for more after the complete head %q", raw[:end])
	}
}

// TestPeekHeadEndsAtBareLF: a backend's head ended by bare LFs is not
// waited on until the activity timeout.
func TestPeekHeadEndsAtBareLF(t *testing.T) {
	for _, raw := range []string{
		"HTTP/1.1 200 OK\nContent-Length: 2\n\nok",
		"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\nok",
		"HTTP/1.1 200 OK\nContent-Length: 2\r\n\r\nok",
		"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
	} {
		noWaitPastHead(t, []byte(raw))
	}
}

func FuzzReadResponseHead(f *testing.F) {
	f.Add([]byte("HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 5\r\n\r\nhello"), false)
	f.Add([]byte("HTTP/1.1 200 OK\nContent-Length: 2\n\nok"), false)
	f.Add([]byte("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\nok"), false)
	f.Add([]byte("HTTP/1.1 200 OK\r\nConnection: close\r\nset-cookie: a=1\r\nContent-Length: 1\r\n\r\nxHTTP/1.1"), false)
	f.Add([]byte("HTTP/1.1 200 OK\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"), true)
	f.Fuzz(func(t *testing.T, raw []byte, head bool) {
		method := "GET"
		if head {
			method = "HEAD"
		}
		sameResponse(t, raw, method)
		noWaitPastHead(t, raw)
	})
}

// The parser reads a typical response head without allocating more than
// its response, header map, values, one string and body reader.
func TestReadResponseHeadAllocations(t *testing.T) {
	raw := []byte("HTTP/1.1 200 OK\r\nContent-Type: text/plain; charset=utf-8\r\nDate: Tue, 01 Dec 2026 12:00:00 GMT\r\nContent-Length: 5\r\n\r\nhello")
	req := &http.Request{Method: "GET", URL: &url.URL{Path: "/"}}
	rd := bytes.NewReader(raw)
	br := bufio.NewReaderSize(rd, 4096)
	allocs := testing.AllocsPerRun(200, func() {
		rd.Reset(raw)
		br.Reset(rd)
		resp, err := h1wire.ReadResponseHead(br, req)
		if resp == nil || err != nil {
			t.Fatalf("declined: %v", err)
		}
	})
	// *Response, the map (its header and its slots), the values slice,
	// the one string of the fields, the body.
	if allocs > 6 {
		t.Fatalf("h1wire.ReadResponseHead: %.0f allocations per response, want at most 6", allocs)
	}
}

// BenchmarkWriteRequestHead: a proxied GET's head, as the direct path
// hands it to the lean transport.
func BenchmarkWriteRequestHead(b *testing.B) {
	req, _ := http.NewRequest("GET", "http://10.0.0.1:8080/x?a=1", nil)
	req.Header = http.Header{"Cookie": {".Tether.Affinity=CfDJ8AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"}, "User-Agent": {"wrk"},
		"X-Forwarded-For": {"127.0.0.1"}, "X-Forwarded-Proto": {"http"}, "X-Forwarded-Host": {"front.example"},
		"Traceparent": {"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}, "Accept": {"*/*"}}
	bw := bufio.NewWriterSize(io.Discard, 4096)
	for b.Loop() {
		if ok, err := h1wire.WriteRequestHead(bw, req); !ok || err != nil {
			b.Fatal(ok, err)
		}
		bw.Reset(io.Discard)
	}
}

// ValidFieldValue is httpguts.ValidHeaderFieldValue, the known answer:
// every byte value at every position of a word and of the tail.
func TestValidFieldValueMatchesHttpguts(t *testing.T) {
	for n := 0; n <= 19; n++ {
		for pos := 0; pos < n; pos++ {
			for c := 0; c < 256; c++ {
				b := bytes.Repeat([]byte{'a'}, n)
				b[pos] = byte(c)
				v := string(b)
				if got, want := h1wire.ValidFieldValue(v), httpguts.ValidHeaderFieldValue(v); got != want {
					t.Fatalf("ValidFieldValue(%q) = %v, httpguts says %v", v, got, want)
				}
			}
		}
	}
	for _, v := range []string{"", "\t\t\t\t\t\t\t\t\x00", "text/html; charset=utf-8\x7f", "\xff\xfe\x80\x81\x9f\xa0\xc0\xe0x", "aaaaaaa\taaaaaaaa\x1f"} {
		if got, want := h1wire.ValidFieldValue(v), httpguts.ValidHeaderFieldValue(v); got != want {
			t.Errorf("ValidFieldValue(%q) = %v, httpguts says %v", v, got, want)
		}
	}
}

func FuzzValidFieldValue(f *testing.F) {
	for _, s := range []string{"", "abc", "sid=0123456789abcdef; Path=/", "a\tb\x7fcdefghij", "\x80\x1f\x20\x7e\x7f\xff0123"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		if got, want := h1wire.ValidFieldValue(v), httpguts.ValidHeaderFieldValue(v); got != want {
			t.Fatalf("ValidFieldValue(%q) = %v, httpguts says %v", v, got, want)
		}
	})
}

// A lean head's HopByHop is set when it had any of RFC 2616's hop-by-hop
// fields (a proxy then removes them) and only then: a head without one
// lets the proxy skip that walk.
func TestReadHeadNotesHopByHopFields(t *testing.T) {
	hop := []string{"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization", "Te", "Upgrade"}
	heads := map[string]bool{"X-Other: 1\r\n": false, "Content-Type: text/plain\r\nDate: x\r\n": false, "Connection: close\r\n": true, "keep-alive: timeout=5\r\n": true}
	for _, k := range hop {
		heads[k+": x\r\n"] = true
	}
	for fields, want := range heads {
		raw := "HTTP/1.1 200 OK\r\n" + fields + "Content-Length: 1\r\n\r\nx"
		req := &http.Request{Method: "GET"}
		lr, err := h1wire.ReadHead(bufio.NewReader(strings.NewReader(raw)), req, nil, nil)
		if err != nil || lr == nil {
			t.Fatalf("%q: not taken (%v)", raw, err)
		}
		if lr.HopByHop != want {
			t.Errorf("%q: HopByHop %v, want %v", fields, lr.HopByHop, want)
		}
	}
}

// A container's Head is the string of the head ReadHead parsed into its
// map, and only while the map is that head's: a head ReadHead leaves to
// http.ReadResponse, a trade of the map and a new Get give "".
func TestFieldsHeadIsTheParsedHeads(t *testing.T) {
	read := func(fs *h1wire.Fields, raw string) *h1wire.Resp {
		lr, err := h1wire.ReadHead(bufio.NewReader(strings.NewReader(raw)), &http.Request{Method: "GET"}, fs, nil)
		if err != nil {
			t.Fatal(err)
		}
		return lr
	}
	var fs h1wire.Fields
	lr := read(&fs, "HTTP/1.1 200 OK\r\nX-A: a b\r\nContent-Length: 0\r\n\r\n")
	if lr == nil {
		t.Fatal("not taken")
	}
	for k := range lr.Response.Header { // the parser's names
		if known := k == "Content-Length"; h1wire.KnownName(k) != known || h1wire.KnownName(strings.Clone(k)) || h1wire.KnownName(k[:0]) {
			t.Errorf("KnownName(%q) = %v, want %v (and false for a copy and for none)", k, h1wire.KnownName(k), known)
		}
	}
	head, v := fs.Head(), lr.Response.Header["X-A"][0]
	if !h1wire.Within(head, v) || !h1wire.Within(head, v[1:2]) || h1wire.Within(head, strings.Clone(v)) || h1wire.Within("", v) {
		t.Errorf("Within(%q, %q): its slices lie in the head, a copy does not", head, v)
	}
	if h, _ := fs.Trade(http.Header{}, nil); !reflect.DeepEqual(h, lr.Response.Header) || fs.Head() != "" {
		t.Errorf("after a trade: Head %q, want \"\"", fs.Head())
	}
	read(&fs, "HTTP/1.1 200 OK\r\nX-A: a\r\nContent-Length: 0\r\n\r\n")
	if lr := read(&fs, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"); lr != nil || fs.Head() != "" {
		t.Errorf("a head left to http.ReadResponse: Head %q, want \"\"", fs.Head())
	}
}

// A container asked to keep a list (KeepList) keeps one for the next head
// ReadHead reads, and only for that one: a head it leaves to
// http.ReadResponse, whatever made it decline, ends the request, so the
// container's next user (a pooled one's, which asked for nothing) gets a
// map; so do a head with a hop-by-hop field or a Content-Encoding.
func TestReadHeadKeepsAListOnceAsked(t *testing.T) {
	read := func(fs *h1wire.Fields, raw, method string) *h1wire.Resp {
		lr, err := h1wire.ReadHead(bufio.NewReader(strings.NewReader(raw)), &http.Request{Method: method}, fs, nil)
		if err != nil {
			t.Fatal(err)
		}
		return lr
	}
	const plain = "HTTP/1.1 200 OK\r\nX-A: a\r\nX-A: b\r\nContent-Length: 0\r\n\r\n"
	var fs h1wire.Fields
	fs.KeepList()
	lr := read(&fs, plain, "GET")
	if !fs.Listed() || lr.Response.Header != nil {
		t.Fatalf("asked: listed %v, Header %q; want a list alone", fs.Listed(), lr.Response.Header)
	}
	if names, vals := fs.List(); !slices.Equal(names, []string{"X-A", "X-A", "Content-Length"}) || !slices.Equal(vals, []string{"a", "b", "0"}) {
		t.Fatalf("list %q %q, want the head's fields in its order", names, vals)
	}
	for _, declined := range []struct{ raw, method string }{
		{"HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n", "GET"},
		{"HTTP/1.1 200 OK\r\nContent-Length: 0\n\n", "GET"},
		{"HTTP/1.1 100 Continue\r\n\r\n", "GET"},
		{"HTTP/1.1 204 No Content\r\n\r\n", "GET"},
		{plain, "HEAD"},
		{"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", "GET"},
	} {
		fs.KeepList()
		if lr := read(&fs, declined.raw, declined.method); lr != nil {
			t.Fatalf("%q: taken", declined.raw)
		}
		if lr := read(&fs, plain, "GET"); fs.Listed() || !reflect.DeepEqual(lr.Response.Header, http.Header{"X-A": {"a", "b"}, "Content-Length": {"0"}}) {
			t.Fatalf("after %q: listed %v, Header %q; want the map alone", declined.raw, fs.Listed(), lr.Response.Header)
		}
	}
	for _, fields := range []string{"Connection: x\r\n", "Keep-Alive: 1\r\n", "Content-Encoding: gzip\r\n"} {
		fs.KeepList()
		if lr := read(&fs, "HTTP/1.1 200 OK\r\n"+fields+"Content-Length: 0\r\n\r\n", "GET"); fs.Listed() || lr.Response.Header == nil {
			t.Fatalf("%q: listed %v; want the map", fields, fs.Listed())
		}
	}
}

// A HostMemo changes no head: after any host, any other host (a copy of
// the same text among them) is written, or declined, as without it.
func TestHostMemoChangesNoHead(t *testing.T) {
	hosts := []string{"backend:80", "front.example", "a b", "b%25", "ünicode", "[::1]:8080", "x\x7f", ""}
	head := func(host string, memo *h1wire.HostMemo) (string, h1wire.Head) {
		req := &http.Request{Method: "GET", URL: &url.URL{Scheme: "http", Host: "backend:80", Path: "/"},
			Host: host, Header: http.Header{}}
		b, res := h1wire.AppendRequestHead(nil, req, true, "", h1wire.Beside{}, memo)
		return string(b), res
	}
	for _, first := range hosts {
		for _, second := range append(hosts, strings.Clone(first)) {
			var memo h1wire.HostMemo
			head(first, &memo)
			got, gres := head(second, &memo)
			want, wres := head(second, nil)
			if got != want || gres != wres {
				t.Errorf("host %q after %q: %q (%v), without the memo %q (%v)", second, first, got, gres, want, wres)
			}
		}
	}
}

// checkHeadLines holds HeadLines to HeadEnd and FieldLines of what follows
// the head's start line, the two scans it stands for.
func checkHeadLines(t *testing.T, b []byte) {
	end, fields := h1wire.HeadLines(b)
	if want := h1wire.HeadEnd(b); end != want {
		t.Fatalf("HeadLines(%q) ends at %d, HeadEnd at %d", b, end, want)
	}
	if end < 0 {
		return
	}
	head := b[:end]
	if want := h1wire.FieldLines(head[bytes.IndexByte(head, '\n')+1:]); fields != want {
		t.Fatalf("HeadLines(%q) counts %d field lines, FieldLines %d", b, fields, want)
	}
}

func TestHeadLines(t *testing.T) {
	for _, s := range []string{
		"GET / HTTP/1.1\r\nHost: a\r\n\r\n", "GET / HTTP/1.1\r\nHost: a\r\nB: c\r\n\r\nGET", "\r\n", "\n",
		"GET / HTTP/1.1\r\n\r\n", "GET / HTTP/1.1\nHost: a\n\n", "GET / HTTP/1.1\r\nHost: a\r\n", "",
		"HTTP/1.1 200 OK\r\nA: 1\nB: 2\r\n\r\n",
	} {
		checkHeadLines(t, []byte(s))
	}
}

func FuzzHeadLines(f *testing.F) {
	f.Add([]byte("GET / HTTP/1.1\r\nHost: a\r\nB: c\r\n\r\n"))
	f.Add([]byte("HTTP/1.1 200 OK\nA: 1\r\n\n"))
	f.Fuzz(checkHeadLines)
}
