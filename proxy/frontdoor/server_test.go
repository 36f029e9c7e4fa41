package frontdoor

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/tether-proxy/tether/proxy/config"
	"github.com/tether-proxy/tether/proxy/internal/cancelhook"
	"github.com/tether-proxy/tether/test/testutil"
)

func boolp(b bool) *bool { return &b }

func TestRedirectLocation(t *testing.T) {
	cases := []struct {
		desc   string
		rd     config.Redirect
		tls    bool
		target string
		host   string
		want   string
		status int
	}{
		{desc: "http to https drops the port, keeps path and query, 308 by default", rd: config.Redirect{Scheme: "https"},
			target: "/a/b?x=1", host: "example.com:8080", want: "https://example.com/a/b?x=1", status: 308},
		{desc: "explicit port", rd: config.Redirect{Scheme: "https", Port: 8443}, target: "/a", host: "example.com", want: "https://example.com:8443/a", status: 308},
		{desc: "default port for the scheme is omitted", rd: config.Redirect{Scheme: "https", Port: 443}, target: "/", host: "example.com:80", want: "https://example.com/", status: 308},
		{desc: "other host, same scheme keeps the request port", rd: config.Redirect{Host: "new.example"}, target: "/p", host: "old.example:8080", want: "http://new.example:8080/p", status: 308},
		{desc: "IncludePath false", rd: config.Redirect{Scheme: "https", IncludePath: boolp(false)}, target: "/p?q=1", host: "h", want: "https://h/?q=1", status: 308},
		{desc: "IncludeQueryString false", rd: config.Redirect{Scheme: "https", IncludeQueryString: boolp(false)}, target: "/p?q=1", host: "h", want: "https://h/p", status: 308},
		{desc: "StatusCode 301", rd: config.Redirect{Scheme: "https", StatusCode: 301}, target: "/", host: "h", want: "https://h/", status: 301},
		{desc: "https to http", rd: config.Redirect{Scheme: "http"}, tls: true, target: "/", host: "h:8443", want: "http://h/", status: 308},
		{desc: "IPv6 host keeps brackets", rd: config.Redirect{Scheme: "https"}, target: "/", host: "[::1]:8080", want: "https://[::1]/", status: 308},
	}
	for _, c := range cases {
		t.Run(c.desc, func(t *testing.T) {
			rd, err := newRedirect(&c.rd)
			if err != nil {
				t.Fatal(err)
			}
			req := httptest.NewRequest("GET", c.target, nil)
			req.Host = c.host
			if c.tls {
				req.TLS = &tls.ConnectionState{}
			}
			rec := httptest.NewRecorder()
			rd.ServeHTTP(rec, req)
			if rec.Code != c.status || rec.Header().Get("Location") != c.want {
				t.Errorf("got %d %q, want %d %q", rec.Code, rec.Header().Get("Location"), c.status, c.want)
			}
		})
	}
	for _, bad := range []config.Redirect{{StatusCode: 200}, {Scheme: "ftp"}, {Port: 70000}} {
		if _, err := newRedirect(&bad); err == nil {
			t.Errorf("newRedirect(%+v) accepted", bad)
		}
	}
}

// startServer runs a Server for cfg on 127.0.0.1:0 listeners.
func startServer(t *testing.T, cfg *config.Config, h http.Handler) *Server {
	t.Helper()
	s, err := New(cfg, h, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = s.Shutdown(ctx)
	})
	return s
}

func okHandler(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "ok") }

func TestServerLimits(t *testing.T) {
	cfg := &config.Config{
		Listeners: []config.Listener{{Address: "127.0.0.1:0"}},
		Limits: config.Limits{MaxRequestHeadersTotalSize: 2048,
			RequestHeadersTimeout: config.Duration{Duration: 300 * time.Millisecond}},
	}
	s := startServer(t, cfg, http.HandlerFunc(okHandler))
	addr := s.Addrs()[0].String()
	cases := []struct {
		desc string
		req  string
		want int
	}{
		{desc: "headers within MaxRequestHeadersTotalSize pass", req: "GET / HTTP/1.1\r\nHost: h\r\nX-A: " + strings.Repeat("a", 1500) + "\r\n\r\n", want: 200},
		{desc: "headers over MaxRequestHeadersTotalSize get 431", req: "GET / HTTP/1.1\r\nHost: h\r\nX-A: " + strings.Repeat("a", 2100) + "\r\n\r\n", want: 431},
		{desc: "far over the limit is cut by net/http with 431", req: "GET / HTTP/1.1\r\nHost: h\r\nX-A: " + strings.Repeat("a", 10000) + "\r\n\r\n", want: 431},
		{desc: "malformed Host is 400", req: "GET / HTTP/1.1\r\nHost: a b\r\n\r\n", want: 400},
	}
	for _, c := range cases {
		t.Run(c.desc, func(t *testing.T) {
			resp, err := testutil.RawRequest(t, addr, c.req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != c.want {
				t.Errorf("status %d, want %d", resp.StatusCode, c.want)
			}
		})
	}
	t.Run("slow header sender is cut after RequestHeadersTimeout", func(t *testing.T) {
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		start := time.Now()
		_, _ = io.WriteString(conn, "GET / HTTP/1.1\r\nHost: h\r\nX-Half: ")
		_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, err = io.ReadAll(conn) // returns when the server closes the connection
		if err != nil {
			t.Fatalf("connection not closed by the server: %v", err)
		}
		if el := time.Since(start); el > 3*time.Second {
			t.Fatalf("closed after %v", el)
		}
	})
}

// TestHeaderLimitExactOnOwnLoop: the own HTTP/1.1 loop's requests meet
// MaxRequestHeadersTotalSize at the byte, as headerLimit counts (the
// request line, each field's name and value without the spaces around
// it plus 4, the Cache-Control net/http adds for "Pragma: no-cache"), for
// heads whose size is below that count (empty values) and above it
// (spaces around values): a limit of the count passes, one less is 431.
func TestHeaderLimitExactOnOwnLoop(t *testing.T) {
	cases := []struct {
		desc, fields string
		count        int
	}{
		{"empty values", strings.Repeat("A:\r\n", 200), 200 * (1 + 4)},
		{"spaces around values", strings.Repeat("X-B:    v    \r\n", 20), 20 * (3 + 1 + 4)},
		{"Pragma: no-cache", "Pragma: no-cache\r\n", 6 + 8 + 4 + len("Cache-Control") + len("no-cache") + 4},
	}
	own := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if cancelhook.Parsed(r.Context()) != "" {
			w.Header().Set("X-Own-Loop", "1")
		}
	})
	for _, c := range cases {
		req := "GET / HTTP/1.1\r\nHost: h\r\n" + c.fields + "\r\n"
		count := len("GET") + len("/") + len("HTTP/1.1") + 4 + len("Host") + len("h") + 4 + c.count
		for _, limit := range []int{count, count - 1} {
			want := 200
			if limit < count {
				want = 431
			}
			cfg := &config.Config{
				Listeners: []config.Listener{{Address: "127.0.0.1:0"}},
				Limits:    config.Limits{MaxRequestHeadersTotalSize: limit},
			}
			s := startServer(t, cfg, own)
			resp, err := testutil.RawRequest(t, s.Addrs()[0].String(), req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != want {
				t.Errorf("%s, a %d-byte head counted %d, limit %d: status %d, want %d", c.desc, len(req), count, limit, resp.StatusCode, want)
			}
			if want == 200 && resp.Header.Get("X-Own-Loop") == "" {
				t.Errorf("%s: not served by the own loop", c.desc)
			}
		}
	}
}

func TestServerRedirectListener(t *testing.T) {
	cfg := &config.Config{Listeners: []config.Listener{
		{Address: "127.0.0.1:0"},
		{Address: "127.0.0.1:0", Redirect: &config.Redirect{Scheme: "https", Port: 8443}},
	}}
	s := startServer(t, cfg, http.HandlerFunc(okHandler))
	if len(s.Addrs()) != 2 {
		t.Fatalf("Addrs = %v", s.Addrs())
	}
	resp, err := testutil.RawRequest(t, s.Addrs()[1].String(), "GET /p?q=1 HTTP/1.1\r\nHost: example.com\r\n\r\n")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 308 || resp.Header.Get("Location") != "https://example.com:8443/p?q=1" {
		t.Fatalf("got %d %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	resp, err = testutil.RawRequest(t, s.Addrs()[0].String(), "GET / HTTP/1.1\r\nHost: example.com\r\n\r\n")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("plain listener status %d", resp.StatusCode)
	}
}

// serverOnAPortInUse is a Server whose second listener's address (inUse)
// another socket listens on until the test ends.
func serverOnAPortInUse(t *testing.T) (s *Server, inUse string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	cfg := &config.Config{Listeners: []config.Listener{{Address: "127.0.0.1:0"}, {Address: ln.Addr().String()}}}
	s, err = New(cfg, http.HandlerFunc(okHandler), nil)
	if err != nil {
		t.Fatal(err)
	}
	return s, ln.Addr().String()
}

func TestServerStartNamesAddressInUse(t *testing.T) {
	s, inUse := serverOnAPortInUse(t)
	err := s.Start()
	if err == nil || !strings.Contains(err.Error(), inUse) {
		t.Fatalf("Start = %v, want an error naming %s", err, inUse)
	}
}

func TestHTTPSListenerServesHTTP2(t *testing.T) {
	cert, key, pool := testutil.CertFiles(t)
	cfg := &config.Config{Listeners: []config.Listener{{Address: "127.0.0.1:0", Certificate: &config.Certificate{Path: cert, KeyPath: key}}}}
	s := startServer(t, cfg, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "%s %v", r.Proto, r.TLS != nil)
	}))
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, ForceAttemptHTTP2: true}}
	defer client.CloseIdleConnections()
	status, _, body := testutil.Get(t, client, "https://"+s.Addrs()[0].String()+"/", nil)
	if status != 200 || body != "HTTP/2.0 true" {
		t.Fatalf("got %d %q, want HTTP/2.0 over TLS", status, body)
	}
}

func TestNewServerNamesBadCertificate(t *testing.T) {
	cfg := &config.Config{Listeners: []config.Listener{{Address: "127.0.0.1:0", Certificate: &config.Certificate{Path: "/nonexistent.pem", KeyPath: "/nonexistent.key"}}}}
	_, err := New(cfg, http.HandlerFunc(okHandler), nil)
	var ces config.Errors
	if !errors.As(err, &ces) || ces[0].Path != "Listeners[0].Certificate" || !strings.Contains(ces[0].Message, "/nonexistent.pem") {
		t.Fatalf("err = %v", err)
	}
}

// TestGracefulShutdown: an in-flight slow request completes while new
// connections are refused.
func TestGracefulShutdown(t *testing.T) {
	checkGracefulStop(t, config.Listener{Address: "127.0.0.1:0"},
		func(addr, path string) (string, error) { return bodyOf(http.Get("http://" + addr + path)) },
		func(addr string) bool {
			c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
			if err != nil {
				return true
			}
			c.Close()
			return false
		})
}

// bodyOf reads the body of a client's answer.
func bodyOf(resp *http.Response, err error) (string, error) {
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

// checkGracefulStop starts a Server with listener l whose handler holds
// GET /slow until the test lets it go, sends that request with get, and
// stops the server while it is in flight: the stop comes into force
// (refused, polled, says so), then the request in flight finishes with
// its answer and Shutdown returns nil within its timeout.
func checkGracefulStop(t *testing.T, l config.Listener, get func(addr, path string) (string, error), refused func(addr string) bool) {
	t.Helper()
	started, release := make(chan struct{}), make(chan struct{})
	s, err := New(&config.Config{Listeners: []config.Listener{l}}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			close(started)
			<-release
		}
		_, _ = io.WriteString(w, "done")
	}), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	addr := s.Addrs()[0].String()
	type result struct {
		body string
		err  error
	}
	res := make(chan result, 1)
	go func() {
		body, err := get(addr, "/slow")
		res <- result{body, err}
	}()
	<-started
	shut := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		shut <- s.Shutdown(ctx)
	}()
	testutil.Eventually(t, 5*time.Second, "new requests refused once the stop began", func() bool { return refused(addr) })
	close(release)
	if r := <-res; r.err != nil || r.body != "done" {
		t.Fatalf("in-flight request: %q %v", r.body, r.err)
	}
	select {
	case err := <-shut:
		if err != nil {
			t.Fatalf("Shutdown: %v", err)
		}
	case <-time.After(6 * time.Second):
		t.Fatal("Shutdown did not return within its timeout")
	}
}

func TestShutdownClosesAfterDeadline(t *testing.T) {
	started := make(chan struct{})
	block := make(chan struct{})
	defer close(block)
	cfg := &config.Config{Listeners: []config.Listener{{Address: "127.0.0.1:0"}}}
	s, _ := New(cfg, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(started)
		select {
		case <-block:
		case <-r.Context().Done():
		}
	}), nil)
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		resp, err := http.Get("http://" + s.Addrs()[0].String() + "/")
		if err == nil {
			resp.Body.Close()
		}
	}()
	<-started
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- s.Shutdown(ctx) }()
	select {
	case err := <-done:
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Shutdown = %v, want deadline exceeded", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Shutdown did not return after its deadline")
	}
}

func FuzzRedirectLocation(f *testing.F) {
	f.Add("example.com:8080", "/a?b=c")
	f.Add("[::1]", "/")
	f.Add("", "")
	rd, _ := newRedirect(&config.Redirect{Scheme: "https"})
	f.Fuzz(func(t *testing.T, host, target string) {
		req := httptest.NewRequest("GET", "/", nil)
		req.Host = host
		req.URL.Path = target
		loc := rd.location(req)
		if !strings.HasPrefix(loc, "https://") {
			t.Fatalf("location %q", loc)
		}
	})
}

// TestPrepareCertificatesRotatesWithoutRestart: a reload swaps an HTTPS
// listener's certificate for new handshakes; a certificate that fails to
// load swaps nothing.
func TestPrepareCertificatesRotatesWithoutRestart(t *testing.T) {
	certA, keyA, _ := testutil.CertFiles(t)
	certB, keyB, _ := testutil.CertFiles(t)
	cfg := &config.Config{Listeners: []config.Listener{{Address: "127.0.0.1:0", Certificate: &config.Certificate{Path: certA, KeyPath: keyA}}}}
	s := startServer(t, cfg, http.HandlerFunc(okHandler))
	leaf := func() []byte {
		conn, err := tls.Dial("tcp", s.Addrs()[0].String(), &tls.Config{InsecureSkipVerify: true})
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		return conn.ConnectionState().PeerCertificates[0].Raw
	}
	fileDER := func(path string) []byte {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		blk, _ := pem.Decode(b)
		return blk.Bytes
	}
	if !bytes.Equal(leaf(), fileDER(certA)) {
		t.Fatal("listener does not serve certificate A")
	}

	bad := &config.Config{Listeners: []config.Listener{{Address: "127.0.0.1:0", Certificate: &config.Certificate{Path: certB, KeyPath: keyA}}}}
	if _, err := s.PrepareCertificates(bad); err == nil || !strings.Contains(err.Error(), "Listeners[0].Certificate") {
		t.Fatalf("mismatched key accepted: %v", err)
	}
	if !bytes.Equal(leaf(), fileDER(certA)) {
		t.Fatal("a failed reload changed the certificate")
	}

	next := &config.Config{Listeners: []config.Listener{{Address: "127.0.0.1:0", Certificate: &config.Certificate{Path: certB, KeyPath: keyB}}}}
	apply, err := s.PrepareCertificates(next)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(leaf(), fileDER(certA)) {
		t.Fatal("certificate swapped before apply")
	}
	apply()
	if !bytes.Equal(leaf(), fileDER(certB)) {
		t.Fatal("listener does not serve certificate B after apply")
	}
}
