package proxy

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"net/textproto"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tether-proxy/tether/proxy/lean"
)

// leanProbe is a cluster's lean transport and the count of the requests
// it took.
type leanProbe struct {
	*lean.Transport
	trips *atomic.Uint64
}

// leanHarness is a proxy with one destination at addr.
func leanHarness(t *testing.T, addr string) (*harness, leanProbe) {
	t.Helper()
	trips := new(atomic.Uint64)
	h := newHarness(t, mustParse(t, simpleConfig(map[string]string{"d1": addr}, "", "", "")),
		withHooks(&testHooks{onLeanTrip: func() { trips.Add(1) }}))
	lt := h.p.rt.Load().clusters["c"].lean
	if lt == nil {
		t.Fatal("cluster has no lean path")
	}
	return h, leanProbe{lt, trips}
}

// rawBackend accepts TCP connections and hands the i-th (from 0) to
// serve, so a test can misbehave on the wire.
type rawBackend struct {
	ln    net.Listener
	conns atomic.Int32
	wg    sync.WaitGroup
}

func newRawBackend(t *testing.T, serve func(i int, c net.Conn, br *bufio.Reader)) *rawBackend {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := &rawBackend{ln: ln}
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			i := int(b.conns.Add(1)) - 1
			b.wg.Add(1)
			go func() {
				defer b.wg.Done()
				defer c.Close()
				serve(i, c, bufio.NewReader(c))
			}()
		}
	}()
	t.Cleanup(func() { ln.Close(); b.wg.Wait() })
	return b
}

func (b *rawBackend) url() string { return "http://" + b.ln.Addr().String() }

// answer reads one request and writes resp; false when the client went.
func answer(br *bufio.Reader, c net.Conn, resp string) bool {
	req, err := http.ReadRequest(br)
	if err != nil {
		return false
	}
	io.Copy(io.Discard, req.Body)
	_, err = io.WriteString(c, resp)
	return err == nil
}

const okResp = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"

// Which requests the lean path takes, and that the others still work
// through http.Transport.
func TestLeanPathTakesBodylessHTTP1Only(t *testing.T) {
	var mu sync.Mutex
	peers := map[string]bool{} // backend connections, by client address
	be := newBackend(t, func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		peers[r.RemoteAddr] = true
		mu.Unlock()
		b, _ := io.ReadAll(r.Body)
		fmt.Fprintf(w, "%s %s", r.Method, b)
	})
	conns := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(peers)
	}
	h, lt := leanHarness(t, be.URL)
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
			before := lt.trips.Load()
			var body io.Reader
			if c.body != "" {
				body = strings.NewReader(c.body)
			}
			resp, got := send(t, nil, c.method, h.front.URL+"/", body, c.hdr)
			if resp.StatusCode != 200 || got != c.want {
				t.Fatalf("%d %q, want 200 %q", resp.StatusCode, got, c.want)
			}
			if took := lt.trips.Load() != before; took != c.lean {
				t.Fatalf("lean path took it: %v, want %v", took, c.lean)
			}
		})
	}
	// Sequential bodyless requests share one pooled connection.
	n := conns()
	for range 20 {
		if resp, _ := send(t, nil, "GET", h.front.URL+"/", nil, nil); resp.StatusCode != 200 {
			t.Fatal(resp.Status)
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
		want   int
	}{{"GET", 200}, {"HEAD", 200}, {"POST", 502}} {
		t.Run(c.method, func(t *testing.T) {
			be := newRawBackend(t, func(i int, conn net.Conn, br *bufio.Reader) {
				if i == 0 {
					// Answer the first request, then take the second
					// and drop the connection without a byte.
					if answer(br, conn, okResp) {
						http.ReadRequest(br)
					}
					return
				}
				for answer(br, conn, okResp) {
				}
			})
			h, lt := leanHarness(t, be.url())
			if resp, _ := send(t, nil, c.method, h.front.URL+"/", nil, nil); resp.StatusCode != 200 {
				t.Fatalf("first request: %s", resp.Status)
			}
			before := lt.trips.Load()
			resp, _ := send(t, nil, c.method, h.front.URL+"/", nil, nil)
			if resp.StatusCode != c.want {
				t.Fatalf("second request on the dropped connection: %d, want %d", resp.StatusCode, c.want)
			}
			if lt.trips.Load() == before {
				t.Fatal("not the lean path")
			}
			if c.want == 200 && be.conns.Load() != 2 {
				t.Fatalf("backend saw %d connections, want 2 (the retry's new one)", be.conns.Load())
			}
		})
	}
}

// Bytes a backend sends that no request asked for (a response smuggled
// after the real one, in the same segment or later while the connection
// is idle) never answer the next request: the connection is not reused.
func TestLeanNeverReusesAConnectionWithUnaskedBytes(t *testing.T) {
	const smuggled = "HTTP/1.1 200 OK\r\nContent-Length: 8\r\n\r\nsmuggled"
	for _, later := range []bool{false, true} {
		t.Run(fmt.Sprintf("later=%v", later), func(t *testing.T) {
			sent := make(chan struct{})
			be := newRawBackend(t, func(i int, conn net.Conn, br *bufio.Reader) {
				if i > 0 {
					for answer(br, conn, okResp) {
					}
					return
				}
				if later {
					answer(br, conn, okResp)
					io.WriteString(conn, smuggled) // while the connection is idle
				} else {
					answer(br, conn, okResp+smuggled)
				}
				close(sent)
				io.Copy(io.Discard, br)
			})
			h, _ := leanHarness(t, be.url())
			if _, got := send(t, nil, "GET", h.front.URL+"/", nil, nil); got != "ok" {
				t.Fatalf("first: %q", got)
			}
			<-sent
			for range 3 {
				if resp, got := send(t, nil, "GET", h.front.URL+"/", nil, nil); resp.StatusCode != 200 || got != "ok" {
					t.Fatalf("next request got %d %q, want 200 ok from a new connection", resp.StatusCode, got)
				}
			}
		})
	}
}

// 1xx responses reach the client before the final one.
func TestLeanForwardsInformationalResponses(t *testing.T) {
	be := newRawBackend(t, func(_ int, conn net.Conn, br *bufio.Reader) {
		answer(br, conn, "HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload\r\n\r\n"+okResp)
		io.Copy(io.Discard, br)
	})
	h, lt := leanHarness(t, be.url())
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
	req, _ := http.NewRequestWithContext(ctx, "GET", h.front.URL+"/", nil)
	resp, err := http.DefaultClient.Do(req)
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
	if lt.trips.Load() == 0 {
		t.Fatal("not the lean path")
	}
}

// Trailers and a streamed body arrive as the backend sends them.
func TestLeanStreamsAndForwardsTrailers(t *testing.T) {
	release := make(chan struct{})
	be := newBackend(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Trailer", "X-Sum")
		io.WriteString(w, "first;")
		w.(http.Flusher).Flush()
		<-release
		io.WriteString(w, "second")
		w.Header().Set("X-Sum", "42")
	})
	h, lt := leanHarness(t, be.URL)
	resp, err := http.Get(h.front.URL + "/")
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
	if lt.trips.Load() == 0 {
		t.Fatal("not the lean path")
	}
}

// A client that goes away while the backend is still thinking closes the
// backend connection, as http.Transport does.
func TestLeanCancelClosesTheBackendConnection(t *testing.T) {
	got, closed := make(chan struct{}), make(chan struct{})
	be := newRawBackend(t, func(_ int, conn net.Conn, br *bufio.Reader) {
		if _, err := http.ReadRequest(br); err != nil {
			return
		}
		close(got)
		io.Copy(io.Discard, br) // until the proxy closes it
		close(closed)
	})
	h, _ := leanHarness(t, be.url())
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		req, _ := http.NewRequestWithContext(ctx, "GET", h.front.URL+"/", nil)
		resp, err := http.DefaultClient.Do(req)
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
		t.Fatal("backend connection still open 20 s after the client went away")
	}
}

// As http.Transport: gzip is asked for and decoded when the client asked
// for no encoding; a client's own Accept-Encoding gets the bytes as sent.
func TestLeanCompressionAsTheTransport(t *testing.T) {
	var zipped bytes.Buffer
	zw := gzip.NewWriter(&zipped)
	io.WriteString(zw, "plain text")
	zw.Close()
	be := newBackend(t, func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Accept-Encoding") != "gzip" {
			io.WriteString(w, "plain text")
			return
		}
		w.Header().Set("Content-Encoding", "gzip")
		w.Write(zipped.Bytes())
	})
	h, lt := leanHarness(t, be.URL)
	tr := &http.Transport{DisableCompression: true} // the test client asks for nothing itself
	defer tr.CloseIdleConnections()
	for _, c := range []struct {
		ae, want, wantCE string
	}{{"", "plain text", ""}, {"gzip", zipped.String(), "gzip"}} {
		req, _ := http.NewRequest("GET", h.front.URL+"/", nil)
		if c.ae != "" {
			req.Header.Set("Accept-Encoding", c.ae)
		}
		resp, err := tr.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(b) != c.want || resp.Header.Get("Content-Encoding") != c.wantCE {
			t.Fatalf("Accept-Encoding %q: body %q, Content-Encoding %q", c.ae, b, resp.Header.Get("Content-Encoding"))
		}
	}
	if lt.trips.Load() != 2 {
		t.Fatalf("lean trips %d, want 2", lt.trips.Load())
	}
}

// Backend response headers past MaxResponseHeaderBytes are a 502 on the
// lean path too.
func TestLeanBoundsResponseHeaders(t *testing.T) {
	be := newRawBackend(t, func(_ int, conn net.Conn, br *bufio.Reader) {
		answer(br, conn, "HTTP/1.1 200 OK\r\nX-Big: "+strings.Repeat("a", maxResponseHeaderBytes+8192)+"\r\nContent-Length: 2\r\n\r\nok")
	})
	h, lt := leanHarness(t, be.url())
	if resp, _ := send(t, nil, "GET", h.front.URL+"/", nil, nil); resp.StatusCode != 502 {
		t.Fatalf("status %d, want 502", resp.StatusCode)
	}
	if lt.trips.Load() == 0 {
		t.Fatal("not the lean path")
	}
}

// What the lean path leaves to http.Transport, so the Transport's own
// checks and refusals (smuggling defences on the request side) apply.
func TestLeanCoversOnlyWhatItCan(t *testing.T) {
	lt := lean.New(&http.Transport{DialContext: (&net.Dialer{}).DialContext}, lean.Options{})
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
		if lean.New(tr, lean.Options{}) != nil {
			t.Errorf("%s: a lean path was built", name)
		}
	}
}

// A response's fields stay its own until its body is closed, even when
// the body was read to its end (which frees the connection at once, as
// the WAF's response inspection does before the fields are copied) and
// the next response on the same connection came in meanwhile.
func TestLeanResponseFieldsLastUntilClose(t *testing.T) {
	be := newRawBackend(t, func(i int, conn net.Conn, br *bufio.Reader) {
		for n := 1; ; n++ {
			if !answer(br, conn, fmt.Sprintf("HTTP/1.1 200 OK\r\nX-N: %d\r\nContent-Length: 2\r\n\r\nok", n)) {
				return
			}
		}
	})
	_, lt := leanHarness(t, be.url())
	get := func() *http.Response {
		t.Helper()
		req := httptest.NewRequest("GET", be.url()+"/", nil)
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
	if be.conns.Load() != 1 {
		t.Fatalf("%d backend connections, want the one reused", be.conns.Load())
	}
	if got := first.Header.Get("X-N"); got != "1" {
		t.Fatalf("the first response's X-N is %q after later responses on its connection, want 1", got)
	}
	first.Body.Close()
	if got := third.Header.Get("X-N"); got != "3" {
		t.Fatalf("the third response's X-N is %q, want 3", got)
	}
}
