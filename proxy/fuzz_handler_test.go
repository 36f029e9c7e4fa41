package proxy

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tether-proxy/tether/proxy/forwarded"
	"github.com/tether-proxy/tether/proxy/hygiene"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// The fuzz targets here drive the whole data path from the outside: raw
// bytes on a client connection, through net/http's parser, routing,
// affinity (every policy) and forwarding, to an in-memory backend. They
// assert what DESIGN.md ("Forwarded headers and trust", "Errors") promises
// whatever a client sends: no panic,
// no 500, and no request reaching the backend with a header tether must
// remove or replace.

// memListener is an in-memory net.Listener: the proxy's Dial hands it one
// end of a net.Pipe, so the backend needs no socket.
type memListener struct {
	conns  chan net.Conn
	done   chan struct{}
	once   sync.Once
	local  net.Addr
	remote net.Addr
}

func newMemListener() *memListener {
	return &memListener{
		conns: make(chan net.Conn), done: make(chan struct{}),
		local:  &net.TCPAddr{IP: net.IPv4(192, 0, 2, 10), Port: 80},
		remote: &net.TCPAddr{IP: net.IPv4(192, 0, 2, 20), Port: 40000},
	}
}

func (l *memListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *memListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

func (l *memListener) Addr() net.Addr { return l.local }

// addrConn gives a pipe end TCP-looking addresses.
type addrConn struct {
	net.Conn
	local, remote net.Addr
}

func (c addrConn) LocalAddr() net.Addr  { return c.local }
func (c addrConn) RemoteAddr() net.Addr { return c.remote }

func (l *memListener) dial(ctx context.Context, _, _ string) (net.Conn, error) {
	client, server := net.Pipe()
	select {
	case l.conns <- addrConn{server, l.local, l.remote}:
		return addrConn{client, l.remote, l.local}, nil
	case <-l.done:
		return nil, net.ErrClosed
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// mustNotReach are headers no request may carry to a backend when the
// client is not a trusted proxy (DESIGN.md, "Forwarded headers and
// trust"): hop-by-hop headers,
// the client's forwarding headers, an h2c offer.
var mustNotReach = []string{
	"Connection", "Keep-Alive", "Proxy-Connection", "Te", "Trailer", "Transfer-Encoding", "Http2-Settings",
	"Forwarded", "X-Forwarded-Prefix", "X-Real-Ip", "X-Client-Ip", "True-Client-Ip", "X-Forwarded-Server",
	"X-Forwarded-Ssl", "Front-End-Https", "X-Forwarded-Scheme", "X-Original-For",
	"Client-Ip", "X-Forwarded", "X-Cluster-Client-Ip", "Forwarded-For",
}

// forwardingNames are the headers whose underscore spelling (X_Forwarded_For)
// must not reach a backend either: CGI-style servers fold it into the same
// variable.
var forwardingNames = append([]string{forwarded.XFF, forwarded.XFProto, forwarded.XFHost, forwarded.XFPort, forwarded.OriginalHost, forwarded.OriginalURL, forwarded.TraceHeader}, mustNotReach[7:]...)

// handlerFuzz is one proxy, its front listener and its backend, shared by
// every input of a fuzz worker.
type handlerFuzz struct {
	front    *httptest.Server
	port     string
	mu       sync.Mutex
	badReqs  []string
	inflight int
	logs     bytes.Buffer
}

func (hf *handlerFuzz) Write(p []byte) (int, error) {
	hf.mu.Lock()
	defer hf.mu.Unlock()
	return hf.logs.Write(p)
}

const fuzzRoutes = `{
  "ReverseProxy": {
    "Routes": {
      "cookie": { "ClusterId": "c", "Match": { "Path": "{**catch-all}" } },
      "header": { "ClusterId": "c", "Match": { "Path": "/h/{**rest}" },
                  "SessionAffinity": { "Enabled": true, "Policy": "CustomHeader", "AffinityKeyName": "X-Aff",
                                       "FailurePolicy": "Return503Error" } },
      "hash":   { "ClusterId": "c", "Match": { "Path": "/x/{id}/{**rest}", "Hosts": ["*.example", "h:8080"] },
                  "SessionAffinity": { "Enabled": true, "Policy": "HashCookie", "AffinityKeyName": ".H" } },
      "arr":    { "ClusterId": "c", "Match": { "Path": "/a/{**rest}", "Methods": ["GET", "POST"] },
                  "SessionAffinity": { "Enabled": true, "Policy": "ArrCookie", "AffinityKeyName": "ARRAffinity" } },
      "env":    { "ClusterId": "c", "Match": { "Path": "/e/{**rest}" }, "MaxRequestBodySize": 64,
                  "SessionAffinity": { "Enabled": true, "Policy": "EnvelopeCookie", "AffinityKeyName": "JSESSIONID" } },
      "envh":   { "ClusterId": "c", "Match": { "Path": "/eh/{**rest}" },
                  "SessionAffinity": { "Enabled": true, "Policy": "EnvelopeHeader", "AffinityKeyName": "X-Session" } }
    },
    "Clusters": {
      "c": {
        "SessionAffinity": { "Enabled": true, "Policy": "Cookie", "AffinityKeyName": ".A" },
        "HttpRequest": { "ActivityTimeout": "00:00:02" },
        "Destinations": { "d1": { "Address": "http://d1.test/" }, "d2": { "Address": "http://d2.test/base/" } }
      }
    }
  }
}`

func newHandlerFuzz(f testing.TB) *handlerFuzz {
	hf := &handlerFuzz{}
	ml := newMemListener()
	backend := &http.Server{Handler: http.HandlerFunc(hf.backend), ErrorLog: log.New(io.Discard, "", 0)}
	go func() { _ = backend.Serve(ml) }()
	f.Cleanup(func() { _ = backend.Close(); _ = ml.Close() })

	cfg := mustParse(f, fuzzRoutes)
	p, err := New(cfg, Options{
		Logger:  slog.New(slog.NewTextHandler(hf, nil)),
		Dial:    ml.dial,
		Keyring: testKeyring{},
	})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(p.Close)
	hf.front = httptest.NewUnstartedServer(p)
	hf.front.Config.ErrorLog = log.New(hf, "", 0)
	hf.front.Config.ReadHeaderTimeout = 2 * time.Second
	// HTTP/2 with prior knowledge on the same port, for FuzzHandlerHTTP2:
	// HTTP/2 lets a client send what HTTP/1's parser would refuse.
	hf.front.Config.Protocols = new(http.Protocols)
	hf.front.Config.Protocols.SetHTTP1(true)
	hf.front.Config.Protocols.SetUnencryptedHTTP2(true)
	hf.front.Start()
	f.Cleanup(hf.front.Close)
	_, hf.port, _ = net.SplitHostPort(hf.front.Listener.Addr().String())
	return hf
}

// backend checks every request that reaches it and answers with a
// session cookie, as a stateful application does.
func (hf *handlerFuzz) backend(w http.ResponseWriter, r *http.Request) {
	hf.mu.Lock()
	hf.inflight++
	hf.mu.Unlock()
	defer func() {
		hf.mu.Lock()
		hf.inflight--
		hf.mu.Unlock()
	}()
	var bad []string
	isUpgrade := r.Header.Get("Upgrade") != ""
	for _, k := range mustNotReach {
		v, ok := r.Header[k]
		switch {
		case !ok:
		case k == "Connection" && isUpgrade:
		case k == "Te" && len(v) == 1 && v[0] == "trailers": // kept for gRPC, as ReverseProxy does
		default:
			bad = append(bad, k+" reached the backend")
		}
	}
	for k := range r.Header {
		if strings.IndexByte(k, '_') < 0 {
			continue
		}
		ck := http.CanonicalHeaderKey(strings.ReplaceAll(k, "_", "-"))
		for _, n := range forwardingNames {
			if ck == n {
				bad = append(bad, k+" (underscore spelling) reached the backend")
			}
		}
		switch ck {
		case "Transfer-Encoding", "Content-Length", "Keep-Alive", "Proxy-Connection", "Http2-Settings", "Proxy-Authorization":
			bad = append(bad, k+" (underscore spelling of a framing or hop-by-hop field) reached the backend")
		}
	}
	for _, v := range r.Header.Values("Upgrade") {
		if strings.Contains(strings.ToLower(v), "h2c") {
			bad = append(bad, "Upgrade: "+v+" reached the backend")
		}
	}
	if !hygiene.VisibleASCII(r.RequestURI) {
		bad = append(bad, fmt.Sprintf("request target %q is not visible ASCII", r.RequestURI))
	}
	one := func(k, want string) {
		if v := r.Header.Values(k); len(v) != 1 || (want != "" && v[0] != want) {
			bad = append(bad, fmt.Sprintf("%s = %q, want %q", k, v, want))
		}
	}
	one("X-Forwarded-For", "127.0.0.1")
	one("X-Forwarded-Proto", "http")
	one("X-Forwarded-Port", hf.port)
	one("X-Forwarded-Host", r.Header.Get("X-Original-Host"))
	one("X-Original-Url", "")
	if v := r.Header.Values("X-Tether-Trace-Id"); len(v) != 1 || !forwarded.ValidTraceID(v[0]) {
		bad = append(bad, fmt.Sprintf("X-Tether-Trace-Id = %q", v))
	}
	if len(bad) > 0 {
		hf.mu.Lock()
		hf.badReqs = append(hf.badReqs, fmt.Sprintf("%s %s: %s", r.Method, r.RequestURI, strings.Join(bad, "; ")))
		hf.mu.Unlock()
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(r.Body, 1<<16))
	http.SetCookie(w, &http.Cookie{Name: "JSESSIONID", Value: "app-session"})
	w.Header().Set("X-Session", "app-session")
	_, _ = io.WriteString(w, "ok")
}

// exchange writes raw on a fresh connection, half-closes it, and reads
// every response. It fails on a 500 or on a violation the backend saw.
func (hf *handlerFuzz) exchange(t *testing.T, raw []byte) {
	conn, err := net.Dial("tcp", hf.front.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	go func() {
		_, _ = conn.Write(raw)
		_ = conn.(*net.TCPConn).CloseWrite()
	}()
	br := bufio.NewReader(conn)
	for i := 0; i < 64; i++ {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			break
		}
		if resp.StatusCode == http.StatusInternalServerError {
			t.Fatalf("500 for %q", raw)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	// Drain: the front has finished with every request once it closed;
	// the backend may still be running one tether gave up on.
	_, _ = io.Copy(io.Discard, br)
	hf.check(t, raw)
}

var rawSeeds = []string{
	"GET / HTTP/1.1\r\nHost: h\r\n\r\n",
	"GET /x/1/y HTTP/1.1\r\nHost: a.example\r\nCookie: .H=0123456789abcdef\r\n\r\n",
	"GET /a/ HTTP/1.1\r\nHost: h\r\nCookie: ARRAffinity=" + strings.Repeat("A", 64) + "\r\n\r\n",
	"GET /h/1 HTTP/1.1\r\nHost: h\r\nX-Aff: k1.d1\r\n\r\nGET /h/2 HTTP/1.1\r\nHost: h\r\nX-Aff: nope\r\n\r\n",
	"GET /e/ HTTP/1.1\r\nHost: h\r\nCookie: JSESSIONID=k1.garbage; .A=k1.d2\r\n\r\n",
	"GET /eh/ HTTP/1.1\r\nHost: h\r\nX-Session: \x00\xff\r\n\r\n",
	"POST /e/ HTTP/1.1\r\nHost: h\r\nContent-Length: 100\r\n\r\n" + strings.Repeat("b", 100),
	"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET /smuggled HTTP/1.1\r\nHost: h\r\n\r\n",
	"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
	"GET / HTTP/1.1\r\nHost: h\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: h\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: x:99999\r\nX-Forwarded-For: 6.6.6.6\r\nX-Forwarded-Port: 1\r\nForwarded: for=6.6.6.6\r\nX-Real-IP: 6.6.6.6\r\nTrue-Client-IP: 6.6.6.6\r\nX_Forwarded_For: 6.6.6.6\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: h\r\nConnection: X-Forwarded-For, X-Tether-Trace-Id, Keep-Alive\r\nKeep-Alive: 1\r\nTE: trailers\r\n\r\n",
	"GET http://abs.example:7777/p?q HTTP/1.1\r\nHost: other\r\n\r\n",
	"GET /public/%2e%2e/admin/../x HTTP/1.1\r\nHost: h\r\n\r\n",
	"OPTIONS * HTTP/1.1\r\nHost: h\r\n\r\n",
	"CONNECT h:443 HTTP/1.1\r\nHost: h:443\r\n\r\n",
	"GET / HTTP/1.0\r\n\r\n",
	"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
}

// FuzzHandlerRawRequest: arbitrary bytes on a client connection.
func FuzzHandlerRawRequest(f *testing.F) {
	hf := newHandlerFuzz(f)
	for _, s := range rawSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		if len(raw) > 1<<16 {
			return
		}
		hf.exchange(t, raw)
	})
}

// FuzzHandlerHeaders: a well-formed request line with arbitrary method,
// target, one arbitrary header and arbitrary affinity values for every
// policy (cookie, header, envelope).
func FuzzHandlerHeaders(f *testing.F) {
	hf := newHandlerFuzz(f)
	f.Add("GET", "/", "X-Forwarded-For", "6.6.6.6", "k1.d1", "k1.d2")
	f.Add("POST", "/h/x", "Upgrade", "h2c", "", "k1.zz")
	f.Add("GET", "/e/x", "Cookie", "JSESSIONID=k1.x", "\x00", "")
	f.Add("PUT", "/x/1/2", "Host", "a.example", "0123456789ABCDEF", "k1.")
	f.Add("GET", "/eh/", "X-Session", "k1.d1", "", strings.Repeat("k1.", 50))
	f.Add("get", "//x/../a/", "Transfer-Encoding", "chunked", "k1.d1; .A=k1.d2", "")
	f.Fuzz(func(t *testing.T, method, target, name, value, cookie, header string) {
		if len(method)+len(target)+len(name)+len(value)+len(cookie)+len(header) > 1<<14 {
			return
		}
		raw := fmt.Sprintf("%s %s HTTP/1.1\r\nHost: h\r\n%s: %s\r\nCookie: .A=%s; .H=%s; ARRAffinity=%s; JSESSIONID=%s\r\nX-Aff: %s\r\nX-Session: %s\r\nContent-Length: 0\r\n\r\n",
			method, target, name, value, cookie, cookie, cookie, cookie, header, header)
		hf.exchange(t, []byte(raw))
	})
}

// TestFuzzHarnessCatchesViolations: the harness itself fails when a header
// that must be removed reaches the backend (so a green fuzz run means
// something).
func TestFuzzHarnessCatchesViolations(t *testing.T) {
	hf := &handlerFuzz{port: "80"}
	r := httptest.NewRequest("GET", "/", nil)
	r.Header.Set("X-Real-Ip", "6.6.6.6")
	hf.backend(httptest.NewRecorder(), r)
	if len(hf.badReqs) == 0 || !strings.Contains(hf.badReqs[0], "X-Real-Ip") {
		t.Fatalf("violations %q", hf.badReqs)
	}
}

// exchangeH2 sends one HTTP/2 request with the given header fields (in
// order, pseudo-headers included, unchecked) on a fresh prior-knowledge
// connection and reads until its stream ends.
func (hf *handlerFuzz) exchangeH2(t *testing.T, fields []hpack.HeaderField) (status string) {
	conn, err := net.Dial("tcp", hf.front.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := io.WriteString(conn, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	fr := http2.NewFramer(conn, conn)
	fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	var block bytes.Buffer
	enc := hpack.NewEncoder(&block)
	for _, f := range fields {
		_ = enc.WriteField(f)
	}
	_ = fr.WriteSettings()
	_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: block.Bytes(), EndStream: true, EndHeaders: true})
read:
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			break
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				_ = fr.WriteSettingsAck()
			}
		case *http2.MetaHeadersFrame:
			if f.StreamID == 1 && status == "" {
				status = f.PseudoValue("status")
			}
			if f.StreamEnded() || !strings.HasPrefix(status, "1") {
				break read // the final status is all this needs
			}
		case *http2.DataFrame:
			if f.StreamEnded() {
				break read
			}
		case *http2.RSTStreamFrame, *http2.GoAwayFrame:
			break read
		}
	}
	conn.Close()
	if status == "500" {
		t.Fatalf("500 for %q", fields)
	}
	hf.check(t, fields)
	return status
}

// check fails on what the backend saw or the server logged for input.
func (hf *handlerFuzz) check(t *testing.T, input any) {
	deadline := time.Now().Add(2 * time.Second)
	hf.mu.Lock()
	defer func() {
		hf.badReqs = nil
		hf.logs.Reset()
		hf.mu.Unlock()
	}()
	for hf.inflight > 0 && time.Now().Before(deadline) {
		hf.mu.Unlock()
		time.Sleep(time.Millisecond)
		hf.mu.Lock()
	}
	if len(hf.badReqs) > 0 {
		t.Fatalf("for %q:\n%s", input, strings.Join(hf.badReqs, "\n"))
	}
	if s := hf.logs.String(); strings.Contains(s, "panic") {
		t.Fatalf("panic for %q:\n%s", input, s)
	}
}

// FuzzHandlerHTTP2: arbitrary pseudo-headers (:method, :authority, :path),
// an arbitrary header and affinity values over HTTP/2, whose framing lets
// a client send values HTTP/1's parser never lets through.
func FuzzHandlerHTTP2(f *testing.F) {
	hf := newHandlerFuzz(f)
	f.Add("GET", "h", "/", "x-forwarded-for", "6.6.6.6", "k1.d1")
	f.Add("GET", "a b", "/x/1/2", "upgrade", "h2c", "")
	f.Add("POST", "h:99999", "/h/1", "x-aff", "k1.d2", "\x00")
	f.Add("GET", "[::1]:443", "//x/../e/", "cookie", "JSESSIONID=k1.zz", "k1.")
	f.Add("CONNECT", "h:443", "", "te", "trailers", "")
	f.Add("GET", "<x>", "*", "connection", "close", "")
	f.Add("GET", "h", "/a?x HTTP/1.1 /admin", "x", "y", "")
	f.Add("POST", "h", "/", "transfer_encoding", "chunked", "")
	f.Add("GET", "h", "/caf\xc3\xa9/\x80", "x", "y", "")
	f.Fuzz(func(t *testing.T, method, authority, path, name, value, cookie string) {
		if len(method)+len(authority)+len(path)+len(name)+len(value)+len(cookie) > 1<<12 {
			return
		}
		hf.exchangeH2(t, []hpack.HeaderField{
			{Name: ":method", Value: method}, {Name: ":scheme", Value: "http"},
			{Name: ":authority", Value: authority}, {Name: ":path", Value: path},
			{Name: name, Value: value},
			{Name: "cookie", Value: ".A=" + cookie + "; .H=" + cookie + "; JSESSIONID=" + cookie},
			{Name: "x-aff", Value: cookie}, {Name: "x-session", Value: cookie},
		})
	})
}

// TestFuzzHarnessHTTP2ReachesTheBackend: the HTTP/2 harness does get
// requests through (a fuzz run that never reached the backend would prove
// nothing), with the forwarded headers checked.
func TestFuzzHarnessHTTP2ReachesTheBackend(t *testing.T) {
	hf := newHandlerFuzz(t)
	status := hf.exchangeH2(t, []hpack.HeaderField{
		{Name: ":method", Value: "GET"}, {Name: ":scheme", Value: "http"},
		{Name: ":authority", Value: "h"}, {Name: ":path", Value: "/x"},
		{Name: "x-forwarded-for", Value: "6.6.6.6"}, {Name: "x-real-ip", Value: "6.6.6.6"},
	})
	if status != "200" {
		t.Fatalf("status %q, want 200", status)
	}
}
