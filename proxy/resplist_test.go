package proxy

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/tether-proxy/tether/proxy/forwarded"
	"github.com/tether-proxy/tether/test/testutil"
)

const listedDate = "Tue, 01 Dec 2026 12:00:00 GMT"

// listedAnswers are backend answers, by path, of the shapes a lean head
// comes in: the race's two (a raw backend's, net/http's), fields named
// again apart and out of order, more fields than a short sort takes, no
// Content-Type (the head waits for the body's first bytes, or for the
// handler's end when there are none), a backend's own trace id field,
// names to canonicalise, values to trim, hop-by-hop fields, a closing
// connection, an encoding the lean transport does not undo, other
// statuses, and a field the WAF rule below refuses.
var listedAnswers = func() map[string]string {
	many := "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n"
	for i := 19; i >= 0; i-- {
		many += fmt.Sprintf("X-F%02d: v%d\r\n", i, i)
		if i == 7 {
			many += "X-F13: again\r\n"
		}
	}
	many += "Content-Type: text/plain\r\n\r\nok"
	return map[string]string{
		"/raw":      "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Type: application/octet-stream\r\nDate: " + listedDate + "\r\n\r\nok",
		"/nethttp":  "HTTP/1.1 200 OK\r\nServer: Kestrel\r\nContent-Type: application/octet-stream\r\nContent-Length: 2\r\nDate: " + listedDate + "\r\n\r\nok",
		"/repeat":   "HTTP/1.1 200 OK\r\nSet-Cookie: a=1\r\nX-Z: z\r\nContent-Length: 2\r\nSet-Cookie: b=2\r\nX-A: a\r\nContent-Type: text/plain\r\nSet-Cookie: c=3\r\nX-A: a2\r\n\r\nok",
		"/many":     many,
		"/sniff":    "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nX-A: a\r\n\r\n<html",
		"/empty":    "HTTP/1.1 200 OK\r\nX-B: b\r\nContent-Length: 0\r\nX-A: a\r\n\r\n",
		"/trace":    "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nX-Tether-Trace-Id: backend\r\nX-E: 5\r\nContent-Type: text/plain\r\n\r\nok",
		"/lower":    "HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\nx-lower-case: v\r\nCONTENT-LENGTH: 2\r\nx-tether-trace-id: backend\r\n\r\nok",
		"/spaces":   "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nX-A:   padded  \r\nX-Tab:\tt\t\r\nX-Empty:\r\nContent-Type: text/plain\r\n\r\nok",
		"/hop":      "HTTP/1.1 200 OK\r\nConnection: X-Hop\r\nX-Hop: 1\r\nKeep-Alive: timeout=5\r\nContent-Length: 2\r\nX-A: a\r\nContent-Type: text/plain\r\n\r\nok",
		"/close":    "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\nX-A: a\r\nContent-Type: text/plain\r\n\r\nok",
		"/identity": "HTTP/1.1 200 OK\r\nContent-Encoding: identity\r\nContent-Length: 2\r\nX-A: a\r\n\r\nok",
		"/404":      "HTTP/1.1 404 Not Found\r\nContent-Length: 2\r\nX-A: a\r\nContent-Type: text/plain\r\n\r\nno",
		"/299":      "HTTP/1.1 299 Custom\r\nContent-Length: 2\r\nX-A: a\r\n\r\nok",
		"/leak":     "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nX-Leak: secret\r\nContent-Type: text/plain\r\n\r\nok",
		"/http10":   "HTTP/1.0 200 OK\r\nContent-Length: 2\r\nX-A: a\r\nContent-Type: text/plain\r\nConnection: keep-alive\r\n\r\nok",
		// Asked for with a query ReverseProxy re-encodes: its path, not
		// the direct one, on a lean connection all the same.
		"/rp": "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nX-Q: q\r\nContent-Type: text/plain\r\n\r\nok",
	}
}()

// listedBackend answers each request with its path's listedAnswers entry
// and closes after a "Connection: close" one.
func listedBackend(t *testing.T) string {
	t.Helper()
	s := testutil.NewRawServer(t, func(_ int, c net.Conn, br *bufio.Reader) {
		for {
			req, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			answer := listedAnswers[req.URL.Path]
			if _, err := io.WriteString(c, answer); err != nil || strings.Contains(answer, "Connection: close") {
				return
			}
		}
	})
	return s.URL() + "/"
}

var listedPaths = func() []string {
	var ps []string
	for p := range listedAnswers {
		if p != "/leak" && p != "/rp" {
			ps = append(ps, p)
		}
	}
	slices.Sort(ps)
	// Right after a head the lean parser leaves to net/http: the
	// container it did not fill goes back to its pool.
	i := slices.Index(ps, "/http10")
	return slices.Insert(ps, i+1, "/rp?a;b")
}()

// TestDirectResponseFieldsListed: with nothing that reads a response's
// fields between the lean transport and the own loop's writer (no
// response transform or hook, no WAF response inspection, an affinity
// key that is not sent again), every head shape of listedAnswers reaches
// the client byte for byte as net/http's server writes the same proxy's
// answer: every field, in net/http's order, each value as it writes it,
// one Date; on keep-alive connections whose answers alternate between
// shapes. And what does read the fields sees them all: a hook, a
// response transform, affinity attaching its cookie, a WAF rule on a
// response field.
func TestDirectResponseFieldsListed(t *testing.T) {
	backend := listedBackend(t)
	compare := func(t *testing.T, h *harness, paths []string, req func(path string) string) {
		t.Helper()
		own := []*rawFront{dialFront(t, ownLoopFront(t, h.p)), dialFront(t, ownLoopFront(t, h.p))}
		nethttp := dialFront(t, strings.TrimPrefix(h.front.URL, "http://"))
		for round := range 2 {
			for i, path := range paths {
				f := own[(i+round)%2]
				got, err := f.exchange(req(path))
				if err != nil {
					t.Fatalf("%s: own loop: %v", path, err)
				}
				want, err := nethttp.exchange(req(path))
				if err != nil {
					t.Fatalf("%s: net/http: %v", path, err)
				}
				if !slices.Equal(got, want) {
					t.Fatalf("%s: own loop differs from net/http's server:\nown loop: %q\nnet/http: %q", path, got, want)
				}
				if strings.HasPrefix(path, "/rp") && !slices.Contains(got, "X-Q: q") {
					t.Fatalf("%s: no X-Q in %q", path, got)
				}
			}
			slices.Reverse(paths)
		}
	}
	plain := func(path string) string { return "GET " + path + " HTTP/1.1\r\nHost: front\r\n\r\n" }

	t.Run("listed", func(t *testing.T) {
		var taken atomic.Int64
		cfg := simpleConfig(map[string]string{"d1": backend}, "", "", "")
		h := newHarness(t, mustParse(t, cfg), withHooks(&testHooks{onDirect: func() { taken.Add(1) }}))
		compare(t, h, slices.Clone(listedPaths), plain)
		if n, want := taken.Load(), int64(4*(len(listedPaths)-1)); n != want {
			t.Fatalf("the direct path took %d requests, want %d", n, want)
		}
	})

	t.Run("a hook and a transform read the fields", func(t *testing.T) {
		var mu sync.Mutex
		seen := map[string]http.Header{}
		onResponse := func(res *http.Response) {
			mu.Lock()
			seen[res.Request.URL.Path] = res.Header.Clone()
			mu.Unlock()
		}
		route := `"Transforms": [{"ResponseHeader": "X-A", "Append": "more", "When": "Always"}]`
		cfg := simpleConfig(map[string]string{"d1": backend}, "", route, "")
		h := newHarness(t, mustParse(t, cfg), withHooks(&testHooks{onResponse: onResponse}))
		compare(t, h, slices.Clone(listedPaths), plain)
		for _, path := range listedPaths {
			if path == "/rp?a;b" {
				path = "/rp"
			}
			res, err := http.ReadResponse(bufio.NewReader(strings.NewReader(listedAnswers[path])), nil)
			if err != nil {
				t.Fatal(err)
			}
			want := res.Header
			if path == "/hop" || path == "/http10" {
				for _, k := range []string{"Connection", "X-Hop", "Keep-Alive"} { // hop-by-hop
					delete(want, k)
				}
			}
			want["X-A"] = append(want["X-A"], "more") // the transform ran before the hook
			for k, vs := range want {
				for i, v := range vs {
					vs[i] = strings.Trim(v, " \t")
				}
				want[k] = vs
			}
			mu.Lock()
			got := seen[path]
			mu.Unlock()
			if got := sortedFields(got); !slices.Equal(got, sortedFields(want)) {
				t.Errorf("%s: the hook saw %q, want %q", path, got, sortedFields(want))
			}
		}
	})

	t.Run("affinity attaches its key", func(t *testing.T) {
		cluster := `"SessionAffinity": { "Enabled": true, "Policy": "HashCookie", "AffinityKeyName": "aff" }`
		cfg := simpleConfig(map[string]string{"d1": backend}, cluster, "", "")
		h := newHarness(t, mustParse(t, cfg), nil)
		f := dialFront(t, ownLoopFront(t, h.p))
		lines, err := f.exchange(plain("/repeat"))
		if err != nil {
			t.Fatal(err)
		}
		var key string
		for _, l := range lines {
			if v, ok := strings.CutPrefix(l, "Set-Cookie: aff="); ok {
				key, _, _ = strings.Cut(v, ";")
			}
		}
		for _, l := range []string{"Set-Cookie: a=1", "Set-Cookie: b=2", "Set-Cookie: c=3", "X-A: a", "X-A: a2", "X-Z: z"} {
			if !slices.Contains(lines, l) {
				t.Fatalf("no %q in the first answer %q", l, lines)
			}
		}
		if key == "" {
			t.Fatalf("no affinity cookie in the first answer %q", lines)
		}
		// With the key, nothing is attached: the listed path, the same
		// bytes as net/http's server writes.
		withKey := func(path string) string {
			return "GET " + path + " HTTP/1.1\r\nHost: front\r\nCookie: aff=" + key + "\r\n\r\n"
		}
		compare(t, h, slices.Clone(listedPaths), withKey)
	})

	t.Run("a WAF rule reads a response field", func(t *testing.T) {
		rule := filepath.Join(t.TempDir(), "leak.conf")
		if err := os.WriteFile(rule, []byte("SecRule RESPONSE_HEADERS:X-Leak \"@streq secret\" \"id:10020,phase:3,deny,status:403,log,msg:'leak'\"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		top := `"Waf": {"Mode": "Prevention", "InspectResponses": true, "Rules": [` + strconv.Quote(rule) + `]}`
		cfg := simpleConfig(map[string]string{"d1": backend}, "", "", top)
		h := newHarness(t, mustParse(t, cfg), nil)
		f := dialFront(t, ownLoopFront(t, h.p))
		for _, c := range []struct {
			path   string
			status string
		}{{"/leak", "HTTP/1.1 403 Forbidden"}, {"/raw", "HTTP/1.1 200 OK"}, {"/leak", "HTTP/1.1 403 Forbidden"}} {
			lines, err := f.exchange(plain(c.path))
			if err != nil {
				t.Fatal(err)
			}
			if lines[0] != c.status {
				t.Fatalf("%s: %q, want %s", c.path, lines, c.status)
			}
		}
	})
}

// exchange sends req and returns its answer's status line and field
// lines as they came (a Date of the server's and the trace id's value
// replaced by a placeholder, a backend's Date kept), reading the body
// after them.
func (f *rawFront) exchange(req string) ([]string, error) {
	if _, err := io.WriteString(f.c, req); err != nil {
		return nil, err
	}
	var lines []string
	n := -1
	for {
		l, err := f.br.ReadString('\n')
		if err != nil {
			return lines, err
		}
		if !strings.HasSuffix(l, "\r\n") {
			return lines, fmt.Errorf("line %q without CRLF", l)
		}
		l = strings.TrimSuffix(l, "\r\n")
		if l == "" {
			break
		}
		if v, ok := strings.CutPrefix(l, "Content-Length: "); ok {
			if n, err = strconv.Atoi(v); err != nil {
				return lines, err
			}
		}
		if strings.HasPrefix(l, "Date: ") && l != "Date: "+listedDate {
			l = "Date: (the server's)"
		}
		if v, ok := strings.CutPrefix(l, forwarded.TraceHeader+": "); ok && len(v) == 32 {
			l = forwarded.TraceHeader + ": (the trace id)"
		}
		lines = append(lines, l)
	}
	if n < 0 {
		return lines, fmt.Errorf("no Content-Length in %q", lines)
	}
	if _, err := io.CopyN(io.Discard, f.br, int64(n)); err != nil {
		return lines, fmt.Errorf("body: %w", err)
	}
	return lines, nil
}
