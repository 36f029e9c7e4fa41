package proxy

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/tether-proxy/tether/proxy/forwarded"
	"github.com/tether-proxy/tether/test/testutil"
)

// respFieldsBackend answers each request with the raw answer its path
// names (respFieldsAnswers); "/cut" announces more body than it sends and
// closes.
func respFieldsBackend(t *testing.T) string {
	t.Helper()
	s := testutil.NewRawServer(t, func(_ int, c net.Conn, br *bufio.Reader) {
		for {
			req, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			if _, err := io.WriteString(c, respFieldsAnswers[req.URL.Path]); err != nil || req.URL.Path == "/cut" {
				return
			}
		}
	})
	return s.URL() + "/"
}

var respFieldsAnswers = map[string]string{
	"/a":    "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nX-A: 1\r\nX-Multi: a\r\nX-Multi: b\r\nContent-Type: text/plain\r\n\r\nok",
	"/b":    "HTTP/1.1 200 OK\r\nContent-Length: 3\r\nX-B: 2\r\nContent-Type: text/html\r\nServer: b\r\n\r\nyes",
	"/hint": "HTTP/1.1 103 Early Hints\r\nLink: </s.css>; rel=preload\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\nX-C: 3\r\n\r\nok",
	"/cut":  "HTTP/1.1 200 OK\r\nContent-Length: 10\r\nX-D: 4\r\nContent-Type: text/plain\r\n\r\nok",
	// A backend's own trace id field, which tether's replaces.
	"/trace": "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nX-Tether-Trace-Id: backend\r\nX-E: 5\r\nContent-Type: text/plain\r\n\r\nok",
}

// respFieldsWant is each answer's fields at the client (Date and the
// trace id aside), with the route's X-Via; a 103's fields are the 103's
// alone.
var respFieldsWant = map[string]http.Header{
	"/a":     {"Content-Length": {"2"}, "X-A": {"1"}, "X-Multi": {"a", "b"}, "Content-Type": {"text/plain"}, "X-Via": {"tether"}},
	"/b":     {"Content-Length": {"3"}, "X-B": {"2"}, "Content-Type": {"text/html"}, "Server": {"b"}, "X-Via": {"tether"}},
	"/hint":  {"Content-Length": {"2"}, "X-C": {"3"}, "X-Via": {"tether"}, "Content-Type": {"text/plain; charset=utf-8"}},
	"/trace": {"Content-Length": {"2"}, "X-E": {"5"}, "Content-Type": {"text/plain"}, "X-Via": {"tether"}},
}

// TestDirectResponseFieldsKeepAlive: a backend's fields, a field the
// route's transform adds and the trace id (in place of the backend's
// field of its name) reach the client exactly, and
// nothing of an earlier response does, on keep-alive connections served
// side by side (the response header maps the lean transport and the own
// loop reuse are handed from one to the other), after a 103 whose fields
// go out with it alone, and after a response cut short; under the own
// HTTP/1.1 loop and net/http's server alike.
func TestDirectResponseFieldsKeepAlive(t *testing.T) {
	route := `"Transforms": [{"ResponseHeader": "X-Via", "Append": "tether", "When": "Always"}]`
	cfg := simpleConfig(map[string]string{"d1": respFieldsBackend(t)}, "", route, "")
	var direct atomic.Int64
	h := newHarness(t, mustParse(t, cfg), withHooks(&testHooks{onDirect: func() { direct.Add(1) }}))
	fronts := map[string]string{"own": ownLoopFront(t, h.p), "nethttp": strings.TrimPrefix(h.front.URL, "http://")}
	for name, addr := range fronts {
		t.Run(name, func(t *testing.T) {
			var wg sync.WaitGroup
			for i := range 4 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					paths := []string{"/a", "/b", "/hint", "/a", "/trace", "/hint", "/b", "/b", "/a"}
					paths = append(paths[i:], paths[:i]...)
					for range 5 {
						if err := respFieldsExchange(addr, paths); err != nil {
							t.Error(err)
							return
						}
					}
				}()
			}
			wg.Wait()
			// A response cut short, then the next connection's responses.
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if _, err := io.WriteString(c, "GET /cut HTTP/1.1\r\nHost: front\r\n\r\n"); err != nil {
				t.Fatal(err)
			}
			// The head never leaves: both servers drop what they
			// hold of a response the handler aborted, and close.
			if b, err := io.ReadAll(c); err != nil || len(b) != 0 {
				t.Fatalf("cut response: %q, %v; want the connection closed with nothing", b, err)
			}
			if err := respFieldsExchange(addr, []string{"/b", "/a", "/hint"}); err != nil {
				t.Fatal(err)
			}
		})
	}
	if direct.Load() == 0 {
		t.Fatal("no request took the direct path")
	}
}

// respFieldsExchange sends paths on one connection to addr, one after
// another, and checks each answer's status, fields and body.
func respFieldsExchange(addr string, paths []string) error {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return err
	}
	defer c.Close()
	br := bufio.NewReader(c)
	for _, path := range paths {
		if _, err := fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: front\r\n\r\n", path); err != nil {
			return err
		}
		res, err := http.ReadResponse(br, nil)
		if err != nil {
			return fmt.Errorf("%s: %v", path, err)
		}
		if path == "/hint" {
			if res.StatusCode != http.StatusEarlyHints || !reflect.DeepEqual(res.Header, http.Header{"Link": {"</s.css>; rel=preload"}}) {
				return fmt.Errorf("%s: first answer %d %v, want 103 with its Link alone", path, res.StatusCode, res.Header)
			}
			if res, err = http.ReadResponse(br, nil); err != nil {
				return fmt.Errorf("%s: %v", path, err)
			}
		}
		body, err := io.ReadAll(res.Body)
		if err != nil {
			return fmt.Errorf("%s: body: %v", path, err)
		}
		got := res.Header.Clone()
		for _, k := range []string{"Date", forwarded.TraceHeader} {
			if vs := got[k]; len(vs) != 1 || vs[0] == "" || vs[0] == "backend" {
				return fmt.Errorf("%s: %s %q, want one value, tether's", path, k, vs)
			}
			delete(got, k)
		}
		want := respFieldsWant[path]
		if res.StatusCode != 200 || !reflect.DeepEqual(got, want) {
			return fmt.Errorf("%s: %d %v, want 200 %v", path, res.StatusCode, sortedFields(got), sortedFields(want))
		}
		answer := respFieldsAnswers[path]
		if want := answer[strings.LastIndex(answer, "\r\n\r\n")+4:]; string(body) != want {
			return fmt.Errorf("%s: body %q, want %q", path, body, want)
		}
	}
	return nil
}

func sortedFields(h http.Header) []string {
	var out []string
	for k, vs := range h {
		out = append(out, k+": "+strings.Join(vs, ", "))
	}
	slices.Sort(out)
	return out
}
