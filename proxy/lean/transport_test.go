package lean

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"net/textproto"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/tether-proxy/tether/proxy/internal/h1wire"
	"github.com/tether-proxy/tether/test/testutil"
)

// newLean is a Transport over an http.Transport that dials on its own
// (mod may change it first), with the count of the requests it took.
func newLean(t *testing.T, mod func(*http.Transport)) (*Transport, *atomic.Uint64) {
	t.Helper()
	tr := &http.Transport{DialContext: (&net.Dialer{}).DialContext}
	if mod != nil {
		mod(tr)
	}
	trips := new(atomic.Uint64)
	lt := New(tr, Options{OnTrip: func() { trips.Add(1) }})
	if lt == nil {
		t.Fatal("no lean path")
	}
	t.Cleanup(func() { lt.CloseIdleConnections(); tr.CloseIdleConnections() })
	return lt, trips
}

// do sends one request through lt and returns the response with its body
// read and closed.
func do(t *testing.T, lt *Transport, method, url string, body io.Reader, hdr http.Header) (*http.Response, string, error) {
	t.Helper()
	req, err := http.NewRequest(method, url, body)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header[k] = v
	}
	resp, err := lt.RoundTrip(req)
	if err != nil {
		return nil, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp, string(b), err
}

// doVia is do for a request without a body, through RoundTripDirect
// after PrepareDirect when direct (whose head the write's own wait
// sends), else through RoundTrip.
func doVia(t *testing.T, lt *Transport, direct bool, method, url string) (*http.Response, string, error) {
	t.Helper()
	if !direct {
		return do(t, lt, method, url, nil, nil)
	}
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	d := new(Direct)
	if !lt.PrepareDirect(req, d, context.TODO(), h1wire.Beside{}) || len(d.head) == 0 {
		t.Fatal("PrepareDirect did not write the head")
	}
	resp, err := lt.RoundTripDirect(req, d)
	if err != nil {
		return nil, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp, string(b), err
}

const okResp = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"

// Which requests the lean path takes, and that the others still work
// through http.Transport.
func TestLeanPathTakesBodylessHTTP1Only(t *testing.T) {
	var mu sync.Mutex
	peers := map[string]bool{} // backend connections, by client address
	be := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		peers[r.RemoteAddr] = true
		mu.Unlock()
		b, _ := io.ReadAll(r.Body)
		fmt.Fprintf(w, "%s %s", r.Method, b)
	}))
	t.Cleanup(be.Close)
	conns := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(peers)
	}
	lt, trips := newLean(t, nil)
	cases := []struct {
		name, method, body string
		hdr                http.Header
		lean               bool
		want               string
	}{
		{"GET", "GET", "", nil, true, "GET "},
		{"HEAD", "HEAD", "", nil, true, ""},
		{"DELETE without a body", "DELETE", "", nil, true, "DELETE "},
		{"POST with a body: the Transport streams it", "POST", "hello", nil, false, "POST hello"},
		{"Expect: 100-continue", "PUT", "x", http.Header{"Expect": {"100-continue"}}, false, "PUT x"},
		{"an upgrade request", "GET", "", http.Header{"Connection": {"Upgrade"}, "Upgrade": {"websocket"}}, false, "GET "},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before := trips.Load()
			var body io.Reader
			if c.body != "" {
				body = strings.NewReader(c.body)
			}
			resp, got, err := do(t, lt, c.method, be.URL+"/", body, c.hdr)
			if err != nil || resp.StatusCode != 200 || got != c.want {
				t.Fatalf("%v %q %v, want 200 %q", resp, got, err, c.want)
			}
			if took := trips.Load() != before; took != c.lean {
				t.Fatalf("lean path took it: %v, want %v", took, c.lean)
			}
		})
	}
	// Sequential bodyless requests share one pooled connection.
	n := conns()
	for range 20 {
		if resp, _, err := do(t, lt, "GET", be.URL+"/", nil, nil); err != nil || resp.StatusCode != 200 {
			t.Fatal(resp, err)
		}
	}
	if d := conns() - n; d > 1 {
		t.Fatalf("20 sequential GETs opened %d backend connections, want the pooled one", d)
	}
}

// A request sent on a pooled connection that the backend drops before any
// byte of a response is sent again on a new connection when its method
// allows it (http.Transport's rule); a POST is not.
func TestLeanRetriesAStalePooledConnection(t *testing.T) {
	for _, c := range []struct {
		method string
		replay bool
	}{{"GET", true}, {"HEAD", true}, {"POST", false}} {
		t.Run(c.method, func(t *testing.T) {
			be := testutil.NewRawServer(t, func(i int, conn net.Conn, br *bufio.Reader) {
				if i == 0 {
					// Answer the first request, then take the second
					// and drop the connection without a byte.
					if testutil.Answer(br, conn, okResp) {
						http.ReadRequest(br)
					}
					return
				}
				for testutil.Answer(br, conn, okResp) {
				}
			})
			lt, trips := newLean(t, nil)
			if resp, _, err := do(t, lt, c.method, be.URL()+"/", nil, nil); err != nil || resp.StatusCode != 200 {
				t.Fatalf("first request: %v %v", resp, err)
			}
			before := trips.Load()
			resp, _, err := do(t, lt, c.method, be.URL()+"/", nil, nil)
			if c.replay && (err != nil || resp.StatusCode != 200) {
				t.Fatalf("second request on the dropped connection: %v %v, want 200", resp, err)
			}
			if !c.replay && err == nil {
				t.Fatalf("second request on the dropped connection: %v, want its error", resp.Status)
			}
			if trips.Load() == before {
				t.Fatal("not the lean path")
			}
			if c.replay && be.Conns() != 2 {
				t.Fatalf("backend saw %d connections, want 2 (the retry's new one)", be.Conns())
			}
		})
	}
}

// A pooled connection the backend closed while it was idle is not used:
// even a request that may not be replayed goes out on a new connection.
func TestLeanSkipsAPooledConnectionTheBackendClosed(t *testing.T) {
	for _, direct := range []bool{false, true} {
		t.Run(fmt.Sprintf("direct=%v", direct), func(t *testing.T) { testSkipsClosed(t, direct) })
	}
}

func testSkipsClosed(t *testing.T, direct bool) {
	closed := make(chan struct{})
	be := testutil.NewRawServer(t, func(i int, conn net.Conn, br *bufio.Reader) {
		if i == 0 {
			testutil.Answer(br, conn, okResp)
			conn.Close()
			close(closed)
			return
		}
		for testutil.Answer(br, conn, okResp) {
		}
	})
	lt, _ := newLean(t, nil)
	if _, got, err := doVia(t, lt, direct, "POST", be.URL()+"/"); err != nil || got != "ok" {
		t.Fatalf("first: %q %v", got, err)
	}
	<-closed
	if resp, got, err := doVia(t, lt, direct, "POST", be.URL()+"/"); err != nil || got != "ok" || be.Conns() != 2 {
		t.Fatalf("second: %v %q %v on %d connections, want ok on a second", resp, got, err, be.Conns())
	}
}

// A pooled connection the backend resets once it has read the request
// fails with the reset as a read of the connection reports it: a request
// that may be replayed goes again on a new connection, another gets the
// error.
func TestLeanPooledConnectionResetAfterTheRequest(t *testing.T) {
	for _, c := range []struct {
		method string
		replay bool
	}{{"GET", true}, {"POST", false}} {
		t.Run(c.method, func(t *testing.T) {
			be := testutil.NewRawServer(t, func(i int, conn net.Conn, br *bufio.Reader) {
				if i > 0 {
					for testutil.Answer(br, conn, okResp) {
					}
					return
				}
				if testutil.Answer(br, conn, okResp) {
					if _, err := http.ReadRequest(br); err == nil {
						conn.(*net.TCPConn).SetLinger(0) // the close sends a reset
					}
				}
			})
			lt, _ := newLean(t, nil)
			if _, got, err := do(t, lt, c.method, be.URL()+"/", nil, nil); err != nil || got != "ok" {
				t.Fatalf("first: %q %v", got, err)
			}
			resp, got, err := do(t, lt, c.method, be.URL()+"/", nil, nil)
			if c.replay {
				if err != nil || got != "ok" || be.Conns() != 2 {
					t.Fatalf("replay: %v %q %v on %d connections, want ok on 2", resp, got, err, be.Conns())
				}
				return
			}
			var oe *net.OpError
			if err == nil || !errors.Is(err, syscall.ECONNRESET) || !errors.As(err, &oe) ||
				oe.Op != "read" || oe.Net != "tcp" || oe.Source == nil || oe.Addr == nil || !ConnBroke(err) {
				t.Fatalf("got %v %v, want the read's connection reset", resp, err)
			}
		})
	}
}

// A response head that arrives in pieces, before and after the first read
// ends the wait for the answer, reads whole, request after request.
func TestLeanReadsAHeadThatArrivesInPieces(t *testing.T) {
	parts := []string{"HTTP/1.1 200 OK\r\n", "Content-Type: text/plain\r\nContent-", "Length: 2\r\n\r\n", "ok"}
	be := testutil.NewRawServer(t, func(_ int, conn net.Conn, br *bufio.Reader) {
		for {
			if _, err := http.ReadRequest(br); err != nil {
				return
			}
			for _, p := range parts {
				if _, err := io.WriteString(conn, p); err != nil {
					return
				}
			}
		}
	})
	lt, _ := newLean(t, nil)
	for i := range 20 {
		resp, got, err := do(t, lt, "GET", be.URL()+"/", nil, nil)
		if err != nil || got != "ok" || resp.Header.Get("Content-Type") != "text/plain" {
			t.Fatalf("request %d: %v %q %v", i, resp, got, err)
		}
	}
	if be.Conns() != 1 {
		t.Fatalf("%d backend connections, want 1", be.Conns())
	}
}

// Bytes a backend sends that no request asked for (a response smuggled
// after the real one, in the same segment or later while the connection
// is idle) never answer the next request: the connection is not reused.
func TestLeanNeverReusesAConnectionWithUnaskedBytes(t *testing.T) {
	const smuggled = "HTTP/1.1 200 OK\r\nContent-Length: 8\r\n\r\nsmuggled"
	for _, c := range []struct{ later, direct bool }{{false, false}, {true, false}, {false, true}, {true, true}} {
		later := c.later
		t.Run(fmt.Sprintf("later=%v,direct=%v", later, c.direct), func(t *testing.T) {
			sent := make(chan struct{})
			be := testutil.NewRawServer(t, func(i int, conn net.Conn, br *bufio.Reader) {
				if i > 0 {
					for testutil.Answer(br, conn, okResp) {
					}
					return
				}
				if later {
					testutil.Answer(br, conn, okResp)
					io.WriteString(conn, smuggled) // while the connection is idle
				} else {
					testutil.Answer(br, conn, okResp+smuggled)
				}
				close(sent)
				io.Copy(io.Discard, br)
			})
			lt, _ := newLean(t, nil)
			if _, got, err := doVia(t, lt, c.direct, "GET", be.URL()+"/"); err != nil || got != "ok" {
				t.Fatalf("first: %q %v", got, err)
			}
			<-sent
			for range 3 {
				if resp, got, err := doVia(t, lt, c.direct, "GET", be.URL()+"/"); err != nil || resp.StatusCode != 200 || got != "ok" {
					t.Fatalf("next request got %v %q %v, want 200 ok from a new connection", resp, got, err)
				}
			}
		})
	}
}

// 1xx responses reach the request's client trace before the final one.
func TestLeanForwardsInformationalResponses(t *testing.T) {
	be := testutil.NewRawServer(t, func(_ int, conn net.Conn, br *bufio.Reader) {
		testutil.Answer(br, conn, "HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload\r\n\r\n"+okResp)
		io.Copy(io.Discard, br)
	})
	lt, trips := newLean(t, nil)
	var got []string
	var mu sync.Mutex
	ctx := httptrace.WithClientTrace(context.Background(), &httptrace.ClientTrace{
		Got1xxResponse: func(code int, hdr textproto.MIMEHeader) error {
			mu.Lock()
			got = append(got, fmt.Sprintf("%d %s", code, hdr.Get("Link")))
			mu.Unlock()
			return nil
		},
	})
	req, _ := http.NewRequestWithContext(ctx, "GET", be.URL()+"/", nil)
	resp, err := lt.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	mu.Lock()
	defer mu.Unlock()
	if resp.StatusCode != 200 || string(body) != "ok" || len(got) != 1 || got[0] != "103 </style.css>; rel=preload" {
		t.Fatalf("final %d %q, 1xx %q", resp.StatusCode, body, got)
	}
	if trips.Load() == 0 {
		t.Fatal("not the lean path")
	}
}

// Trailers and a streamed body arrive as the backend sends them.
func TestLeanStreamsAndForwardsTrailers(t *testing.T) {
	release := make(chan struct{})
	be := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Trailer", "X-Sum")
		io.WriteString(w, "first;")
		w.(http.Flusher).Flush()
		<-release
		io.WriteString(w, "second")
		w.Header().Set("X-Sum", "42")
	}))
	t.Cleanup(be.Close)
	lt, trips := newLean(t, nil)
	req, _ := http.NewRequest("GET", be.URL+"/", nil)
	resp, err := lt.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	buf := make([]byte, 6)
	if _, err := io.ReadFull(resp.Body, buf); err != nil || string(buf) != "first;" {
		t.Fatalf("first chunk before the backend finished: %q %v", buf, err)
	}
	close(release)
	rest, _ := io.ReadAll(resp.Body)
	if string(rest) != "second" || resp.Trailer.Get("X-Sum") != "42" {
		t.Fatalf("rest %q, trailer %v", rest, resp.Trailer)
	}
	if trips.Load() == 0 {
		t.Fatal("not the lean path")
	}
}

// A request cancelled while the backend is still thinking closes the
// backend connection, as http.Transport does.
func TestLeanCancelClosesTheBackendConnection(t *testing.T) {
	got, closed := make(chan struct{}), make(chan struct{})
	be := testutil.NewRawServer(t, func(_ int, conn net.Conn, br *bufio.Reader) {
		if _, err := http.ReadRequest(br); err != nil {
			return
		}
		close(got)
		io.Copy(io.Discard, br) // until the transport closes it
		close(closed)
	})
	lt, _ := newLean(t, nil)
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		req, _ := http.NewRequestWithContext(ctx, "GET", be.URL()+"/", nil)
		resp, err := lt.RoundTrip(req)
		if err == nil {
			resp.Body.Close()
		}
		errc <- err
	}()
	<-got
	cancel()
	<-errc
	select {
	case <-closed:
	case <-time.After(20 * time.Second):
		t.Fatal("backend connection still open 20 s after the request was cancelled")
	}
}

// As http.Transport: gzip is asked for and decoded when the request asks
// for no encoding; a request's own Accept-Encoding gets the bytes as sent.
func TestLeanCompressionAsTheTransport(t *testing.T) {
	var zipped bytes.Buffer
	zw := gzip.NewWriter(&zipped)
	io.WriteString(zw, "plain text")
	zw.Close()
	be := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Accept-Encoding") != "gzip" {
			io.WriteString(w, "plain text")
			return
		}
		w.Header().Set("Content-Encoding", "gzip")
		w.Write(zipped.Bytes())
	}))
	t.Cleanup(be.Close)
	lt, trips := newLean(t, nil)
	for _, c := range []struct {
		ae, want, wantCE string
	}{{"", "plain text", ""}, {"gzip", zipped.String(), "gzip"}} {
		var hdr http.Header
		if c.ae != "" {
			hdr = http.Header{"Accept-Encoding": {c.ae}}
		}
		resp, b, err := do(t, lt, "GET", be.URL+"/", nil, hdr)
		if err != nil {
			t.Fatal(err)
		}
		if b != c.want || resp.Header.Get("Content-Encoding") != c.wantCE {
			t.Fatalf("Accept-Encoding %q: body %q, Content-Encoding %q", c.ae, b, resp.Header.Get("Content-Encoding"))
		}
	}
	if trips.Load() != 2 {
		t.Fatalf("lean trips %d, want 2", trips.Load())
	}
}

// Backend response headers past the Transport's MaxResponseHeaderBytes
// fail the round trip on the lean path too.
func TestLeanBoundsResponseHeaders(t *testing.T) {
	const limit = 64 << 10 // the data path's bound
	be := testutil.NewRawServer(t, func(_ int, conn net.Conn, br *bufio.Reader) {
		testutil.Answer(br, conn, "HTTP/1.1 200 OK\r\nX-Big: "+strings.Repeat("a", limit+8192)+"\r\nContent-Length: 2\r\n\r\nok")
	})
	lt, trips := newLean(t, func(tr *http.Transport) { tr.MaxResponseHeaderBytes = limit })
	if resp, _, err := do(t, lt, "GET", be.URL()+"/", nil, nil); err == nil {
		t.Fatalf("status %d, want the round trip's error", resp.StatusCode)
	}
	if trips.Load() == 0 {
		t.Fatal("not the lean path")
	}
}

// What the lean path leaves to http.Transport, so the Transport's own
// checks and refusals (smuggling defences on the request side) apply.
func TestLeanCoversOnlyWhatItCan(t *testing.T) {
	lt := New(&http.Transport{DialContext: (&net.Dialer{}).DialContext}, Options{})
	base := func() *http.Request {
		r, _ := http.NewRequest("GET", "http://10.0.0.1:8080/x", nil)
		r.Header.Set("Accept", "*/*")
		return r
	}
	cases := []struct {
		name string
		mod  func(*http.Request)
		want bool
	}{
		{"plain GET", func(*http.Request) {}, true},
		{"https", func(r *http.Request) { r.URL.Scheme = "https" }, false},
		{"a body", func(r *http.Request) { r.Body, r.ContentLength = io.NopCloser(strings.NewReader("x")), 1 }, false},
		{"a chunked body", func(r *http.Request) { r.Body, r.ContentLength = io.NopCloser(strings.NewReader("x")), -1 }, false},
		{"trailers", func(r *http.Request) { r.Trailer = http.Header{"X-T": nil} }, false},
		{"Upgrade", func(r *http.Request) { r.Header.Set("Upgrade", "websocket") }, false},
		{"Expect", func(r *http.Request) { r.Header.Set("Expect", "100-continue") }, false},
		{"invalid method", func(r *http.Request) { r.Method = "GE T" }, false},
		{"invalid header name", func(r *http.Request) { r.Header["Bad Name"] = []string{"x"} }, false},
		{"CR LF in a value", func(r *http.Request) { r.Header["X-Evil"] = []string{"a\r\nX-Injected: 1"} }, false},
		{"NUL in a value", func(r *http.Request) { r.Header["X-Evil"] = []string{"a\x00b"} }, false},
	}
	for _, c := range cases {
		r := base()
		c.mod(r)
		if got := lt.Covers(r); got != c.want {
			t.Errorf("%s: covers = %v, want %v", c.name, got, c.want)
		}
		var d Direct
		if got := lt.PrepareDirect(r, &d, context.TODO(), h1wire.Beside{}); got != c.want {
			t.Errorf("%s: PrepareDirect = %v, want %v", c.name, got, c.want)
		}
	}
	// Settings the lean path does not take at all.
	for name, tr := range map[string]*http.Transport{
		"MaxConnectionsPerServer": {DialContext: (&net.Dialer{}).DialContext, MaxConnsPerHost: 4},
		"h2c": func() *http.Transport {
			tr := &http.Transport{DialContext: (&net.Dialer{}).DialContext, Protocols: new(http.Protocols)}
			tr.Protocols.SetUnencryptedHTTP2(true)
			return tr
		}(),
		"an environment proxy": {DialContext: (&net.Dialer{}).DialContext, Proxy: http.ProxyFromEnvironment},
	} {
		if New(tr, Options{}) != nil {
			t.Errorf("%s: a lean path was built", name)
		}
	}
}

// A response's fields stay its own until its body is closed, even when
// the body was read to its end (which frees the connection at once, as
// the WAF's response inspection does before the fields are copied) and
// the next response on the same connection came in meanwhile.
func TestLeanResponseFieldsLastUntilClose(t *testing.T) {
	be := testutil.NewRawServer(t, func(i int, conn net.Conn, br *bufio.Reader) {
		for n := 1; ; n++ {
			if !testutil.Answer(br, conn, fmt.Sprintf("HTTP/1.1 200 OK\r\nX-N: %d\r\nContent-Length: 2\r\n\r\nok", n)) {
				return
			}
		}
	})
	lt, _ := newLean(t, nil)
	get := func() *http.Response {
		t.Helper()
		req := httptest.NewRequest("GET", be.URL()+"/", nil)
		req.RequestURI = ""
		resp, err := lt.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		if b, err := io.ReadAll(resp.Body); err != nil || string(b) != "ok" {
			t.Fatalf("body %q, %v", b, err)
		}
		return resp
	}
	first := get() // read to its end, not closed
	second := get()
	second.Body.Close()
	third := get() // its fields come after second's were given back
	third.Body.Close()
	if be.Conns() != 1 {
		t.Fatalf("%d backend connections, want the one reused", be.Conns())
	}
	if got := first.Header.Get("X-N"); got != "1" {
		t.Fatalf("the first response's X-N is %q after later responses on its connection, want 1", got)
	}
	first.Body.Close()
	if got := third.Header.Get("X-N"); got != "3" {
		t.Fatalf("the third response's X-N is %q, want 3", got)
	}
}

func TestCanonicalAddr(t *testing.T) {
	for in, want := range map[string]string{
		"http://a.example:8080/x": "a.example:8080",
		"http://a.example/x":      "a.example:80",
		"http://[::1]:81/":        "[::1]:81",
		"http://[::1]/":           "[::1]:80",
		"http://10.0.0.1/":        "10.0.0.1:80",
		"http://10.0.0.1:8/":      "10.0.0.1:8",
		"http://[fe80::1%25en0]/": "[fe80::1%en0]:80",
	} {
		req, _ := http.NewRequest("GET", in, nil)
		if got := canonicalAddr(req); got != want {
			t.Errorf("canonicalAddr(%s) = %q, want %q", in, got, want)
		}
	}
}

// An idle pooled connection is closed once it has been idle for
// IdleConnTimeout, each at its own time: a connection pooled later does
// not postpone the closing of an older one, nor is it closed with it.
func TestIdleConnectionsClosedAfterIdleConnTimeout(t *testing.T) {
	var mu sync.Mutex
	var remotes []string // the backend connection of each request
	closedAt := map[string]time.Time{}
	be := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		remotes = append(remotes, r.RemoteAddr)
		mu.Unlock()
		io.WriteString(w, "ok")
	}))
	be.Config.ConnState = func(c net.Conn, s http.ConnState) {
		if s == http.StateClosed {
			mu.Lock()
			closedAt[c.RemoteAddr().String()] = time.Now()
			mu.Unlock()
		}
	}
	be.Start()
	t.Cleanup(be.Close)
	const idle = 300 * time.Millisecond
	lt, _ := newLean(t, func(tr *http.Transport) { tr.IdleConnTimeout = idle })

	// Two connections under two names of the backend (two pool keys), the
	// second pooled half the timeout after the first.
	port := be.Listener.Addr().(*net.TCPAddr).Port
	if _, _, err := do(t, lt, "GET", fmt.Sprintf("http://127.0.0.1:%d/", port), nil, nil); err != nil {
		t.Fatal(err)
	}
	<-time.After(idle / 2)
	if _, _, err := do(t, lt, "GET", fmt.Sprintf("http://localhost:%d/", port), nil, nil); err != nil {
		t.Fatal(err)
	}
	var a, b time.Time
	testutil.Eventually(t, 10*time.Second, "both idle connections closed", func() bool {
		mu.Lock()
		defer mu.Unlock()
		var aok, bok bool
		a, aok = closedAt[remotes[0]]
		b, bok = closedAt[remotes[1]]
		return aok && bok
	})
	if gap := b.Sub(a); gap < idle/4 {
		t.Errorf("the newer idle connection closed %v after the older one, want about %v: not kept for its own timeout", gap, idle/2)
	}
}

// PrepareDirect's head, written in the walk that checks the fields, is
// the head the lean path writes for a request Covers took, with the
// Accept-Encoding it asks for, and the header map is left as it was.
func TestPrepareDirectWritesTheLeanHead(t *testing.T) {
	lt := New(&http.Transport{DialContext: (&net.Dialer{}).DialContext}, Options{})
	cases := []struct {
		name   string
		method string
		h      http.Header
		gz     bool
	}{
		{"plain GET: gzip asked for", "GET", http.Header{"Accept": {"*/*"}, "Cookie": {"a=1", "b=2"}}, true},
		{"an encoding of the client's", "GET", http.Header{"Accept-Encoding": {"br"}}, false},
		{"a range", "GET", http.Header{"Range": {"bytes=0-1"}}, false},
		{"Accept-Encoding without values: gzip", "GET", http.Header{"Accept-Encoding": nil}, true},
		{"HEAD: no gzip", "HEAD", http.Header{"X-A": {" 1 "}}, false},
		{"POST without body", "POST", http.Header{"User-Agent": {" ua "}}, true},
		{"excluded fields", "GET", http.Header{"Content-Length": {"5"}, "Host": {"evil"}, "Trailer": {"X"}}, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			mk := func() *http.Request {
				r, err := http.NewRequest(c.method, "http://10.0.0.1:8080/x?q=1", nil)
				if err != nil {
					t.Fatal(err)
				}
				r.Host = "front.example"
				for k, vs := range c.h {
					r.Header[k] = vs
				}
				return r
			}
			r := mk()
			var d Direct
			if !lt.PrepareDirect(r, &d, context.TODO(), h1wire.Beside{}) || d.req != r {
				t.Fatal("not taken")
			}
			if d.gz != c.gz {
				t.Fatalf("gzip %v, want %v", d.gz, c.gz)
			}
			want := mk()
			if c.gz {
				want.Header["Accept-Encoding"] = acceptGzip
			}
			var b bytes.Buffer
			bw := bufio.NewWriter(&b)
			if ok, err := h1wire.WriteRequestHead(bw, want); !ok || err != nil {
				t.Fatalf("WriteRequestHead: %v %v", ok, err)
			}
			bw.Flush()
			if got, exp := headFields(string(d.head)), headFields(b.String()); !reflect.DeepEqual(got, exp) {
				t.Fatalf("head\n%q\nwant\n%q", d.head, b.String())
			}
			if !reflect.DeepEqual(r.Header, mk().Header) {
				t.Fatalf("header changed: %v", r.Header)
			}
		})
	}
	// Fields kept out of the map: written as if they were in it (the
	// client's User-Agent where Request.Write puts it, their encoding
	// asked for), checked as the map's are, and put in the map when
	// Request.Write is to write the head.
	beside := h1wire.Beside{
		Fields: []h1wire.Field{{Name: "Cookie", Values: []string{"a=1"}}, {Name: "Accept-Encoding", Values: []string{"br"}}, {Name: "User-Agent", Values: []string{"ua/1"}}},
		Own:    []h1wire.Field{{Name: "X-Forwarded-For", Values: []string{"192.0.2.1"}}, {Name: "Traceparent", Values: []string{"00-a-b-01"}}},
	}
	r, _ := http.NewRequest("GET", "http://10.0.0.1:8080/x", nil)
	r.Header["Accept"] = []string{"*/*"}
	var d Direct
	if !lt.PrepareDirect(r, &d, context.TODO(), beside) || len(r.Header) != 1 {
		t.Fatalf("fields beside: not taken, or the map changed: %v", r.Header)
	}
	with := r.Clone(r.Context())
	beside.Map(with.Header)
	var wd Direct
	if !lt.PrepareDirect(with, &wd, context.TODO(), h1wire.Beside{}) {
		t.Fatal("fields beside, in the map: not taken")
	}
	if d.gz || wd.gz {
		t.Fatalf("fields beside: gzip asked for beside an Accept-Encoding (%v, %v in the map)", d.gz, wd.gz)
	}
	if got, exp := headFields(string(d.head)), headFields(string(wd.head)); !reflect.DeepEqual(got, exp) || !strings.Contains(string(d.head), "\r\nUser-Agent: ua/1\r\n") {
		t.Fatalf("fields beside: head\n%q\nwant\n%q", d.head, wd.head)
	}
	for _, bad := range []h1wire.Beside{
		{Own: []h1wire.Field{{Name: "X-Forwarded-Host", Values: []string{"a\x00b"}}}},
		{Fields: []h1wire.Field{{Name: "Bad Name", Values: []string{"x"}}}},
	} {
		if lt.PrepareDirect(r, &d, context.TODO(), bad) {
			t.Fatalf("fields beside: %v taken", bad)
		}
	}
	// A trace that wants each written field: the checks without a head,
	// for Request.Write to write, and the own fields in the map.
	r, _ = http.NewRequest("GET", "http://10.0.0.1:8080/x", nil)
	r = r.WithContext(httptrace.WithClientTrace(r.Context(), &httptrace.ClientTrace{WroteHeaders: func() {}}))
	if !lt.PrepareDirect(r, &d, context.TODO(), h1wire.Beside{Own: beside.Own}) || len(d.head) != 0 || !d.gz {
		t.Fatalf("traced: head %q, gzip %v", d.head, d.gz)
	}
	for _, f := range beside.Own {
		if !reflect.DeepEqual(r.Header[f.Name], f.Values) {
			t.Fatalf("traced: field %s beside not in the map: %v", f.Name, r.Header)
		}
	}
	r.Header["Bad Name"] = []string{"x"}
	if lt.PrepareDirect(r, &d, context.TODO(), h1wire.Beside{}) {
		t.Fatal("traced: an invalid name taken")
	}
}

// headFields is a head's request line and Host line, then its other
// lines sorted (the lean writer's order follows the map's).
func headFields(head string) []string {
	lines := strings.Split(head, "\r\n")
	if len(lines) > 2 {
		slices.Sort(lines[2:])
	}
	return lines
}
