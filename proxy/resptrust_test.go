package proxy

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/tether-proxy/tether/proxy/forwarded"
)

// TestDirectResponseChecksWhatTheParserDidNot: the own loop's writer
// takes the values of a lean response head and the common names as the
// parser left them, and a transform's value, a slice of a backend's value
// and a name made of one still go out as net/http's server writes them:
// line breaks turned to spaces, ends trimmed, an invalid name dropped.
// The same proxy behind both servers, byte for byte but the Date and the
// trace id.
func TestDirectResponseChecksWhatTheParserDidNot(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go acceptCanned(ln, []byte("HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Type: text/plain\r\nX-B: a b\r\nX-C: c\t d\r\nX-N: Name-X y\r\nServer: srv\r\n\r\nok"))

	backend := func(h http.Header, k string) string { return h[k][0] }
	knownName := func(h http.Header) string { // the map's own key: the parser's string
		for k := range h {
			if k == "Content-Type" {
				return k
			}
		}
		t.Fatal("no Content-Type")
		return ""
	}
	// A transform's names are canonical (the adopted map's rule), or
	// invalid.
	cases := []struct {
		name   string
		modify func(h http.Header)
		want   []string // lines the head must hold
	}{
		{"the backend's fields", func(http.Header) {}, []string{"X-B: a b", "X-B: more", "X-C: c\t d", "X-N: Name-X y", "Content-Type: text/plain"}},
		{"a value with line breaks", func(h http.Header) {
			h["X-T"] = []string{"l1\r\nl2", "a\nb"}
		}, []string{"X-T: l1  l2", "X-T: a b"}},
		{"a value with spaces at its ends", func(h http.Header) {
			h["X-T"] = []string{" v", "w\t", " \t "}
		}, []string{"X-T: v", "X-T: w", "X-T: "}},
		{"a line break added to a backend's field", func(h http.Header) {
			h["Content-Type"] = append(h["Content-Type"], "x\r\ny")
		}, []string{"Content-Type: text/plain", "Content-Type: x  y"}},
		{"a backend's value sliced to a leading space", func(h http.Header) {
			h["X-S"] = []string{backend(h, "X-B")[1:]}
		}, []string{"X-S: b"}},
		{"a backend's value sliced to a trailing space", func(h http.Header) {
			h["X-S"] = []string{backend(h, "X-B")[:2]}
		}, []string{"X-S: a"}},
		{"a backend's value sliced to a space alone", func(h http.Header) {
			h["X-S"] = []string{backend(h, "X-B")[1:2]}
		}, []string{"X-S: "}},
		{"a backend's value sliced to a tab", func(h http.Header) {
			h["X-S"] = []string{backend(h, "X-C")[1:]}
		}, []string{"X-S: d"}},
		{"a backend's value re-sliced in its own slot", func(h http.Header) {
			h["X-B"][0] = backend(h, "X-B")[1:]
		}, []string{"X-B: b"}},
		{"a backend's value as a name", func(h http.Header) {
			h[backend(h, "X-N")] = []string{"v"}
		}, nil},
		{"a backend's value sliced to a name", func(h http.Header) {
			h[backend(h, "X-N")[:6]] = []string{"v"}
		}, []string{"Name-X: v"}},
		{"a backend's value with its tab as a name", func(h http.Header) {
			h[backend(h, "X-C")[:2]] = []string{"v"}
		}, nil},
		{"a backend's value canonicalised to a name", func(h http.Header) {
			h[http.CanonicalHeaderKey(backend(h, "X-B")[:1])] = []string{"v"}
		}, []string{"A: v"}},
		{"a common name sliced", func(h http.Header) {
			h[knownName(h)[:7]] = []string{"v"}
		}, []string{"Content: v"}},
		{"a common name sliced to nothing", func(h http.Header) {
			h[knownName(h)[:0]] = []string{"v"}
		}, nil},
		{"a common name's canonicalised copy", func(h http.Header) {
			h[http.CanonicalHeaderKey(strings.ToLower(knownName(h)))] = []string{"v w "}
		}, []string{"Content-Type: v w"}},
		{"a control byte other than CR and LF", func(h http.Header) {
			h["X-T"] = []string{"a\x00b\x7f"}
		}, []string{"X-T: a\x00b\x7f"}},
	}
	var modify atomic.Pointer[func(h http.Header)]
	onResponse := func(res *http.Response) { (*modify.Load())(res.Header) }
	// Transforms of the configuration too (which refuses a line break in
	// a value): one with spaces at its ends, one appended to a backend's
	// field.
	route := `"Transforms": [{"ResponseHeader": "X-Lead", "Set": " lead\t", "When": "Always"},
		{"ResponseHeader": "X-B", "Append": " more", "When": "Always"}]`
	cfg := simpleConfig(map[string]string{"d1": "http://" + ln.Addr().String()}, "", route, "")
	var taken atomic.Int64
	h := newHarness(t, mustParse(t, cfg), withHooks(&testHooks{onDirect: func() { taken.Add(1) }, onResponse: onResponse}))
	own, nethttp := dialFront(t, ownLoopFront(t, h.p)), dialFront(t, strings.TrimPrefix(h.front.URL, "http://"))
	always := []string{"X-Lead: lead", "Server: srv", "Content-Length: 2"}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			modify.Store(&c.modify)
			before := taken.Load()
			got := own.head(t)
			if taken.Load() == before {
				t.Fatal("the direct path did not take it")
			}
			want := nethttp.head(t)
			if !slices.Equal(got, want) {
				t.Fatalf("own loop differs from net/http's server:\nown loop: %q\nnet/http: %q", got, want)
			}
			for _, l := range append(c.want, always...) {
				if !slices.Contains(got, l) {
					t.Errorf("no line %q in %q", l, got)
				}
			}
		})
	}
}

// rawFront is a keep-alive connection to a front, read byte for byte.
type rawFront struct {
	c  net.Conn
	br *bufio.Reader
}

func dialFront(t *testing.T, addr string) *rawFront {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &rawFront{c, bufio.NewReader(c)}
}

// head sends a GET and returns its answer's status and field lines as
// they came, but the Date and the trace id, reading the body after them.
func (f *rawFront) head(t *testing.T) []string {
	t.Helper()
	if _, err := io.WriteString(f.c, "GET /p HTTP/1.1\r\nHost: front\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	var lines []string
	n := -1
	for {
		l, err := f.br.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasSuffix(l, "\r\n") {
			t.Fatalf("line %q without CRLF", l)
		}
		l = strings.TrimSuffix(l, "\r\n")
		if l == "" {
			break
		}
		if v, ok := strings.CutPrefix(l, "Content-Length: "); ok {
			if n, err = strconv.Atoi(v); err != nil {
				t.Fatal(err)
			}
		}
		if strings.HasPrefix(l, "Date: ") || strings.HasPrefix(l, forwarded.TraceHeader+": ") {
			continue
		}
		lines = append(lines, l)
	}
	if n < 0 {
		t.Fatalf("no Content-Length in %q", lines)
	}
	if _, err := io.CopyN(io.Discard, f.br, int64(n)); err != nil {
		t.Fatal(fmt.Errorf("body: %w", err))
	}
	return lines
}
