package proxy

import (
	"bufio"
	"bytes"
	"context"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// The data path's guarantees, each checked through a real listener in
// every server mode (parity_helpers_test.go): a guarantee kept on one path
// only is a regression. Where a mode differs on purpose, differs says why
// and the case asserts that mode's own behaviour.
type parityCase struct {
	name string
	// differs maps a mode name to the reason it behaves otherwise.
	differs map[string]string
	run     func(t *testing.T, m serverMode)
}

func TestParity(t *testing.T) {
	modes := map[string]bool{}
	for _, m := range serverModes {
		modes[m.name] = true
	}
	for _, c := range parityCases {
		for name, why := range c.differs {
			if !modes[name] || why == "" {
				t.Fatalf("%s: differs names mode %q (a reason is required)", c.name, name)
			}
		}
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			forEachMode(t, func(t *testing.T, m serverMode) {
				t.Parallel()
				c.run(t, m)
			})
		})
	}
}

var parityCases = []parityCase{
	{name: "route timeout answers 504 for every method and version", run: parityRouteTimeout},
	{name: "a backend's bare-LF line ends are read at once", run: parityBareLFBackend},
	{name: "a request target of other than visible ASCII is refused with 400 before routing", run: parityBadTarget,
		differs: map[string]string{
			"h2c":    h2MalformedReset,
			"tls-h2": h2MalformedReset,
		}},
	{name: "underscore spellings of framing, hop-by-hop and forwarding fields never reach a backend", run: parityUnderscoreFields},
	{name: "activity timeout answers 504 when the backend is silent", run: parityActivityTimeout},
	{name: "header timeout closes a connection whose head does not come", run: parityHeaderTimeout},
	{name: "keep-alive timeout closes an idle connection", run: parityKeepAliveTimeout},
	{name: "header size limit answers 431", run: parityHeaderLimit,
		differs: map[string]string{
			"h2c":    h2HeaderListLimit,
			"tls-h2": h2HeaderListLimit,
		}},
	{name: "body size limit answers 413, announced or streamed", run: parityBodyLimit},
	{name: "MaxConcurrentConnections closes connections past the cap", run: parityMaxConnections},
	{name: "graceful stop lets requests in flight finish", run: parityGracefulStop},
	{name: "a client that goes away cancels the backend request", run: parityClientGone},
}

// slowBackend answers after delay, or gives up when its request is
// cancelled (then cancelled receives one value).
func slowBackend(t *testing.T, delay time.Duration, cancelled chan<- struct{}) *backend {
	return newBackend(t, func(w http.ResponseWriter, r *http.Request) {
		// net/http hears of a closed connection only once the body is read.
		_, _ = io.Copy(io.Discard, r.Body)
		select {
		case <-time.After(delay):
			_, _ = w.Write([]byte("late"))
		case <-r.Context().Done():
			if cancelled != nil {
				select {
				case cancelled <- struct{}{}:
				default:
				}
			}
		}
	})
}

func parityRouteTimeout(t *testing.T, m serverMode) {
	cancelled := make(chan struct{}, 8)
	b := slowBackend(t, 4*time.Second, cancelled)
	e := startMode(t, m, backendCfg(b.URL, "", `"Timeout": "00:00:00.5"`, ""), nil)
	type req struct {
		desc, method string
		body         string
		raw          string // an HTTP/1.x request written as is (h1 modes only)
	}
	reqs := []req{
		{desc: "GET", method: http.MethodGet},
		{desc: "HEAD", method: http.MethodHead},
		{desc: "POST with a body", method: http.MethodPost, body: "x"},
	}
	if m.h1() {
		reqs = append(reqs, req{desc: "HTTP/1.0 GET", raw: "GET /a HTTP/1.0\r\nHost: x\r\n\r\n"},
			req{desc: "HTTP/1.1 GET, raw", raw: "GET /a HTTP/1.1\r\nHost: x\r\n\r\n"})
	}
	for _, rq := range reqs {
		start := time.Now()
		var status int
		if rq.raw != "" {
			resp, _, err := e.raw(rq.raw)
			if err != nil {
				t.Fatalf("%s: %v", rq.desc, err)
			}
			status = resp.StatusCode
		} else {
			var body *strings.Reader
			if rq.body != "" {
				body = strings.NewReader(rq.body)
			}
			var resp *http.Response
			if body != nil {
				resp, _ = e.mustDo(rq.method, "/a", body, nil)
			} else {
				resp, _ = e.mustDo(rq.method, "/a", nil, nil)
			}
			status = resp.StatusCode
		}
		if took := time.Since(start); status != http.StatusGatewayTimeout || took > 3*time.Second {
			t.Errorf("%s: %d after %v, want 504 after about 0.5 s", rq.desc, status, took.Round(time.Millisecond))
		}
		select { // the backend's request ends with the route's
		case <-cancelled:
		case <-time.After(3 * time.Second):
			t.Errorf("%s: the backend's request was not cancelled", rq.desc)
		}
	}
}

// cannedBackend answers every request on its connections with resp, written
// as is (read the request, head and body, first).
func cannedBackend(t *testing.T, resp string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				br := bufio.NewReader(c)
				for {
					req, err := http.ReadRequest(br)
					if err != nil {
						return
					}
					_, _ = io.Copy(io.Discard, req.Body)
					if _, err := io.WriteString(c, resp); err != nil {
						return
					}
				}
			}()
		}
	}()
	return "http://" + ln.Addr().String()
}

func parityBareLFBackend(t *testing.T, m serverMode) {
	cases := []struct{ desc, resp string }{
		{"bare LF throughout", "HTTP/1.1 200 OK\nContent-Length: 2\n\nok"},
		{"CRLF lines, a bare LF blank line", "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\nok"},
		{"bare LF on the status line only", "HTTP/1.1 200 OK\nContent-Length: 2\r\n\r\nok"},
	}
	for _, c := range cases {
		e := startMode(t, m, backendCfg(cannedBackend(t, c.resp), "", "", ""), nil)
		for _, method := range []string{http.MethodGet, http.MethodPost} {
			var body io.Reader
			if method == http.MethodPost {
				body = strings.NewReader("x")
			}
			start := time.Now()
			resp, got, err := e.do(method, "/", body, nil)
			if err != nil {
				t.Fatalf("%s, %s: %v", c.desc, method, err)
			}
			if took := time.Since(start); resp.StatusCode != 200 || got != "ok" || took > 3*time.Second {
				t.Errorf("%s, %s: %d %q after %v, want 200 \"ok\" at once", c.desc, method, resp.StatusCode, got, took.Round(time.Millisecond))
			}
		}
	}
}

// h2MalformedReset: Go's HTTP/2 server resets the stream of a field value
// with a control byte (RFC 9113 section 8.2.1, a malformed request)
// before any handler runs; it never reaches a backend either.
const h2MalformedReset = "a :path with a control byte (tab, DEL) is a malformed HTTP/2 request: the stream is reset, no 400"

func parityBadTarget(t *testing.T, m serverMode) {
	b := newBackend(t, nil)
	e := startMode(t, m, backendCfg(b.URL, "", "", ""), nil)
	targets := []struct {
		desc, target string
		ctl          bool // a control byte: HTTP/2 resets the stream
	}{
		{"spaces smuggling a second request line", "/a?x HTTP/1.1 /admin", false},
		{"a raw byte above 0x7f", "/a\x80b", false},
		{"raw UTF-8", "/caf\xc3\xa9", false},
		{"a tab", "/a\tb", true},
		{"DEL", "/a\x7fb", true},
	}
	for _, c := range targets {
		var status string
		if m.h1() {
			resp, _, err := e.raw("GET " + c.target + " HTTP/1.1\r\nHost: h\r\n\r\n")
			if err == nil {
				status = resp.Status[:3]
			}
		} else {
			status = e.h2Raw(h2Get(c.target))
		}
		want := "400"
		if c.ctl && !m.h1() {
			want = "" // the stream is reset (h2MalformedReset)
		}
		if status != want {
			t.Errorf("%s (%q): status %q, want %q", c.desc, c.target, status, want)
		}
	}
	// A valid target still goes through (the same connection kinds).
	if m.h1() {
		if resp, body, err := e.raw("GET /caf%C3%A9?q=a%20b HTTP/1.1\r\nHost: h\r\n\r\n"); err != nil || resp.StatusCode != 200 || body != "ok" {
			t.Fatalf("a valid target: %v %v %q", resp, err, body)
		}
	} else if st := e.h2Raw(h2Get("/caf%C3%A9?q=a%20b")); st != "200" {
		t.Fatalf("a valid target: status %q", st)
	}
	if n := b.hitCount(); n != 1 {
		t.Errorf("the backend saw %d requests, want only the valid one", n)
	}
}

func parityUnderscoreFields(t *testing.T, m serverMode) {
	b := newBackend(t, nil)
	e := startMode(t, m, backendCfg(b.URL, "", "", ""), nil)
	dropped := []string{"Transfer_Encoding", "Content_Length", "Keep_Alive", "Proxy_Connection", "Http2_Settings",
		"Proxy_Authorization", "X_Forwarded_For", "transfer_encoding"}
	hdr := http.Header{"X_Custom_Field": {"kept"}}
	for _, k := range dropped {
		hdr[k] = []string{"chunked"}
	}
	for _, method := range []string{http.MethodGet, http.MethodPost} {
		var body io.Reader
		if method == http.MethodPost {
			body = strings.NewReader("x")
		}
		resp, got := e.mustDo(method, "/u", body, hdr)
		if resp.StatusCode != 200 || got != "ok" {
			t.Fatalf("%s: %d %q", method, resp.StatusCode, got)
		}
		seen := b.lastRequest().Header
		for k := range seen {
			if strings.IndexByte(k, '_') >= 0 && !strings.EqualFold(k, "X_Custom_Field") {
				t.Errorf("%s: %s reached the backend", method, k)
			}
		}
		if v := seen.Get("X_Custom_Field"); v != "kept" {
			t.Errorf("%s: X_Custom_Field = %q, want it kept (it names no framing field)", method, v)
		}
	}
	// Each request dropped len(dropped) fields.
	if n := e.metric("tether_underscore_headers_dropped_total", nil); n != float64(2*len(dropped)) {
		t.Errorf("tether_underscore_headers_dropped_total = %v, want %d", n, 2*len(dropped))
	}
	if n := e.metric("tether_underscore_headers_dropped_total", map[string]string{"header": "Transfer-Encoding"}); n != 4 {
		t.Errorf(`tether_underscore_headers_dropped_total{header="Transfer-Encoding"} = %v, want 4`, n)
	}
}

func parityActivityTimeout(t *testing.T, m serverMode) {
	cancelled := make(chan struct{}, 4)
	b := slowBackend(t, 4*time.Second, cancelled)
	e := startMode(t, m, backendCfg(b.URL, `"HttpRequest": {"ActivityTimeout": "00:00:00.5"}`, "", ""), nil)
	for _, method := range []string{http.MethodGet, http.MethodPost} {
		var body io.Reader
		if method == http.MethodPost {
			body = strings.NewReader("x")
		}
		start := time.Now()
		resp, _ := e.mustDo(method, "/", body, nil)
		if took := time.Since(start); resp.StatusCode != http.StatusGatewayTimeout || took > 3*time.Second {
			t.Errorf("%s: %d after %v, want 504 after about 0.5 s", method, resp.StatusCode, took.Round(time.Millisecond))
		}
		select {
		case <-cancelled:
		case <-time.After(3 * time.Second):
			t.Errorf("%s: the backend's request was not cancelled", method)
		}
	}
}

const parityLimits = `"Limits": {"RequestHeadersTimeout": "00:00:00.5", "KeepAliveTimeout": "00:00:00.5"}`

func parityHeaderTimeout(t *testing.T, m serverMode) {
	b := newBackend(t, nil)
	e := startMode(t, m, backendCfg(b.URL, "", "", parityLimits), nil)
	c := e.dialMode()
	switch {
	case m.h1():
		_, _ = io.WriteString(c, "GET / HTTP/1.1\r\nHost: h\r\nX-Half: ")
	case m.h2c:
		_, _ = io.WriteString(c, "PRI * HTTP/2.0\r\n") // half a preface
	default:
		// A whole preface and settings, then a head that never ends (no
		// END_HEADERS, no CONTINUATION).
		_, _ = io.WriteString(c, http2.ClientPreface)
		fr := http2.NewFramer(c, c)
		_ = fr.WriteSettings()
		var block bytes.Buffer
		enc := hpack.NewEncoder(&block)
		for _, f := range h2Get("/") {
			_ = enc.WriteField(f)
		}
		_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: block.Bytes(), EndStream: true, EndHeaders: false})
	}
	if took := closedWithin(t, c, 4*time.Second); took > 3*time.Second {
		t.Errorf("closed after %v, want about 0.5 s", took)
	}
	if n := b.hitCount(); n != 0 {
		t.Errorf("the backend saw %d requests", n)
	}
}

func parityKeepAliveTimeout(t *testing.T, m serverMode) {
	b := newBackend(t, nil)
	e := startMode(t, m, backendCfg(b.URL, "", "", parityLimits), nil)
	c := e.dialMode()
	if m.h1() {
		_, _ = io.WriteString(c, "GET / HTTP/1.1\r\nHost: h\r\n\r\n")
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("first request: %v %v", resp, err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
	} else {
		_, _ = io.WriteString(c, http2.ClientPreface)
		fr := http2.NewFramer(c, c)
		_ = fr.WriteSettings()
	}
	// Idle from here: closed after the timeout (an eighth of it late at
	// most on the own loop), not before.
	start := time.Now()
	took := closedWithin(t, c, 4*time.Second)
	if took = time.Since(start); took < 400*time.Millisecond || took > 3*time.Second {
		t.Errorf("an idle connection closed after %v, want about 0.5 s", took)
	}
}

// h2HeaderListLimit: HTTP/2 bounds a header block before any handler: the
// server advertises SETTINGS_MAX_HEADER_LIST_SIZE (a client refuses to
// send more) and fails the connection on a larger block it decodes; only
// a block within that advertised size and over the limit gets 431.
const h2HeaderListLimit = "an HTTP/2 header block well over the limit is refused by the protocol (the client's own refusal, or GOAWAY), not with 431"

func parityHeaderLimit(t *testing.T, m serverMode) {
	b := newBackend(t, nil)
	e := startMode(t, m, backendCfg(b.URL, "", "", `"Limits": {"MaxRequestHeadersTotalSize": 4096}`), nil)
	if resp, _ := e.mustDo(http.MethodGet, "/", nil, http.Header{"X-A": {strings.Repeat("a", 3000)}}); resp.StatusCode != 200 {
		t.Fatalf("a head within the limit: %d", resp.StatusCode)
	}
	for _, n := range []int{4200, 20000} {
		resp, _, err := e.newClientDo(http.MethodGet, "/", http.Header{"X-A": {strings.Repeat("a", n)}})
		switch {
		case resp != nil && resp.StatusCode == http.StatusRequestHeaderFieldsTooLarge:
			// (The server may close before the client finished sending: a
			// reset after the answer.)
		case err != nil && !m.h1():
			// Refused by HTTP/2 itself (h2HeaderListLimit).
		default:
			t.Errorf("a %d-byte field: %v %v, want 431", n, resp, err)
		}
	}
	if n := b.hitCount(); n != 1 {
		t.Errorf("the backend saw %d requests, want 1", n)
	}
}

func parityBodyLimit(t *testing.T, m serverMode) {
	b := newBackend(t, func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		_, _ = io.WriteString(w, "ok")
	})
	e := startMode(t, m, backendCfg(b.URL, "", `"MaxRequestBodySize": 1000`, ""), nil)
	cases := []struct {
		desc string
		body func() io.Reader
		want int
	}{
		{"within the limit", func() io.Reader { return strings.NewReader(strings.Repeat("a", 900)) }, 200},
		{"announced over the limit", func() io.Reader { return strings.NewReader(strings.Repeat("a", 2000)) }, 413},
		{"streamed over the limit", func() io.Reader { return unsized{strings.NewReader(strings.Repeat("a", 2000))} }, 413},
	}
	for _, c := range cases {
		resp, _, err := e.newClientDoBody(http.MethodPost, "/", c.body())
		if err != nil || resp.StatusCode != c.want {
			t.Errorf("%s: %v %v, want %d", c.desc, resp, err, c.want)
		}
	}
}

func parityMaxConnections(t *testing.T, m serverMode) {
	b := newBackend(t, nil)
	e := startMode(t, m, backendCfg(b.URL, "", "", `"Limits": {"MaxConcurrentConnections": 1}`), nil)
	// The first connection, kept open by e.client.
	if resp, _ := e.mustDo(http.MethodGet, "/", nil, nil); resp.StatusCode != 200 {
		t.Fatalf("first: %d", resp.StatusCode)
	}
	if resp, _, err := e.newClientDo(http.MethodGet, "/", nil); err == nil {
		t.Fatalf("a second connection was served: %d", resp.StatusCode)
	}
	e.client.CloseIdleConnections()
	// Once the first is closed, there is room again.
	eventually(t, func() bool {
		resp, _, err := e.newClientDo(http.MethodGet, "/", nil)
		return err == nil && resp.StatusCode == 200
	})
}

func parityGracefulStop(t *testing.T, m serverMode) {
	started := make(chan struct{}, 1)
	b := newBackend(t, func(w http.ResponseWriter, r *http.Request) {
		started <- struct{}{}
		time.Sleep(700 * time.Millisecond) // the request in flight
		_, _ = io.WriteString(w, "done")
	})
	e := startMode(t, m, backendCfg(b.URL, "", "", ""), nil)
	type result struct {
		status int
		body   string
		err    error
	}
	res := make(chan result, 1)
	go func() {
		resp, body, err := e.do(http.MethodGet, "/", nil, nil)
		if err != nil {
			res <- result{err: err}
			return
		}
		res <- result{status: resp.StatusCode, body: body}
	}()
	<-started
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	stopped := make(chan error, 1)
	go func() { stopped <- e.srv.Shutdown(ctx) }()
	r := <-res
	if r.err != nil || r.status != 200 || r.body != "done" {
		t.Fatalf("the request in flight: %d %q %v, want 200 \"done\"", r.status, r.body, r.err)
	}
	if err := <-stopped; err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	if _, _, err := e.newClientDo(http.MethodGet, "/", nil); err == nil {
		t.Fatal("a new request was served after the stop")
	}
}

func parityClientGone(t *testing.T, m serverMode) {
	cancelled := make(chan struct{}, 1)
	got := make(chan struct{}, 1)
	b := newBackend(t, func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		got <- struct{}{}
		select {
		case <-r.Context().Done():
			cancelled <- struct{}{}
		case <-time.After(5 * time.Second):
		}
	})
	e := startMode(t, m, backendCfg(b.URL, "", "", ""), nil)
	for _, method := range []string{http.MethodGet, http.MethodPost} {
		ctx, cancel := context.WithCancel(context.Background())
		var body io.Reader
		if method == http.MethodPost {
			body = strings.NewReader("x")
		}
		req, _ := http.NewRequestWithContext(ctx, method, e.base+"/", body)
		done := make(chan struct{})
		go func() {
			defer close(done)
			if resp, err := e.client.Do(req); err == nil {
				resp.Body.Close()
			}
		}()
		<-got
		cancel() // the client goes away (HTTP/1: closes; HTTP/2: resets the stream)
		select {
		case <-cancelled:
		case <-time.After(3 * time.Second):
			t.Errorf("%s: the backend's request was not cancelled", method)
		}
		<-done
	}
}
