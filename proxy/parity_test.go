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
	"net/http/httptrace"
	"net/textproto"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/tether-proxy/tether/proxy/forwarded"
	"github.com/tether-proxy/tether/test/testutil"
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
			"h3":     h3MalformedReset,
		}},
	{name: "underscore spellings of framing, hop-by-hop and forwarding fields never reach a backend", run: parityUnderscoreFields},
	{name: "activity timeout answers 504 when the backend is silent", run: parityActivityTimeout},
	{name: "header timeout closes a connection whose head does not come", run: parityHeaderTimeout},
	{name: "header timeout closes a connection that sends nothing", run: paritySilentConnection},
	{name: "a request slower than the header timeout completes, and its connection is reused", run: paritySlowAfterHeaders},
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
	{name: "Connection: close is honoured and not forwarded", run: parityConnectionClose,
		differs: map[string]string{"h2c": h2ConnectionSpecific, "tls-h2": h2ConnectionSpecific, "h3": h3ConnectionSpecific}},
	{name: "pipelined requests are answered in order", run: parityPipelining,
		differs: map[string]string{"h2c": h2Multiplexed, "tls-h2": h2Multiplexed, "h3": h3Multiplexed}},
	{name: "Expect: 100-continue gets its 100 and the body goes through", run: parityExpectContinue},
	{name: "HEAD keeps the length and sends no body", run: parityHead},
	{name: "1xx reach the client, 204 and 304 carry no body", run: parityInformationalAndEmpty},
	{name: "trailers reach the client", run: parityTrailers},
	{name: "an upgrade (WebSocket) is tunnelled", run: parityUpgrade,
		differs: map[string]string{"h2c": h2ConnectionSpecific, "tls-h2": h2ConnectionSpecific, "h3": h3ConnectionSpecific}},
	{name: "forwarded and trace headers are set, the client's replaced", run: parityForwardedHeaders},
	{name: "the access log line carries the request's fields", run: parityAccessLog},
	{name: "requests are counted in the metrics", run: parityMetrics},
	{name: "the WAF blocks a threat in Prevention", run: parityWAF},
	{name: "affinity cookies pin a session to its destination", run: parityAffinity},
	{name: "tether's own errors: 404 without a route, 502 for a dead backend, 400 for a bad Host, 405 for CONNECT", run: parityErrors},
	{name: "a request with Content-Length and Transfer-Encoding closes its connection", run: paritySmuggling,
		differs: map[string]string{"h2c": h2NoTransferEncoding, "tls-h2": h2NoTransferEncoding, "h3": h3ConnectionSpecific}},
	{name: "dot segments cannot escape a route", run: parityDotSegments},
	{name: "a refused connection is retried once on another destination, whatever the method", run: parityRetry},
	{name: "a backend's oversized response head is a 502", run: parityResponseHeadLimit},
	{name: "encodings: a client that asked for none gets the body decoded, one that asked gets it as sent", run: parityEncoding},
	{name: "MinRequestBodyDataRate: a body slower than the rate after its grace period gets 408 and is counted", run: parityMinRequestBodyDataRate},
	{name: "MinResponseDataRate: a client that does not read is cut (HTTP/2: its stream) and counted", run: parityMinResponseDataRate},
	{name: "MinResponseDataRate: small responses left in the server's buffer are held to it too", run: parityMinResponseDataRateSmallResponses,
		differs: map[string]string{"h3": h3StreamBufferTail}},
}

// Where the h3 mode differs by protocol (parityCase.differs).
const (
	h3ConnectionSpecific = "Connection, Upgrade and Transfer-Encoding are connection-specific, malformed in HTTP/3 (RFC 9114 section 4.2): quic-go's server resets the stream (H3_MESSAGE_ERROR) before any handler, where Go's HTTP/2 server answers 400 (asserted)"
	h3MalformedReset     = "a control byte in the target is an invalid field value: quic-go's server resets the stream (H3_MESSAGE_ERROR), as HTTP/2 does (asserted)"
	h3StreamBufferTail   = "quic-go's stream buffers a response's last 1452 bytes (one packet) without window and gives no sign when they leave: a response larger than that is cut, proxied or tether's own (asserted), but one that fits (a small 404) ends its handler and is left to KeepAliveTimeout (TestHTTP3SmallOwnAnswerLeftToTheConnection)"
)

// malformedStatus is the status a request malformed by a connection-specific
// field gets over HTTP/2 or HTTP/3: 400 from Go's HTTP/2 server, a reset
// stream ("") from quic-go's HTTP/3 server.
func malformedStatus(m serverMode) string {
	if m.h3 {
		return ""
	}
	return "400"
}

// h2NoTransferEncoding: HTTP/2 frames bodies itself; a transfer-encoding
// field is malformed there (RFC 9113 section 8.2.2).
const h2NoTransferEncoding = "HTTP/2 has no Transfer-Encoding: the field is connection-specific, a request with it gets 400 from the HTTP/2 server (asserted)"

// h2ConnectionSpecific: HTTP/2 has no Connection or Upgrade (RFC 9113
// section 8.2.2): a request carrying them is malformed, and Go's HTTP/2
// server answers 400 before any handler.
const h2ConnectionSpecific = "Connection and Upgrade are connection-specific, malformed in HTTP/2: 400 from the HTTP/2 server (asserted)"

// h2Multiplexed: HTTP/2 has no pipelining; its streams run side by side.
const h2Multiplexed = "HTTP/2 multiplexes instead: concurrent requests on one connection are each answered (asserted)"

// h3Multiplexed: neither has HTTP/3; its requests are QUIC streams.
const h3Multiplexed = "HTTP/3 multiplexes on QUIC streams instead: concurrent requests on one connection are each answered (asserted)"

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
	if m.h3 {
		// A request stream whose HEADERS frame never ends: the connection's
		// first request never comes.
		c := e.quicDial(nil)
		str, err := c.OpenStream()
		if err != nil {
			t.Fatal(err)
		}
		_, _ = str.Write([]byte{0x01, 0x40, 0x64, 0x00}) // HEADERS, 100 bytes long; 1 sent
		if took := quicClosedWithin(t, c, 4*time.Second); took > 3*time.Second {
			t.Errorf("closed after %v, want about 0.5 s", took)
		}
		if n := b.hitCount(); n != 0 {
			t.Errorf("the backend saw %d requests", n)
		}
		return
	}
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
	if m.h3 {
		cc, c := e.h3Conn(nil)
		status, resp := h3Do(t, cc, http.MethodGet, "/", nil, 0)
		if status != "200" {
			t.Fatalf("first request: %s", status)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		start := time.Now()
		quicClosedWithin(t, c, 4*time.Second)
		if took := time.Since(start); took < 400*time.Millisecond || took > 3*time.Second {
			t.Errorf("an idle connection closed after %v, want about 0.5 s", took)
		}
		return
	}
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
	closedWithin(t, c, 4*time.Second)
	if took := time.Since(start); took < 400*time.Millisecond || took > 3*time.Second {
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
		case err != nil && !m.h1() && !m.h3:
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
	testutil.Eventually(t, 5*time.Second, "condition", func() bool {
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

// echoPath answers with its request's path, for checking which response
// is whose.
func echoPath(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	_, _ = io.WriteString(w, r.URL.Path)
}

func parityConnectionClose(t *testing.T, m serverMode) {
	b := newBackend(t, nil)
	e := startMode(t, m, backendCfg(b.URL, "", "", ""), nil)
	if !m.h1() {
		fields := append(h2Get("/"), hpack.HeaderField{Name: "connection", Value: "close"})
		if st := e.h2Raw(fields); st != malformedStatus(m) {
			t.Errorf("connection: close over %s: %q, want %q", m.name, st, malformedStatus(m))
		}
		if n := b.hitCount(); n != 0 {
			t.Errorf("the backend saw %d requests", n)
		}
		return
	}
	c := e.dialMode()
	_, _ = io.WriteString(c, "GET / HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n")
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != 200 || !resp.Close {
		t.Fatalf("got %v %v, want 200 with Connection: close", resp, err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	if took := closedWithin(t, c, 3*time.Second); took > 2*time.Second {
		t.Errorf("closed after %v", took)
	}
	if v := b.lastRequest().Header["Connection"]; v != nil {
		t.Errorf("Connection %q reached the backend", v)
	}
}

func parityPipelining(t *testing.T, m serverMode) {
	b := newBackend(t, echoPath)
	e := startMode(t, m, backendCfg(b.URL, "", "", ""), nil)
	paths := []string{"/one", "/two", "/three", "/four"}
	if !m.h1() {
		var wg sync.WaitGroup
		got := make([]string, len(paths))
		for i, p := range paths {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if resp, body, err := e.do(http.MethodGet, p, nil, nil); err == nil && resp.StatusCode == 200 {
					got[i] = body
				}
			}()
		}
		wg.Wait()
		for i, p := range paths {
			if got[i] != p {
				t.Errorf("%s answered %q", p, got[i])
			}
		}
		return
	}
	c := e.dialMode()
	var all strings.Builder
	for i, p := range paths {
		if i == 2 { // a request the own loop hands over, in the middle
			all.WriteString("POST " + p + " HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\n\r\nabc")
			continue
		}
		all.WriteString("GET " + p + " HTTP/1.1\r\nHost: h\r\n\r\n")
	}
	_, _ = io.WriteString(c, all.String()) // all at once
	br := bufio.NewReader(c)
	for _, p := range paths {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 || string(body) != p {
			t.Fatalf("%s answered %d %q (out of order?)", p, resp.StatusCode, body)
		}
	}
}

func parityExpectContinue(t *testing.T, m serverMode) {
	b := newBackend(t, func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		_, _ = w.Write(body)
	})
	e := startMode(t, m, backendCfg(b.URL, "", "", ""), nil)
	if m.h3 {
		// quic-go's client sends the body at once; the body goes through.
		req, _ := http.NewRequest(http.MethodPost, e.base+"/", strings.NewReader("hello"))
		req.Header.Set("Expect", "100-continue")
		if resp, body, err := readAll(e.client.Do(req)); err != nil || resp.StatusCode != 200 || body != "hello" {
			t.Fatalf("got %v %q %v", resp, body, err)
		}
		return
	}
	tr := m.transport()
	tr.ExpectContinueTimeout = 5 * time.Second // a client that waits for the 100
	c := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	defer tr.CloseIdleConnections()
	req, _ := http.NewRequest(http.MethodPost, e.base+"/", strings.NewReader("hello"))
	req.Header.Set("Expect", "100-continue")
	start := time.Now()
	resp, body, err := readAll(c.Do(req))
	if err != nil || resp.StatusCode != 200 || body != "hello" {
		t.Fatalf("got %v %q %v", resp, body, err)
	}
	if took := time.Since(start); took > 3*time.Second {
		t.Errorf("took %v: the client waited out its ExpectContinueTimeout, no 100 came", took)
	}
	if !m.h1() {
		return
	}
	// On the wire: the 100 comes before the body is sent.
	conn := e.dialMode()
	_, _ = io.WriteString(conn, "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n")
	br := bufio.NewReader(conn)
	line, err := br.ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "HTTP/1.1 100 ") {
		t.Fatalf("first line %q %v, want 100 Continue", line, err)
	}
	for line != "\r\n" && err == nil {
		line, err = br.ReadString('\n')
	}
	_, _ = io.WriteString(conn, "hello")
	// The final response; the backend's own 100 may be relayed before it
	// (any number of 1xx may precede a response).
	for resp, err = http.ReadResponse(br, nil); err == nil && resp.StatusCode == http.StatusContinue; {
		resp, err = http.ReadResponse(br, nil)
	}
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("after the body: %v %v", resp, err)
	}
	if got, _ := io.ReadAll(resp.Body); string(got) != "hello" {
		t.Errorf("body %q", got)
	}
}

func parityHead(t *testing.T, m serverMode) {
	b := newBackend(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "5")
		if r.Method != http.MethodHead {
			_, _ = io.WriteString(w, "hello")
		}
	})
	e := startMode(t, m, backendCfg(b.URL, "", "", ""), nil)
	resp, body := e.mustDo(http.MethodHead, "/", nil, nil)
	if resp.StatusCode != 200 || body != "" || resp.ContentLength != 5 {
		t.Fatalf("HEAD: %d, body %q, length %d; want 200, none, 5", resp.StatusCode, body, resp.ContentLength)
	}
	// The connection is still good for the next request.
	if resp, body := e.mustDo(http.MethodGet, "/", nil, nil); resp.StatusCode != 200 || body != "hello" {
		t.Fatalf("GET after HEAD: %d %q", resp.StatusCode, body)
	}
}

func parityInformationalAndEmpty(t *testing.T, m serverMode) {
	b := newBackend(t, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/103":
			w.Header().Set("Link", "</style.css>; rel=preload")
			w.WriteHeader(http.StatusEarlyHints)
			_, _ = io.WriteString(w, "after hints")
		case "/204":
			w.WriteHeader(http.StatusNoContent)
		case "/304":
			w.Header().Set("Etag", `"v1"`)
			w.WriteHeader(http.StatusNotModified)
		}
	})
	e := startMode(t, m, backendCfg(b.URL, "", "", ""), nil)
	var hints []string
	trace := &httptrace.ClientTrace{Got1xxResponse: func(code int, h textproto.MIMEHeader) error {
		hints = append(hints, fmt.Sprintf("%d %s", code, h.Get("Link")))
		return nil
	}}
	req, _ := http.NewRequestWithContext(httptrace.WithClientTrace(context.Background(), trace), http.MethodGet, e.base+"/103", nil)
	resp, body, err := readAll(e.client.Do(req))
	if err != nil || resp.StatusCode != 200 || body != "after hints" {
		t.Fatalf("/103: %v %q %v", resp, body, err)
	}
	if len(hints) != 1 || hints[0] != "103 </style.css>; rel=preload" {
		t.Errorf("1xx seen by the client: %q, want the 103 with its Link", hints)
	}
	for _, c := range []struct {
		path   string
		status int
		field  string
	}{{"/204", 204, ""}, {"/304", 304, "Etag"}} {
		resp, body := e.mustDo(http.MethodGet, c.path, nil, nil)
		if resp.StatusCode != c.status || body != "" {
			t.Errorf("%s: %d %q", c.path, resp.StatusCode, body)
		}
		if c.field != "" && resp.Header.Get(c.field) == "" {
			t.Errorf("%s: %s lost", c.path, c.field)
		}
	}
}

func parityTrailers(t *testing.T, m serverMode) {
	b := newBackend(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Trailer", "X-Checksum")
		_, _ = io.WriteString(w, "body")
		w.Header().Set("X-Checksum", "abc")
	})
	e := startMode(t, m, backendCfg(b.URL, "", "", ""), nil)
	resp, body := e.mustDo(http.MethodGet, "/", nil, http.Header{"Te": {"trailers"}})
	if resp.StatusCode != 200 || body != "body" || resp.Trailer.Get("X-Checksum") != "abc" {
		t.Fatalf("got %d %q trailers %v, want X-Checksum: abc", resp.StatusCode, body, resp.Trailer)
	}
}

func parityUpgrade(t *testing.T, m serverMode) {
	b := newBackend(t, func(w http.ResponseWriter, r *http.Request) { echoUpgrade(w) })
	e := startMode(t, m, backendCfg(b.URL, "", "", ""), nil)
	if !m.h1() {
		fields := append(h2Get("/"), hpack.HeaderField{Name: "upgrade", Value: "websocket"}, hpack.HeaderField{Name: "connection", Value: "upgrade"})
		if st := e.h2Raw(fields); st != malformedStatus(m) {
			t.Errorf("an upgrade over %s: %q, want %q", m.name, st, malformedStatus(m))
		}
		return
	}
	c := e.dialMode()
	_, _ = io.WriteString(c, "GET /ws HTTP/1.1\r\nHost: h\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("got %v %v, want 101", resp, err)
	}
	_, _ = io.WriteString(c, "ping\n")
	line, err := br.ReadString('\n')
	if err != nil || line != "echo:ping\n" {
		t.Fatalf("through the tunnel: %q %v", line, err)
	}
}

func parityForwardedHeaders(t *testing.T, m serverMode) {
	b := newBackend(t, nil)
	e := startMode(t, m, backendCfg(b.URL, "", "", ""), nil)
	resp, _ := e.mustDo(http.MethodGet, "/f?q=1", nil, http.Header{
		"X-Forwarded-For": {"6.6.6.6"}, "X-Forwarded-Host": {"evil"}, "X-Real-Ip": {"6.6.6.6"}, "Forwarded": {"for=6.6.6.6"}})
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	_, port, _ := net.SplitHostPort(e.addr)
	got := b.lastRequest().Header
	want := map[string]string{
		"X-Forwarded-For": "127.0.0.1", "X-Forwarded-Proto": m.scheme(), "X-Forwarded-Host": e.addr,
		"X-Forwarded-Port": port, "X-Original-Host": e.addr, "X-Original-Url": "/f?q=1",
	}
	for k, v := range want {
		if g := got.Values(k); len(g) != 1 || g[0] != v {
			t.Errorf("%s = %q, want %q", k, g, v)
		}
	}
	for _, k := range []string{"X-Real-Ip", "Forwarded"} {
		if g := got.Values(k); len(g) != 0 {
			t.Errorf("the client's %s = %q reached the backend", k, g)
		}
	}
	id := got.Get(forwarded.TraceHeader)
	if !forwarded.ValidTraceID(id) || len(id) != 32 || resp.Header.Get(forwarded.TraceHeader) != id {
		t.Errorf("trace id %q to the backend, %q to the client; want the same 32 hex digits", id, resp.Header.Get(forwarded.TraceHeader))
	}
}

func parityAccessLog(t *testing.T, m serverMode) {
	b := newBackend(t, nil)
	e := startMode(t, m, backendCfg(b.URL, "", "", ""), nil)
	resp, _ := e.mustDo(http.MethodGet, "/p?q=1", nil, nil)
	var line map[string]any
	testutil.Eventually(t, 5*time.Second, "condition", func() bool {
		if ls := e.accessLines(); len(ls) == 1 {
			line = ls[0]
			return true
		}
		return false
	})
	want := map[string]any{"trace_id": resp.Header.Get(forwarded.TraceHeader), "remote": "127.0.0.1", "method": "GET",
		"path": "/p", "status": float64(200), "bytes": float64(2), "route": "r", "cluster": "c", "destination": "d1"}
	for k, v := range want {
		if line[k] != v {
			t.Errorf("%s = %v, want %v", k, line[k], v)
		}
	}
	for _, k := range []string{"host", "duration_ms"} {
		if _, ok := line[k]; !ok {
			t.Errorf("field %s missing", k)
		}
	}
}

func parityMetrics(t *testing.T, m serverMode) {
	b := newBackend(t, nil)
	e := startMode(t, m, backendCfg(b.URL, "", "", ""), nil)
	for i := 0; i < 3; i++ {
		e.mustDo(http.MethodGet, "/", nil, nil)
	}
	e.mustDo(http.MethodPost, "/", strings.NewReader("x"), nil)
	labels := map[string]string{"route": "r", "cluster": "c", "destination": "d1", "code": "200"}
	testutil.Eventually(t, 5*time.Second, "condition", func() bool { return e.metric("tether_requests_total", labels) == 4 })
	if n := e.metric("tether_request_duration_seconds", map[string]string{"route": "r"}); n != 4 {
		t.Errorf("tether_request_duration_seconds observed %v requests, want 4", n)
	}
}

func parityWAF(t *testing.T, m serverMode) {
	b := newBackend(t, nil)
	e := startMode(t, m, backendCfg(b.URL, "", "", `"Waf": {"Mode": "Prevention"}`), nil)
	if resp, _ := e.mustDo(http.MethodGet, sqli, nil, nil); resp.StatusCode != http.StatusForbidden {
		t.Errorf("a threat in the query: %d, want 403", resp.StatusCode)
	}
	if resp, _ := e.mustDo(http.MethodPost, sqli, strings.NewReader("x"), nil); resp.StatusCode != http.StatusForbidden {
		t.Errorf("a threat in a POST's query: %d, want 403", resp.StatusCode)
	}
	if resp, _ := e.mustDo(http.MethodGet, "/products?id=42", nil, nil); resp.StatusCode != 200 {
		t.Errorf("a clean request: %d, want 200", resp.StatusCode)
	}
	if n := b.hitCount(); n != 1 {
		t.Errorf("the backend saw %d requests, want only the clean one", n)
	}
	testutil.Eventually(t, 5*time.Second, "condition", func() bool {
		return e.metric("tether_waf_requests_total", map[string]string{"route": "r", "action": "blocked"}) == 2
	})
}

func parityAffinity(t *testing.T, m serverMode) {
	b1 := newBackend(t, func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "d1") })
	b2 := newBackend(t, func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "d2") })
	js := simpleConfig(map[string]string{"d1": b1.URL, "d2": b2.URL},
		`"SessionAffinity": {"Enabled": true, "AffinityKeyName": ".T"}`, "", "")
	e := startMode(t, m, js, nil)
	resp, first := e.mustDo(http.MethodGet, "/", nil, nil)
	sc := resp.Header.Get("Set-Cookie")
	if resp.StatusCode != 200 || !strings.HasPrefix(sc, ".T=") {
		t.Fatalf("first response: %d, Set-Cookie %q", resp.StatusCode, sc)
	}
	if secure := strings.Contains(strings.ToLower(sc), "; secure"); secure != m.tls {
		t.Errorf("Set-Cookie %q: Secure %v, want %v (SameAsRequest)", sc, secure, m.tls)
	}
	cookie := http.Header{"Cookie": {strings.Split(sc, ";")[0]}}
	for _, method := range []string{http.MethodGet, http.MethodPost, http.MethodGet} {
		var body io.Reader
		if method == http.MethodPost {
			body = strings.NewReader("x")
		}
		resp, got := e.mustDo(method, "/", body, cookie)
		if got != first || resp.Header.Get("Set-Cookie") != "" {
			t.Fatalf("%s with the cookie went to %s (first %s), Set-Cookie %q", method, got, first, resp.Header.Get("Set-Cookie"))
		}
	}
}

func paritySilentConnection(t *testing.T, m serverMode) {
	b := newBackend(t, nil)
	// A keep-alive timeout longer than the test: only the header timeout
	// may close the connection.
	e := startMode(t, m, backendCfg(b.URL, "", "", `"Limits": {"RequestHeadersTimeout": "00:00:00.5", "KeepAliveTimeout": "00:01:00"}`), nil)
	if m.h3 {
		if took := quicClosedWithin(t, e.quicDial(nil), 6*time.Second); took > 3*time.Second {
			t.Errorf("closed after %v, want about 0.5 s", took)
		}
		return
	}
	c := e.dialMode() // TLS: handshake done, then nothing
	if took := closedWithin(t, c, 6*time.Second); took > 3*time.Second {
		t.Errorf("closed after %v, want about 0.5 s", took)
	}
}

func parityErrors(t *testing.T, m serverMode) {
	dead := "http://" + deadAddr(t)
	js := `{"ReverseProxy": {
	  "Routes": {"r": {"ClusterId": "c", "Match": {"Path": "/dead/{**rest}"}}},
	  "Clusters": {"c": {"Destinations": {"d1": {"Address": "` + dead + `"}}}}}}`
	e := startMode(t, m, js, nil)
	for _, c := range []struct {
		desc, method, path string
		want               int
	}{
		{"no route", http.MethodGet, "/elsewhere", 404},
		{"a dead backend, GET", http.MethodGet, "/dead/x", 502},
		{"a dead backend, POST", http.MethodPost, "/dead/x", 502},
	} {
		var body io.Reader
		if c.method == http.MethodPost {
			body = strings.NewReader("x")
		}
		resp, got := e.mustDo(c.method, c.path, body, nil)
		if resp.StatusCode != c.want {
			t.Errorf("%s: %d, want %d", c.desc, resp.StatusCode, c.want)
		}
		if strings.Contains(got, "127.0.0.1") {
			t.Errorf("%s: the error body names an address: %q", c.desc, got)
		}
	}
	var badHost, connect string
	if m.h1() {
		if resp, _, err := e.raw("GET /dead/x HTTP/1.1\r\nHost: a b\r\n\r\n"); err == nil {
			badHost = resp.Status[:3]
		}
		if resp, _, err := e.raw("CONNECT h:443 HTTP/1.1\r\nHost: h:443\r\n\r\n"); err == nil {
			connect = resp.Status[:3]
		}
	} else {
		badHost = e.h2Raw([]hpack.HeaderField{{Name: ":method", Value: "GET"}, {Name: ":scheme", Value: "http"},
			{Name: ":authority", Value: "a b"}, {Name: ":path", Value: "/dead/x"}})
		connect = e.h2Raw([]hpack.HeaderField{{Name: ":method", Value: "CONNECT"}, {Name: ":authority", Value: "h:443"}})
	}
	if badHost != "400" {
		t.Errorf("a malformed Host: %q, want 400", badHost)
	}
	if connect != "405" {
		t.Errorf("CONNECT: %q, want 405", connect)
	}
}

func paritySmuggling(t *testing.T, m serverMode) {
	b := newBackend(t, echoPath)
	e := startMode(t, m, backendCfg(b.URL, "", "", ""), nil)
	if !m.h1() {
		fields := append(h2Get("/first"), hpack.HeaderField{Name: "transfer-encoding", Value: "chunked"})
		if st := e.h2Raw(fields); st != malformedStatus(m) {
			t.Errorf("transfer-encoding over %s: %q, want %q", m.name, st, malformedStatus(m))
		}
		if n := b.hitCount(); n != 0 {
			t.Errorf("the backend saw %d requests", n)
		}
		return
	}
	c := e.dialMode()
	_, _ = io.WriteString(c, "POST /first HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"+
		"GET /smuggled HTTP/1.1\r\nHost: h\r\n\r\n")
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != 200 || !resp.Close {
		t.Fatalf("status %d, Connection: close %v; want 200 and close", resp.StatusCode, resp.Close)
	}
	if _, err := http.ReadResponse(br, nil); err == nil {
		t.Fatal("the pipelined request was answered")
	}
	if n := b.hitCount(); n != 1 {
		t.Fatalf("the backend saw %d requests, want 1", n)
	}
}

func parityDotSegments(t *testing.T, m serverMode) {
	pub := newBackend(t, echoPath)
	admin := newBackend(t, func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "admin") })
	js := `{"ReverseProxy": {
	  "Routes": {
	    "pub": {"ClusterId": "pub", "Match": {"Path": "/pub/{**rest}"}},
	    "admin": {"ClusterId": "admin", "Match": {"Path": "/admin/{**rest}", "Headers": [{"Name": "X-Admin", "Values": ["yes"]}]}}
	  },
	  "Clusters": {
	    "pub": {"Destinations": {"d": {"Address": "` + pub.URL + `"}}},
	    "admin": {"Destinations": {"d": {"Address": "` + admin.URL + `"}}}
	  }}}`
	e := startMode(t, m, js, nil)
	for _, target := range []string{"/pub/../admin/x", "/pub/%2e%2e/admin/x", "/pub/./../admin/x"} {
		var status, body string
		if m.h1() {
			resp, b, err := e.raw("GET " + target + " HTTP/1.1\r\nHost: h\r\n\r\n")
			if err != nil {
				t.Fatalf("%s: %v", target, err)
			}
			status, body = resp.Status[:3], b
		} else {
			status = e.h2Raw(h2Get(target))
		}
		if body == "admin" || admin.hitCount() != 0 {
			t.Fatalf("%s reached the admin cluster (%s)", target, status)
		}
		// Resolved to /admin/x, which no route takes without X-Admin.
		if status != "404" {
			t.Errorf("%s: %s %q, want 404", target, status, body)
		}
	}
}

func paritySlowAfterHeaders(t *testing.T, m serverMode) {
	b := newBackend(t, func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		time.Sleep(time.Second) // the backend's work, past the header timeout
		_, _ = io.WriteString(w, "slow")
	})
	e := startMode(t, m, backendCfg(b.URL, "", "", `"Limits": {"RequestHeadersTimeout": "00:00:00.3", "KeepAliveTimeout": "00:00:10"}`), nil)
	for i, method := range []string{http.MethodGet, http.MethodPost, http.MethodGet} {
		var body io.Reader
		if method == http.MethodPost {
			body = strings.NewReader("x")
		}
		var reused bool
		trace := &httptrace.ClientTrace{GotConn: func(ci httptrace.GotConnInfo) { reused = ci.Reused }}
		req, _ := http.NewRequestWithContext(httptrace.WithClientTrace(context.Background(), trace), method, e.base+"/", body)
		resp, got, err := readAll(e.client.Do(req))
		if err != nil || resp.StatusCode != 200 || got != "slow" {
			t.Fatalf("request %d (%s): %v %q %v", i+1, method, resp, got, err)
		}
		if i > 0 && !reused {
			t.Errorf("request %d (%s) did not reuse the connection", i+1, method)
		}
	}
}

func parityRetry(t *testing.T, m serverMode) {
	dead := "http://" + deadAddr(t)
	live := newBackend(t, echoPath)
	// RoundRobin: every other request picks the dead one first.
	e := startMode(t, m, simpleConfig(map[string]string{"a-dead": dead, "b-live": live.URL}, `"LoadBalancingPolicy": "RoundRobin"`, "", ""), nil)
	for i := 0; i < 6; i++ {
		method := http.MethodGet
		var body io.Reader
		if i%2 == 1 {
			method, body = http.MethodPost, strings.NewReader("x")
		}
		resp, got := e.mustDo(method, "/r", body, nil)
		if resp.StatusCode != 200 || got != "/r" {
			t.Fatalf("request %d (%s): %d %q, want 200 from the live destination", i, method, resp.StatusCode, got)
		}
	}
}

func parityResponseHeadLimit(t *testing.T, m serverMode) {
	b := newBackend(t, func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("X-Big", strings.Repeat("a", 100<<10))
		_, _ = io.WriteString(w, "ok")
	})
	e := startMode(t, m, backendCfg(b.URL, "", "", ""), nil)
	for _, method := range []string{http.MethodGet, http.MethodPost} {
		var body io.Reader
		if method == http.MethodPost {
			body = strings.NewReader("x")
		}
		if resp, _ := e.mustDo(method, "/", body, nil); resp.StatusCode != http.StatusBadGateway {
			t.Errorf("%s: %d, want 502", method, resp.StatusCode)
		}
	}
}

func parityEncoding(t *testing.T, m serverMode) {
	b := newBackend(t, func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		if !strings.Contains(r.Header.Get("Accept-Encoding"), "gzip") {
			_, _ = io.WriteString(w, "plain text")
			return
		}
		w.Header().Set("Content-Encoding", "gzip")
		zw := gzip.NewWriter(w)
		_, _ = io.WriteString(zw, "plain text")
		_ = zw.Close()
	})
	e := startMode(t, m, backendCfg(b.URL, "", "", ""), nil)
	for _, method := range []string{http.MethodGet, http.MethodPost} {
		body := func() io.Reader {
			if method == http.MethodPost {
				return strings.NewReader("x")
			}
			return nil
		}
		// No Accept-Encoding (the test client does not add one).
		resp, got := e.mustDo(method, "/", body(), nil)
		if resp.StatusCode != 200 || got != "plain text" || resp.Header.Get("Content-Encoding") != "" {
			t.Errorf("%s, no encoding asked: %d %q Content-Encoding %q", method, resp.StatusCode, got, resp.Header.Get("Content-Encoding"))
		}
		resp, got = e.mustDo(method, "/", body(), http.Header{"Accept-Encoding": {"gzip"}})
		if resp.Header.Get("Content-Encoding") != "gzip" {
			t.Errorf("%s, gzip asked: Content-Encoding %q", method, resp.Header.Get("Content-Encoding"))
			continue
		}
		zr, err := gzip.NewReader(strings.NewReader(got))
		if err != nil {
			t.Fatalf("%s: %v", method, err)
		}
		if plain, _ := io.ReadAll(zr); string(plain) != "plain text" {
			t.Errorf("%s, gzip asked: %q", method, plain)
		}
	}
}
