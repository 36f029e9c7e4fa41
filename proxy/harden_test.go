//lint:file-ignore SA1019 the h2c smuggling test needs a backend that accepts Upgrade: h2c, which only x/net's deprecated h2c package does (net/http's own h2c takes prior knowledge only)

package proxy

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/h2c"

	"github.com/tether-proxy/tether/test/testutil"
)

// TestSpoofableHeadersFromUntrustedPeers: headers that backends read as
// forwarding information are removed when an untrusted client sends them,
// and kept when a trusted proxy does.
func TestSpoofableHeadersFromUntrustedPeers(t *testing.T) {
	b := newBackend(t, nil)
	untrusted := newHarness(t, mustParse(t, simpleConfig(map[string]string{"d1": b.URL}, "", "", "")), nil)
	trusted := newHarness(t, mustParse(t, simpleConfig(map[string]string{"d1": b.URL}, "", "", `"TrustedProxies": ["127.0.0.0/8"]`)), nil)
	for _, name := range []string{"X-Client-IP", "True-Client-IP", "X-Forwarded-Server", "X-Forwarded-Ssl",
		"Front-End-Https", "X-Forwarded-Scheme", "X-Original-For", "X-Real-IP", "X-Forwarded-Prefix",
		"Client-IP", "X-Forwarded", "X-Cluster-Client-IP", "Forwarded-For"} {
		for _, c := range []struct {
			desc string
			h    *harness
			kept bool
		}{{"untrusted peer: removed", untrusted, false}, {"trusted peer: kept", trusted, true}} {
			t.Run(name+"/"+c.desc, func(t *testing.T) {
				get(t, nil, c.h.front.URL+"/", http.Header{name: {"6.6.6.6"}, strings.ReplaceAll(name, "-", "_"): {"6.6.6.6"}})
				got := b.lastRequest().Header
				if v := got.Get(name); (v == "6.6.6.6") != c.kept {
					t.Errorf("%s = %q at the backend, kept=%v wanted", name, v, c.kept)
				}
				if v := got.Get(strings.ReplaceAll(name, "-", "_")); v != "" {
					t.Errorf("underscore spelling of %s reached the backend: %q", name, v)
				}
			})
		}
	}
}

// TestForwardedPortIsTheConnectionsPort: X-Forwarded-Port is the port the
// client connected to, whatever its Host header or absolute-form target
// claims.
func TestForwardedPortIsTheConnectionsPort(t *testing.T) {
	b := newBackend(t, nil)
	h := newHarness(t, mustParse(t, simpleConfig(map[string]string{"d1": b.URL}, "", "", "")), nil)
	addr := h.front.Listener.Addr().String()
	_, port, _ := net.SplitHostPort(addr)
	for _, c := range []struct{ desc, req string }{
		{"Host with an out-of-range port", "GET / HTTP/1.1\r\nHost: x:99999\r\nConnection: close\r\n\r\n"},
		{"Host with another port", "GET / HTTP/1.1\r\nHost: x:8443\r\nConnection: close\r\n\r\n"},
		{"absolute-form target with a port", "GET http://x:7777/ HTTP/1.1\r\nHost: x:7777\r\nConnection: close\r\n\r\n"},
	} {
		t.Run(c.desc, func(t *testing.T) {
			resp, err := testutil.RawRequest(t, addr, c.req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != 200 {
				t.Fatalf("status %d", resp.StatusCode)
			}
			if got := b.lastRequest().Header.Get("X-Forwarded-Port"); got != port {
				t.Errorf("X-Forwarded-Port = %q, want the listener's %s", got, port)
			}
		})
	}
}

// TestH2CUpgradeIsNeverForwarded: an h2c upgrade offer does not reach a
// backend that would accept it (h2c smuggling); the request is served as
// plain HTTP/1.1.
func TestH2CUpgradeIsNeverForwarded(t *testing.T) {
	var mu sync.Mutex
	var sawUpgrade []string
	bh := h2c.NewHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		sawUpgrade = append(sawUpgrade, r.Header.Get("Upgrade")+"|"+r.Header.Get("Http2-Settings"))
		mu.Unlock()
		_, _ = io.WriteString(w, "ok")
	}), &http2.Server{})
	bs := httptest.NewServer(bh)
	t.Cleanup(bs.Close)
	h := newHarness(t, mustParse(t, simpleConfig(map[string]string{"d1": bs.URL}, "", "", "")), nil)
	for _, c := range []struct{ desc, hdr string }{
		{"h2c alone", "Connection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA\r\n"},
		{"h2c with a version, mixed case", "Connection: upgrade, http2-settings\r\nUpgrade: H2C/1.0\r\nHTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA\r\n"},
	} {
		t.Run(c.desc, func(t *testing.T) {
			resp, err := testutil.RawRequest(t, h.front.Listener.Addr().String(), "GET / HTTP/1.1\r\nHost: h\r\n"+c.hdr+"\r\n")
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 || string(body) != "ok" {
				t.Fatalf("status %d body %q, want a plain HTTP/1.1 200", resp.StatusCode, body)
			}
			mu.Lock()
			defer mu.Unlock()
			if got := sawUpgrade[len(sawUpgrade)-1]; got != "|" {
				t.Errorf("backend saw Upgrade|HTTP2-Settings = %q", got)
			}
		})
	}
}

// TestContentLengthWithTransferEncodingClosesConnection: a request with
// both is answered and its connection closed (RFC 9112 §6.1), so a request
// pipelined behind it is never served.
func TestContentLengthWithTransferEncodingClosesConnection(t *testing.T) {
	b := newBackend(t, func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		_, _ = io.WriteString(w, "ok")
	})
	h := newHarness(t, mustParse(t, simpleConfig(map[string]string{"d1": b.URL}, "", "", "")), nil)
	conn, err := net.Dial("tcp", h.front.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprint(conn, "POST /first HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"+
		"GET /smuggled HTTP/1.1\r\nHost: h\r\n\r\n")
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !resp.Close {
		t.Fatalf("status %d, Connection: close %v; want 200 and close", resp.StatusCode, resp.Close)
	}
	if _, err := http.ReadResponse(br, nil); err == nil {
		t.Fatal("the pipelined request was answered")
	}
	if got := b.lastRequest().URL.Path; got != "/first" || b.hitCount() != 1 {
		t.Fatalf("backend hits %d, last %q: the pipelined request reached it", b.hitCount(), got)
	}
}

// TestKeepAliveWithContentLengthOnly: the close is for chunked bodies; an
// ordinary request keeps its connection.
func TestKeepAliveWithContentLengthOnly(t *testing.T) {
	b := newBackend(t, nil)
	h := newHarness(t, mustParse(t, simpleConfig(map[string]string{"d1": b.URL}, "", "", "")), nil)
	resp, err := testutil.RawRequest(t, h.front.Listener.Addr().String(), "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 2\r\n\r\nhi")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.Close {
		t.Fatal("connection closed after a Content-Length request")
	}
}

// logCapture is a JSON slog handler's output with each line's keys in order.
type logCapture struct{ testutil.SyncBuffer }

// lines returns each line's top-level keys (with repeats) and its fields.
func (c *logCapture) lines(t *testing.T) ([][]string, []map[string]any) {
	t.Helper()
	data := []byte(c.String())
	var keys [][]string
	var fields []map[string]any
	for _, line := range bytes.Split(bytes.TrimSpace(data), []byte("\n")) {
		if len(line) == 0 {
			continue
		}
		m := map[string]any{}
		if err := json.Unmarshal(line, &m); err != nil {
			t.Fatalf("%v: %s", err, line)
		}
		fields = append(fields, m)
		dec := json.NewDecoder(bytes.NewReader(line))
		_, _ = dec.Token() // {
		var ks []string
		for dec.More() {
			k, _ := dec.Token()
			ks = append(ks, k.(string))
			var skip json.RawMessage
			_ = dec.Decode(&skip)
		}
		keys = append(keys, ks)
	}
	return keys, fields
}

// TestLogLinesCarryEachKeyOnce: with node/'s logger (which carries "node"),
// the data path's lines (health, proxy errors) do not repeat node or
// cluster.
func TestLogLinesCarryEachKeyOnce(t *testing.T) {
	dead := newBackend(t, nil)
	dead.Close()
	var lc logCapture
	logger := slog.New(slog.NewJSONHandler(&lc, &slog.HandlerOptions{Level: slog.LevelDebug})).With("node", "n1")
	cfg := mustParse(t, simpleConfig(map[string]string{"d1": dead.URL},
		`"HealthCheck": {"Active": {"Enabled": true, "Interval": "50ms", "Timeout": "50ms"}, "Passive": {"Enabled": true}}`, "", ""))
	h := newHarness(t, cfg, func(o *Options) { o.Logger, o.NodeID = logger, "n1" })
	get(t, nil, h.front.URL+"/", nil)
	testutil.Eventually(t, 5*time.Second, "condition", func() bool {
		_, fields := lc.lines(t)
		var health, proxyErr bool
		for _, f := range fields {
			health = health || f["cluster"] != nil && f["msg"] != "proxy error"
			proxyErr = proxyErr || f["msg"] == "proxy error"
		}
		return health && proxyErr
	})
	keys, _ := lc.lines(t)
	for _, ks := range keys {
		seen := map[string]bool{}
		for _, k := range ks {
			if seen[k] {
				t.Errorf("key %q twice in a log line: %v", k, ks)
			}
			seen[k] = true
		}
	}
}

// TestClientMistakesAreNotProxyErrors: a malformed request body is the
// client's fault: no warning, no "proxy error" line.
func TestClientMistakesAreNotProxyErrors(t *testing.T) {
	b := newBackend(t, func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
	})
	var lc logCapture
	logger := slog.New(slog.NewJSONHandler(&lc, &slog.HandlerOptions{Level: slog.LevelDebug}))
	h := newHarness(t, mustParse(t, simpleConfig(map[string]string{"d1": b.URL}, "", `"MaxRequestBodySize": 4`, "")),
		func(o *Options) { o.Logger = logger })
	for _, req := range []string{
		"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
		"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n10\r\n0123456789abcdef\r\n0\r\n\r\n",
	} {
		resp, err := testutil.RawRequest(t, h.front.Listener.Addr().String(), req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode < 400 || resp.StatusCode >= 500 {
			t.Fatalf("status %d, want a 4xx", resp.StatusCode)
		}
	}
	_, fields := lc.lines(t)
	for _, f := range fields {
		if f["level"] != "DEBUG" || f["msg"] == "proxy error" {
			t.Errorf("client mistake logged as %v %q", f["level"], f["msg"])
		}
	}
}

// TestOwnLoopH2CUpgradeIsNeverForwarded: TestH2CUpgradeIsNeverForwarded
// through the own HTTP/1.1 loop, whose requests skip hygiene's look for
// an upgrade: its parser hands a head with one to net/http, whose
// request gets that look.
func TestOwnLoopH2CUpgradeIsNeverForwarded(t *testing.T) {
	var mu sync.Mutex
	var sawUpgrade []string
	bh := h2c.NewHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		sawUpgrade = append(sawUpgrade, r.Header.Get("Upgrade")+"|"+r.Header.Get("Http2-Settings"))
		mu.Unlock()
		_, _ = io.WriteString(w, "ok")
	}), &http2.Server{})
	bs := httptest.NewServer(bh)
	t.Cleanup(bs.Close)
	h := newHarness(t, mustParse(t, simpleConfig(map[string]string{"d1": bs.URL}, "", "", "")), nil)
	front := ownLoopFront(t, h.p)
	for _, hdr := range []string{
		"",
		"Connection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA\r\n",
		"Connection: upgrade, http2-settings\r\nUpgrade: H2C/1.0\r\nHTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA\r\n",
	} {
		resp, err := testutil.RawRequest(t, front, "GET / HTTP/1.1\r\nHost: h\r\n"+hdr+"\r\n")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || string(body) != "ok" {
			t.Fatalf("%q: status %d body %q, want a plain HTTP/1.1 200", hdr, resp.StatusCode, body)
		}
		mu.Lock()
		got := sawUpgrade[len(sawUpgrade)-1]
		mu.Unlock()
		if got != "|" {
			t.Errorf("%q: backend saw Upgrade|HTTP2-Settings = %q", hdr, got)
		}
	}
}
