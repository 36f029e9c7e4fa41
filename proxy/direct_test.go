package proxy

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"net/textproto"
	"os"
	"os/exec"
	"reflect"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tether-proxy/tether/test/testutil"
)

// The direct path must be indistinguishable from httputil.ReverseProxy,
// which stays the known answer: every case goes through two proxies over
// the same backend, one with the direct path and one without, and what
// the backend received and what the client got must be the same.

// seen is what a backend or a client observed of one exchange, without
// what differs per request by design (the trace id, Date).
type seen struct {
	method, uri, host string
	header            http.Header
	status            int
	body              string
	trailer           http.Header
	info              []string // 1xx responses
	err               string
}

func comparable(h http.Header) http.Header {
	out := http.Header{}
	for k, vs := range h {
		switch k {
		case "Traceparent", "Date", "X-Tether-Trace-Id", "Tracestate":
			continue
		}
		out[k] = vs
	}
	return out
}

func TestDirectPathMatchesReverseProxy(t *testing.T) {
	var mu sync.Mutex
	var last seen
	mux := http.NewServeMux()
	record := func(r *http.Request) {
		mu.Lock()
		last = seen{method: r.Method, uri: r.RequestURI, host: r.Host, header: comparable(r.Header)}
		mu.Unlock()
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		record(r)
		w.Header().Set("Content-Type", "text/plain")
		_, _ = io.WriteString(w, "hello "+r.URL.RawQuery)
	})
	mux.HandleFunc("/hop", func(w http.ResponseWriter, r *http.Request) {
		record(r)
		w.Header().Set("Connection", "X-B")
		w.Header().Set("X-B", "hop")
		w.Header().Set("Keep-Alive", "timeout=5")
		w.Header().Set("Proxy-Authenticate", "Basic")
		w.Header().Add("Set-Cookie", "a=1")
		w.Header().Add("Set-Cookie", "b=2")
		w.Header().Add("vary", "Accept")
		_, _ = io.WriteString(w, "hop")
	})
	mux.HandleFunc("/early", func(w http.ResponseWriter, r *http.Request) {
		record(r)
		w.Header().Set("Link", "</style.css>; rel=preload")
		w.WriteHeader(http.StatusEarlyHints)
		w.Header().Del("Link")
		_, _ = io.WriteString(w, "after hints")
	})
	mux.HandleFunc("/trailers", func(w http.ResponseWriter, r *http.Request) {
		record(r)
		w.Header().Set("Trailer", "X-Sum")
		_, _ = io.WriteString(w, "body")
		w.Header().Set("X-Sum", "42")
		w.Header().Set(http.TrailerPrefix+"X-Late", "late")
	})
	mux.HandleFunc("/sse", func(w http.ResponseWriter, r *http.Request) {
		record(r)
		w.Header().Set("Content-Type", "Text/Event-Stream; charset=utf-8")
		for i := range 3 {
			fmt.Fprintf(w, "data: %d\n\n", i)
			w.(http.Flusher).Flush()
		}
	})
	mux.HandleFunc("/stream", func(w http.ResponseWriter, r *http.Request) {
		record(r)
		_, _ = io.WriteString(w, "part one, ")
		w.(http.Flusher).Flush()
		_, _ = io.WriteString(w, "part two")
	})
	big := strings.Repeat("0123456789abcdef", 200<<10/16) // 200 KiB: the large copy buffer
	mux.HandleFunc("/big", func(w http.ResponseWriter, r *http.Request) {
		record(r)
		w.Header().Set("Content-Length", fmt.Sprint(len(big)))
		_, _ = io.WriteString(w, big)
	})
	mux.HandleFunc("/status/", func(w http.ResponseWriter, r *http.Request) {
		record(r)
		var code int
		fmt.Sscan(strings.TrimPrefix(r.URL.Path, "/status/"), &code)
		w.Header().Set("Etag", `"v1"`)
		w.WriteHeader(code)
		_, _ = io.WriteString(w, "status body")
	})
	b := newBackend(t, mux.ServeHTTP)

	route := `"Transforms": [{"RequestHeader": "X-Env", "Append": "prod"}, {"ResponseHeader": "X-Via", "Append": "tether", "When": "Always"}]`
	cluster := `"SessionAffinity": {"Enabled": true, "Policy": "HashCookie", "AffinityKeyName": "aff"}`
	cfg := simpleConfig(map[string]string{"d1": b.URL}, cluster, route, "")
	var taken atomic.Int64
	withDirect := newHarness(t, mustParse(t, cfg), withHooks(&testHooks{onDirect: func() { taken.Add(1) }}))
	without := newHarness(t, mustParse(t, cfg), withHooks(&testHooks{noDirect: true}))

	do := func(front, method, path string, hdr http.Header) seen {
		req, err := http.NewRequest(method, front+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range hdr {
			req.Header[k] = v
		}
		var s seen
		req = req.WithContext(httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{
			Got1xxResponse: func(code int, h textproto.MIMEHeader) error {
				s.info = append(s.info, fmt.Sprintf("%d %v", code, h))
				return nil
			},
		}))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			s.err = err.Error()
			return s
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			s.err = "body: " + err.Error()
		}
		mu.Lock()
		got := last
		last = seen{}
		mu.Unlock()
		s.method, s.uri, s.host, s.header = got.method, got.uri, got.host, got.header
		s.status, s.body, s.trailer = resp.StatusCode, string(body), resp.Trailer
		// The two fronts differ only in their address, which forwarded
		// fields carry.
		hostport := strings.TrimPrefix(front, "http://")
		_, port, _ := net.SplitHostPort(hostport)
		norm := func(v any) string {
			return strings.ReplaceAll(strings.ReplaceAll(fmt.Sprint(v), hostport, "FRONT"), "["+port+"]", "[PORT]")
		}
		s.header = http.Header{"backend": {norm(got.header)}, "client": {norm(comparable(resp.Header))}}
		return s
	}

	cases := []struct {
		name, method, path string
		hdr                http.Header
		direct             bool
	}{
		{"plain GET", "GET", "/p?x=1&y=%20", nil, true},
		{"hop-by-hop and spoofed forwarding fields", "GET", "/p", http.Header{
			"Connection": {"X-Hop, keep-alive"}, "X-Hop": {"1"}, "Keep-Alive": {"timeout=5"},
			"Proxy-Authorization": {"Basic x"}, "Te": {"trailers"}, "X-Forwarded-For": {"6.6.6.6"},
			"Forwarded": {"for=evil"}, "X-Forwarded-Host": {"evil"}, "X-Forwarded-Proto": {"https"},
			"X-Multi": {"a", "b"}, "X-Env": {"client"}}, true},
		{"spoofable fields", "GET", "/p", http.Header{
			"X-Real-Ip": {"6.6.6.6"}, "True-Client-Ip": {"6.6.6.6"}, "X-Forwarded-Prefix": {"/evil"},
			"Forwarded-For": {"6.6.6.6"}, "X-Env": {"client"}}, true},
		{"spoofable fields and underscore spellings", "GET", "/p", http.Header{
			"Client-Ip": {"6.6.6.6"}, "X_Forwarded_For": {"6.6.6.6"}, "X_Real_Ip": {"6.6.6.6"},
			"Transfer_Encoding": {"chunked"}, "X_Custom": {"kept"}}, true},
		{"no User-Agent", "GET", "/p", http.Header{"User-Agent": {""}}, true},
		{"query ReverseProxy re-encodes", "GET", "/p?a=1;b=2", nil, false},
		{"bad escape in the query", "GET", "/p?a=%zz", nil, false},
		{"response hop-by-hop fields", "GET", "/hop", nil, true},
		{"103 Early Hints", "GET", "/early", nil, true},
		{"trailers, announced and not", "GET", "/trailers", http.Header{"Te": {"trailers"}}, true},
		{"event stream", "GET", "/sse", nil, true},
		{"streamed body of unknown length", "GET", "/stream", nil, true},
		{"HEAD", "HEAD", "/p", nil, true},
		{"200 KiB body", "GET", "/big", nil, true},
		{"204", "GET", "/status/204", nil, true},
		{"304", "GET", "/status/304", http.Header{"If-None-Match": {`"v1"`}}, true},
		{"500", "GET", "/status/500", nil, true},
		{"POST without a body", "POST", "/p", nil, true},
		{"DELETE", "DELETE", "/p", nil, true},
		{"Upgrade goes to ReverseProxy", "GET", "/p", http.Header{"Upgrade": {"websocket"}, "Connection": {"Upgrade"}}, false},
		{"session cookie", "GET", "/p", http.Header{"Cookie": {"other=1"}}, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before := taken.Load()
			got := do(withDirect.front.URL, c.method, c.path, c.hdr)
			if took := taken.Load() > before; took != c.direct {
				t.Fatalf("direct path took it: %v, want %v", took, c.direct)
			}
			want := do(without.front.URL, c.method, c.path, c.hdr)
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("direct path differs from ReverseProxy:\ndirect:       %+v\nReverseProxy: %+v", got, want)
			}
		})
	}
}

// A backend that breaks off a body, one that answers garbage, and one
// that is not there: the client sees the same from both paths, and the
// access log the same status.
func TestDirectPathFailuresMatchReverseProxy(t *testing.T) {
	raw := testutil.NewRawServer(t, func(_ int, c net.Conn, br *bufio.Reader) {
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		switch req.URL.Path {
		case "/cut":
			_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc")
		case "/garbage":
			_, _ = io.WriteString(c, "NOT HTTP AT ALL\r\n\r\n")
		case "/smuggle":
			_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabcd")
		}
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gone := "http://" + ln.Addr().String()
	ln.Close()
	for _, c := range []struct{ name, addr, path string }{
		{"body cut short", raw.URL(), "/cut"},
		{"not HTTP", raw.URL(), "/garbage"},
		{"two Content-Lengths", raw.URL(), "/smuggle"},
		{"nobody listening", gone, "/"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := mustParse(t, simpleConfig(map[string]string{"d1": c.addr}, "", "", ""))
			results := map[bool]string{}
			for _, direct := range []bool{true, false} {
				var taken atomic.Int64
				h := newHarness(t, cfg, withHooks(&testHooks{onDirect: func() { taken.Add(1) }, noDirect: !direct}))
				resp, err := http.Get(h.front.URL + c.path)
				var s string
				if err != nil {
					s = "error"
				} else {
					body, rerr := io.ReadAll(resp.Body)
					resp.Body.Close()
					s = fmt.Sprintf("%d %q body error: %v", resp.StatusCode, body, rerr != nil)
				}
				lines := h.accessLines(t)
				var statuses []string
				for _, l := range lines {
					statuses = append(statuses, fmt.Sprint(l["status"]))
				}
				sort.Strings(statuses)
				results[direct] = s + " access " + strings.Join(statuses, ",")
				if direct && taken.Load() != 1 {
					t.Fatalf("direct path took %d requests, want 1", taken.Load())
				}
			}
			if results[true] != results[false] {
				t.Fatalf("direct: %s\nReverseProxy: %s", results[true], results[false])
			}
		})
	}
}

// An HTTP/2 request without a body (its stream ended with the headers)
// takes the direct path too, though net/http gives it a Body that is not
// http.NoBody; one with a body goes through ReverseProxy and its body
// arrives whole. Both answer as ReverseProxy does.
func TestDirectPathTakesHTTP2RequestsWithoutABody(t *testing.T) {
	b := newBackend(t, func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		w.Header().Set("X-Got", fmt.Sprintf("%s %s %d %q", r.Method, r.Proto, r.ContentLength, body))
		_, _ = io.WriteString(w, "ok")
	})
	cfg := mustParse(t, simpleConfig(map[string]string{"d1": b.URL}, "", "", ""))
	results := map[bool][]string{}
	for _, direct := range []bool{true, false} {
		var taken atomic.Int64
		h := newHarness(t, cfg, withHooks(&testHooks{onDirect: func() { taken.Add(1) }, noDirect: !direct}))
		front := httptest.NewUnstartedServer(h.p)
		front.Config.Protocols = new(http.Protocols)
		front.Config.Protocols.SetUnencryptedHTTP2(true)
		front.Start()
		t.Cleanup(front.Close)
		tr := &http.Transport{Protocols: new(http.Protocols)}
		tr.Protocols.SetUnencryptedHTTP2(true)
		t.Cleanup(tr.CloseIdleConnections)
		client := &http.Client{Transport: tr}
		for _, c := range []struct {
			method, body string
			direct       bool
		}{{"GET", "", true}, {"DELETE", "", true}, {"POST", "payload", false}} {
			var rd io.Reader
			if c.body != "" {
				rd = strings.NewReader(c.body)
			}
			req, _ := http.NewRequest(c.method, front.URL+"/x", rd)
			before := taken.Load()
			resp, err := client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.ProtoMajor != 2 {
				t.Fatalf("client spoke %s to the front, want HTTP/2", resp.Proto)
			}
			if took := taken.Load() > before; direct && took != c.direct {
				t.Fatalf("%s over HTTP/2: direct path took it: %v, want %v", c.method, took, c.direct)
			}
			results[direct] = append(results[direct], fmt.Sprintf("%s: %d %q %s", c.method, resp.StatusCode, body, resp.Header.Get("X-Got")))
		}
	}
	if !reflect.DeepEqual(results[true], results[false]) {
		t.Fatalf("direct: %q\nReverseProxy: %q", results[true], results[false])
	}
	if !strings.Contains(results[true][2], `POST HTTP/1.1 7 "payload"`) {
		t.Fatalf("the POST's body did not arrive whole: %q", results[true][2])
	}
}

// Copy buffers: 32 KiB ones, 64 KiB ones for bodies known to be longer,
// each pooled by its size without an allocation per use.
func TestBufferPoolSizes(t *testing.T) {
	var b bufferPool
	for _, c := range []struct {
		length int64
		want   int
	}{{-1, copyBufferSize}, {0, copyBufferSize}, {1 << 10, copyBufferSize}, {copyBufferSize, copyBufferSize},
		{copyBufferSize + 1, largeBufferSize}, {10 << 20, largeBufferSize}} {
		buf := b.getFor(c.length)
		if len(buf) != c.want || cap(buf) != c.want {
			t.Errorf("getFor(%d): %d bytes, want %d", c.length, len(buf), c.want)
		}
		b.Put(buf)
	}
	b.Put(make([]byte, 100)) // not one of ours: dropped
	for _, n := range []int64{1 << 10, 1 << 20} {
		b.Put(b.getFor(n))
		if a := testing.AllocsPerRun(100, func() { b.Put(b.getFor(n)) }); a > 0 {
			t.Errorf("getFor(%d)/Put: %.0f allocations, want 0", n, a)
		}
	}
}

// canonicalName is textproto.CanonicalMIMEHeaderKey (the known answer),
// on the names it knows, their other spellings and others.
func TestCanonicalName(t *testing.T) {
	for _, k := range []string{"Content-Length", "content-length", "CONTENT-LENGTH", "Content-Type", "Date", "date",
		"Server", "Set-Cookie", "set-cookie", "X-Tether-Trace-Id", "x-tether-trace-id", "Cache-Control", "Content-Encoding",
		"Etag", "ETag", "Expires", "Last-Modified", "Location", "Vary", "Accept-Ranges", "Age",
		"Strict-Transport-Security", "X-Content-Type-Options", "X-Other", "a b", "Ünicode", ""} {
		if got, want := canonicalName(k), textproto.CanonicalMIMEHeaderKey(k); got != want {
			t.Errorf("canonicalName(%q) = %q, want %q", k, got, want)
		}
	}
}

func FuzzCanonicalName(f *testing.F) {
	for _, k := range []string{"Content-Length", "content-type", "X-Tether-Trace-Id", "ETag", "a b"} {
		f.Add(k)
	}
	f.Fuzz(func(t *testing.T, k string) {
		if got, want := canonicalName(k), textproto.CanonicalMIMEHeaderKey(k); got != want {
			t.Fatalf("canonicalName(%q) = %q, want %q", k, got, want)
		}
	})
}

// copyFields is Header.Add per value, whatever the map's order.
func TestCopyFields(t *testing.T) {
	cases := []struct {
		name     string
		dst, src http.Header
	}{
		{"into empty", http.Header{}, http.Header{"A": {"1"}, "B-C": {"2", "3"}}},
		{"names that meet", http.Header{}, http.Header{"x-a": {"1"}, "X-A": {"2"}, "X-a": {"3"}, "B": {"4"}}},
		{"into a filled one", http.Header{"A": {"0"}, "Set-Cookie": {"s"}}, http.Header{"A": {"1"}, "set-cookie": {"t"}, "C": {"2"}}},
		{"nothing", http.Header{"A": {"0"}}, http.Header{}},
	}
	for _, c := range cases {
		for range 50 { // map order varies from run to run
			want := c.dst.Clone()
			for k, vs := range c.src {
				for _, v := range vs {
					want.Add(k, v)
				}
			}
			got := c.dst.Clone()
			copyFields(got, c.src)
			for k := range want {
				slices.Sort(want[k])
				slices.Sort(got[k])
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("%s: %v, want %v", c.name, got, want)
			}
		}
	}
}

// TestQueryReencodingFollowsGODEBUG: with Go's GODEBUG urlmaxqueryparams
// set, httputil.ReverseProxy re-encodes every query it forwards; the
// direct path (requests without a body) then leaves them to it, so a GET
// and a POST reach the backend with the same query, in every server mode.
// Run in a child process: GODEBUG is read at start.
func TestQueryReencodingFollowsGODEBUG(t *testing.T) {
	if want, ok := os.LookupEnv("TETHER_TEST_QUERY_WANT"); ok {
		queryReencodingChild(t, want)
		return
	}
	cases := []struct{ desc, godebug, want string }{
		{"Go's default: the query as the client sent it", "", "b=2&a=1"},
		{"urlmaxqueryparams set: re-encoded on every path", "urlmaxqueryparams=100", "a=1&b=2"},
	}
	for _, c := range cases {
		t.Run(c.desc, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run=^TestQueryReencodingFollowsGODEBUG$", "-test.count=1", "-test.v")
			cmd.Env = append(os.Environ(), "GODEBUG="+c.godebug, "TETHER_TEST_QUERY_WANT="+c.want)
			out, err := cmd.CombinedOutput()
			if err != nil || !strings.Contains(string(out), "--- PASS") {
				t.Fatalf("child with GODEBUG=%q: %v\n%s", c.godebug, err, out)
			}
		})
	}
}

func queryReencodingChild(t *testing.T, want string) {
	var mu sync.Mutex
	var got []string
	b := newBackend(t, func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, r.Method+" "+r.URL.RawQuery)
		mu.Unlock()
	})
	forEachMode(t, func(t *testing.T, m serverMode) {
		e := startMode(t, m, backendCfg(b.URL, "", "", ""), nil)
		for _, method := range []string{http.MethodGet, http.MethodPost} {
			var body io.Reader
			if method == http.MethodPost {
				body = strings.NewReader("x")
			}
			mu.Lock()
			got = nil
			mu.Unlock()
			if resp, _ := e.mustDo(method, "/q?b=2&a=1", body, nil); resp.StatusCode != 200 {
				t.Fatalf("%s: %d", method, resp.StatusCode)
			}
			mu.Lock()
			if len(got) != 1 || got[0] != method+" "+want {
				t.Errorf("the backend saw %q, want %q", got, method+" "+want)
			}
			mu.Unlock()
		}
	})
}

// TestProxySendsBodylessHTTP1OverTheLeanPath: the data path hands a
// bodyless request to an http:// destination to the cluster's lean
// transport and an upload to http.Transport (package lean's tests hold
// the transport to its rules).
func TestProxySendsBodylessHTTP1OverTheLeanPath(t *testing.T) {
	be := newBackend(t, func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		fmt.Fprintf(w, "%s %s", r.Method, b)
	})
	var trips atomic.Uint64
	h := newHarness(t, mustParse(t, simpleConfig(map[string]string{"d1": be.URL}, "", "", "")),
		withHooks(&testHooks{onLeanTrip: func() { trips.Add(1) }}))
	if h.p.rt.Load().clusters["c"].lean == nil {
		t.Fatal("cluster has no lean path")
	}
	for _, c := range []struct {
		method, body, want string
		lean               bool
	}{{"GET", "", "GET ", true}, {"DELETE", "", "DELETE ", true}, {"POST", "hello", "POST hello", false}} {
		before := trips.Load()
		var body io.Reader
		if c.body != "" {
			body = strings.NewReader(c.body)
		}
		resp, got := send(t, nil, c.method, h.front.URL+"/", body, nil)
		if resp.StatusCode != 200 || got != c.want {
			t.Fatalf("%s: %d %q, want 200 %q", c.method, resp.StatusCode, got, c.want)
		}
		if took := trips.Load() != before; took != c.lean {
			t.Fatalf("%s: lean path took it: %v, want %v", c.method, took, c.lean)
		}
	}
}

// On the own loop, the lean transport does not check again a value that
// lies in the string the loop parsed the head from, nor a name that is
// one of the parser's common ones. What a transform made of them is still
// checked and trimmed: each case changes the outgoing fields as a
// transform would, from the client's own strings, and the backend must
// receive, byte for byte, what it receives through ReverseProxy, which
// checks everything.
func TestDirectPathChecksWhatTheParserDidNot(t *testing.T) {
	var mu sync.Mutex
	var lines []string // the last head's field lines, as sent
	backend := testutil.NewRawServer(t, func(_ int, c net.Conn, br *bufio.Reader) {
		for {
			if _, err := br.ReadString('\n'); err != nil { // the request line
				return
			}
			var got []string
			for {
				l, err := br.ReadString('\n')
				if err != nil {
					return
				}
				if l == "\r\n" {
					break
				}
				got = append(got, l)
			}
			mu.Lock()
			lines = got
			mu.Unlock()
			if _, err := io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"); err != nil {
				return
			}
		}
	})

	// The client's value of X-A is "a b", its User-Agent "ua".
	clientValue := func(out *http.Request) string { return out.Header["X-A"][0] }
	knownName := func(out *http.Request) string { // the map's own key: the parser's string
		for k := range out.Header {
			if k == "User-Agent" {
				return k
			}
		}
		t.Fatal("no User-Agent")
		return ""
	}
	cases := []struct {
		name    string
		rewrite func(out *http.Request)
		direct  bool
	}{
		{"the client's fields", func(*http.Request) {}, true},
		{"a control byte appended to a client's field", func(out *http.Request) {
			out.Header["X-A"] = append(out.Header["X-A"], "x\x01y")
		}, false},
		{"a client's field copied into another name", func(out *http.Request) {
			out.Header["X-Copy"] = out.Header["X-A"]
		}, true},
		{"a client's value as a name", func(out *http.Request) {
			out.Header[clientValue(out)] = []string{"v"}
		}, false},
		{"a client's value sliced to a leading space", func(out *http.Request) {
			out.Header["X-Sliced"] = []string{clientValue(out)[1:]}
		}, true},
		{"a client's value sliced to a trailing space", func(out *http.Request) {
			out.Header["X-Sliced"] = []string{clientValue(out)[:2]}
		}, true},
		{"a client's value sliced to a space alone", func(out *http.Request) {
			out.Header["X-Sliced"] = []string{clientValue(out)[1:2]}
		}, true},
		{"a common name sliced", func(out *http.Request) {
			out.Header[knownName(out)[:4]] = []string{"v"}
		}, true},
		{"a common name sliced to nothing", func(out *http.Request) {
			out.Header[knownName(out)[:0]] = []string{"v"}
		}, false},
		{"a common name given a control byte", func(out *http.Request) {
			k := knownName(out)
			out.Header[k] = append(out.Header[k], "\x7f")
		}, false},
	}
	var rewrite atomic.Pointer[func(out *http.Request)]
	onRewrite := func(out *http.Request) { (*rewrite.Load())(out) }
	cfg := simpleConfig(map[string]string{"d1": backend.URL()}, "", "", "")
	var taken atomic.Int64
	withDirect := newHarness(t, mustParse(t, cfg), withHooks(&testHooks{onDirect: func() { taken.Add(1) }, onRewrite: onRewrite}))
	without := newHarness(t, mustParse(t, cfg), withHooks(&testHooks{noDirect: true, onRewrite: onRewrite}))
	fronts := []string{ownLoopFront(t, withDirect.p), ownLoopFront(t, without.p)}

	do := func(front string) (int, []string) {
		req, err := http.NewRequest("GET", "http://"+front+"/p", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Host = "front.example"
		req.Header.Set("User-Agent", "ua")
		req.Header.Set("X-A", "a b")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		mu.Lock()
		got := lines
		lines = nil
		mu.Unlock()
		var kept []string
		for _, l := range got {
			name, _, _ := strings.Cut(l, ":")
			switch name {
			case "Traceparent", "X-Tether-Trace-Id", "X-Forwarded-Port":
				continue // differ per request or per front
			}
			kept = append(kept, l)
		}
		sort.Strings(kept)
		return resp.StatusCode, kept
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rewrite.Store(&c.rewrite)
			before := taken.Load()
			status, got := do(fronts[0])
			if took := taken.Load() > before; took != c.direct {
				t.Fatalf("direct path took it: %v, want %v", took, c.direct)
			}
			wantStatus, want := do(fronts[1])
			if status != wantStatus || !slices.Equal(got, want) {
				t.Fatalf("direct path differs from ReverseProxy:\ndirect:       %d %q\nReverseProxy: %d %q", status, got, wantStatus, want)
			}
		})
	}
}

// Without request transforms the direct path keeps tether's own fields
// of the outgoing request (forwarding, trace context) out of the
// outgoing map and writes them beside the client's: a client field of
// one of their names must still give way to tether's as on
// ReverseProxy's path, from a trusted client and an untrusted one, with
// and without a valid traceparent, through both HTTP/1.1 loops, and on a
// retry after a failed connect (whose head is written from the map).
func TestDirectPathOwnFieldsMatchReverseProxy(t *testing.T) {
	var mu sync.Mutex
	var got http.Header
	live := newBackend(t, func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = r.Header.Clone()
		mu.Unlock()
		_, _ = io.WriteString(w, "ok")
	})
	dead := "http://" + deadAddr(t) + "/"
	const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	spoofing := http.Header{
		"X-Forwarded-Port": {"1"}, "X-Original-Host": {"evil"}, "X-Original-Url": {"/evil"},
		"X-Tether-Trace-Id": {"0123456789abcdef0123456789abcdef"}, "Tracestate": {"a=1"},
		"X-Forwarded-For": {"6.6.6.6"}, "X-Forwarded-Host": {"evil.example"}, "X-Kept": {"1", "2"},
		"User-Agent": {"client/1"},
	}
	with := func(extra http.Header) http.Header {
		h := spoofing.Clone()
		for k, vs := range extra {
			h[k] = vs
		}
		return h
	}
	// The client's fields aside or in the map: an underscore spelling,
	// Connection and Te put them in it.
	clients := map[string]http.Header{
		"spoofing":                      spoofing,
		"an underscore spelling":        with(http.Header{"X_Original_Host": {"underscore"}, "User-Agent": {""}}),
		"Connection and Te":             with(http.Header{"Connection": {"X-Hop"}, "X-Hop": {"1"}, "Te": {"trailers"}}),
		"an encoding and a range asked": with(http.Header{"Accept-Encoding": {"br"}, "Range": {"bytes=0-1"}}),
	}
	// norm leaves out what differs per request and per proxy by design:
	// the trace and span ids tether made, the front's address.
	norm := func(h http.Header, front string) string {
		tp := h.Get("Traceparent")
		parts := strings.Split(tp, "-")
		if len(h["Traceparent"]) != 1 || len(parts) != 4 {
			return fmt.Sprintf("no single valid traceparent: %q", h["Traceparent"])
		}
		_, port, _ := net.SplitHostPort(front)
		s := fmt.Sprint(h)
		s = strings.ReplaceAll(s, parts[2], "SPAN")
		if parts[1] != traceID {
			s = strings.ReplaceAll(s, parts[1], "TRACE")
		}
		s = strings.ReplaceAll(s, front, "FRONT")
		return strings.ReplaceAll(s, "["+port+"]", "[PORT]")
	}
	for _, trusted := range []bool{false, true} {
		for _, retry := range []bool{false, true} {
			for _, traceparent := range []string{"", "00-" + traceID + "-00f067aa0ba902b7-01", "bogus"} {
				for cname, client := range clients {
					name := fmt.Sprintf("trusted=%v retry=%v traceparent=%q %s", trusted, retry, traceparent, cname)
					t.Run(name, func(t *testing.T) {
						dests := map[string]string{"b-live": live.URL}
						if retry {
							dests["a-dead"] = dead
						}
						top := ""
						if trusted {
							top = `"TrustedProxies": ["127.0.0.1"]`
						}
						cfg := simpleConfig(dests, `"LoadBalancingPolicy": "FirstAlphabetical"`, "", top)
						var taken atomic.Int64
						withDirect := newHarness(t, mustParse(t, cfg), withHooks(&testHooks{onDirect: func() { taken.Add(1) }}))
						without := newHarness(t, mustParse(t, cfg), withHooks(&testHooks{noDirect: true}))
						do := func(front string) string {
							req, err := http.NewRequest("GET", "http://"+front+"/p", nil)
							if err != nil {
								t.Fatal(err)
							}
							for k, vs := range client {
								req.Header[k] = vs
							}
							if traceparent != "" {
								req.Header["Traceparent"] = []string{traceparent}
							}
							resp, err := http.DefaultClient.Do(req)
							if err != nil {
								t.Fatal(err)
							}
							body, _ := io.ReadAll(resp.Body)
							resp.Body.Close()
							if resp.StatusCode != 200 || string(body) != "ok" {
								t.Fatalf("status %d body %q, want 200 from the live backend", resp.StatusCode, body)
							}
							mu.Lock()
							defer mu.Unlock()
							return norm(got, front)
						}
						want := do(strings.TrimPrefix(without.front.URL, "http://"))
						if taken.Load() != 0 {
							t.Fatal("the direct path took a request of the proxy without it")
						}
						for _, front := range []string{strings.TrimPrefix(withDirect.front.URL, "http://"), ownLoopFront(t, withDirect.p)} {
							before := taken.Load()
							if g := do(front); g != want {
								t.Errorf("direct path differs from ReverseProxy:\ndirect:       %s\nReverseProxy: %s", g, want)
							}
							if taken.Load() == before {
								t.Error("the direct path did not take the request")
							}
						}
					})
				}
			}
		}
	}
}

// An event stream of known length is flushed write by write on the
// direct path as ReverseProxy flushes it: its Content-Type as the backend
// sent it or as a response transform made it, which the own loop's writer
// reports from its walk of the head (ScannedType). Each case's backend
// sends the first event and waits for the client to have it before it
// sends the rest.
func TestDirectPathFlushesAnEventStreamOfKnownLength(t *testing.T) {
	for _, c := range []struct{ name, ctype, route string }{
		{"the backend's type", "text/event-stream; charset=utf-8", ""},
		{"a transform's type", "text/plain", `"Transforms": [{"ResponseHeader": "Content-Type", "Set": "Text/Event-Stream"}]`},
		{"another type", "text/plain", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			const first, rest = "data: one\n\n", "data: two\n\n"
			release := make(chan struct{})
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { ln.Close() })
			go func() {
				bc, err := ln.Accept()
				if err != nil {
					return
				}
				defer bc.Close()
				if _, err := http.ReadRequest(bufio.NewReader(bc)); err != nil {
					return
				}
				fmt.Fprintf(bc, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\nContent-Type: %s\r\n\r\n%s", len(first)+len(rest), c.ctype, first)
				<-release
				io.WriteString(bc, rest)
			}()
			var taken atomic.Int64
			h := newHarness(t, mustParse(t, simpleConfig(map[string]string{"d": "http://" + ln.Addr().String() + "/"}, "", c.route, "")),
				withHooks(&testHooks{onDirect: func() { taken.Add(1) }}))
			conn, err := net.Dial("tcp", ownLoopFront(t, h.p))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			// A head or event held back would leave the reads below
			// waiting for ever: the deadline turns that into a failure.
			conn.SetReadDeadline(time.Now().Add(30 * time.Second))
			if _, err := io.WriteString(conn, "GET /events HTTP/1.1\r\nHost: front.example\r\n\r\n"); err != nil {
				t.Fatal(err)
			}
			stream := c.ctype != "text/plain" || c.route != ""
			if !stream {
				close(release) // nothing flushes before the body's end
			}
			resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			if stream && !strings.EqualFold(resp.Header.Get("Content-Type"), "text/event-stream") && !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream;") {
				t.Fatalf("Content-Type %q, want an event stream", resp.Header.Get("Content-Type"))
			}
			got := make([]byte, len(first))
			if _, err := io.ReadFull(resp.Body, got); err != nil || string(got) != first {
				t.Fatalf("first event %q, %v", got, err)
			}
			if stream {
				close(release)
			}
			if b, err := io.ReadAll(resp.Body); err != nil || string(b) != rest {
				t.Fatalf("rest %q, %v", b, err)
			}
			if taken.Load() != 1 {
				t.Fatalf("the direct path took %d requests, want 1", taken.Load())
			}
		})
	}
}
