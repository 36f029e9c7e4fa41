package proxy

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/quic-go/quic-go/http3"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/tether-proxy/tether/proxy/config"
	"github.com/tether-proxy/tether/proxy/frontdoor"
)

// serverMode is one way a client reaches tether's data path: each is a
// listener configuration and the client that speaks to it.
type serverMode struct {
	name  string
	http1 frontdoor.HTTP1Server // cleartext HTTP/1.1 modes: who serves them
	http2 frontdoor.HTTP2Server // HTTP/2 modes: who serves them ("" is the default)
	h2c   bool                  // cleartext HTTP/2 with prior knowledge
	tls   bool
	h2    bool // over TLS: ALPN h2 (else http/1.1)
	h3    bool // HTTP/3 over QUIC (a listener with Protocols Http3)
	// altH3: a TLS mode's listener serves HTTP/3 too (Protocols
	// Http1AndHttp2AndHttp3); the client still speaks TCP.
	altH3 bool
}

// h1 reports whether the mode speaks HTTP/1.1 on the wire.
func (m serverMode) h1() bool { return !m.h2c && !m.h2 && !m.h3 }

func (m serverMode) scheme() string {
	if m.tls {
		return "https"
	}
	return "http"
}

// serverModes are every server mode a user can reach.
var serverModes = []serverMode{
	{name: "own-loop", http1: frontdoor.HTTP1Own},
	{name: "stdlib", http1: frontdoor.HTTP1Stdlib},
	{name: "h2c", http1: frontdoor.HTTP1Own, h2c: true},
	{name: "h2c-stdlib", http1: frontdoor.HTTP1Own, http2: frontdoor.HTTP2Stdlib, h2c: true},
	{name: "tls-h1", http1: frontdoor.HTTP1Own, tls: true},
	{name: "tls-h1-stdlib", http1: frontdoor.HTTP1Stdlib, tls: true},
	{name: "tls-h2", http1: frontdoor.HTTP1Own, tls: true, h2: true},
	{name: "tls-h2-stdlib", http1: frontdoor.HTTP1Own, http2: frontdoor.HTTP2Stdlib, tls: true, h2: true},
	// net/http's ServeTLS hands h2 to the own server (no own HTTP/1.1 loop).
	{name: "tls-h2-stdlib1", http1: frontdoor.HTTP1Stdlib, http2: frontdoor.HTTP2Own, tls: true, h2: true},
	// quic-go's http3 server on a listener with Protocols Http3.
	{name: "h3", http1: frontdoor.HTTP1Own, tls: true, h3: true},
}

// modeEnv is a proxy served by a real listening Server in one mode.
type modeEnv struct {
	t      *testing.T
	mode   serverMode
	p      *Proxy
	srv    *frontdoor.Server
	addr   string // host:port of the listener
	base   string // scheme://addr
	client *http.Client
	reg    *prometheus.Registry
	mu     sync.Mutex
	access bytes.Buffer
}

// startMode parses js (a configuration without Listeners), listens on
// 127.0.0.1:0 as mode asks and returns the running proxy.
func startMode(t *testing.T, mode serverMode, js string, mod func(*Options)) *modeEnv {
	t.Helper()
	cfg := mustParse(t, js)
	l := config.Listener{Address: "127.0.0.1:0"}
	switch {
	case mode.h2c:
		l.Protocols = config.ProtocolsHttp2
	case mode.h3:
		l.SelfSigned, l.Protocols = true, config.ProtocolsHttp3
	case mode.tls:
		l.SelfSigned = true
		if mode.altH3 {
			l.Protocols = config.ProtocolsHttp1AndHttp2AndHttp3
		}
	}
	cfg.Listeners = []config.Listener{l}
	e := &modeEnv{t: t, mode: mode, reg: prometheus.NewRegistry()}
	e.p = newTestProxy(t, cfg, e.reg, lockedWriter{&e.mu, &e.access}, mod)
	opts := []frontdoor.Option{frontdoor.WithHTTP1Server(mode.http1)}
	if mode.http2 != "" {
		opts = append(opts, frontdoor.WithHTTP2Server(mode.http2))
	}
	s, err := newFrontDoor(cfg, e.p, opts...)
	if err != nil {
		t.Fatalf("frontdoor.New: %v", err)
	}
	if err := s.Start(); err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = s.Shutdown(ctx)
	})
	e.srv = s
	e.addr = s.Addrs()[0].String()
	e.base = mode.scheme() + "://" + e.addr
	e.client = &http.Client{Transport: mode.roundTripper(t), Timeout: 10 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	t.Cleanup(e.client.CloseIdleConnections)
	return e
}

// roundTripper is a client transport that speaks the mode's protocol only:
// transport's, or quic-go's HTTP/3 client, closed when the test ends.
func (m serverMode) roundTripper(t *testing.T) http.RoundTripper {
	if !m.h3 {
		return m.transport()
	}
	tr := &http3.Transport{DisableCompression: true, TLSClientConfig: &tls.Config{InsecureSkipVerify: true}} // the listener's self-signed certificate
	t.Cleanup(func() { _ = tr.Close() })
	return tr
}

// transport is a client transport that speaks the mode's protocol only.
func (m serverMode) transport() *http.Transport {
	tr := &http.Transport{DisableCompression: true, Protocols: new(http.Protocols)}
	switch {
	case m.h2c:
		tr.Protocols.SetUnencryptedHTTP2(true)
	case m.h2:
		tr.Protocols.SetHTTP2(true)
	default:
		tr.Protocols.SetHTTP1(true)
	}
	if m.tls {
		tr.TLSClientConfig = &tls.Config{InsecureSkipVerify: true} // the listener's self-signed certificate
	}
	return tr
}

// do sends one request and returns the response with its body read.
func (e *modeEnv) do(method, path string, body io.Reader, hdr http.Header) (*http.Response, string, error) {
	req, err := http.NewRequest(method, e.base+path, body)
	if err != nil {
		e.t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header[k] = v
	}
	if h := hdr.Get("Host"); h != "" {
		req.Host = h
	}
	resp, err := e.client.Do(req)
	if err != nil {
		return nil, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp, string(b), err
}

// mustDo is do failing the test on a transport error.
func (e *modeEnv) mustDo(method, path string, body io.Reader, hdr http.Header) (*http.Response, string) {
	e.t.Helper()
	resp, b, err := e.do(method, path, body, hdr)
	if err != nil {
		e.t.Fatalf("%s %s: %v", method, path, err)
	}
	return resp, b
}

// connect opens a raw connection to the listener with d, TLS offering
// proto by ALPN in the TLS modes, closed when the test ends.
func (e *modeEnv) connect(d *net.Dialer, proto string) net.Conn {
	e.t.Helper()
	var c net.Conn
	var err error
	if e.mode.tls {
		c, err = tls.DialWithDialer(d, "tcp", e.addr, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{proto}})
	} else {
		c, err = d.Dial("tcp", e.addr)
	}
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { c.Close() })
	return c
}

// dial opens a raw connection to the listener (TLS with the mode's ALPN);
// only for the HTTP/1.1 modes.
func (e *modeEnv) dial() net.Conn {
	e.t.Helper()
	c := e.connect(&net.Dialer{}, "http/1.1")
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	return c
}

// dialSmallWindow is dial with a 4 KiB receive buffer set before the
// connection opens, so a client that stops reading holds the server's
// writes after a few responses (the server's send buffer grows only with
// what the window lets through), not after megabytes.
func (e *modeEnv) dialSmallWindow() net.Conn {
	e.t.Helper()
	d := &net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
		var serr error
		if err := rc.Control(func(fd uintptr) { serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096) }); err != nil {
			return err
		}
		return serr
	}}
	return e.connect(d, "http/1.1")
}

// raw writes req on a new raw connection and reads one response (its body
// read); only for the HTTP/1.1 modes.
func (e *modeEnv) raw(req string) (*http.Response, string, error) {
	c := e.dial()
	if _, err := io.WriteString(c, req); err != nil {
		return nil, "", err
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return nil, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp, string(b), err
}

// accessLines decodes the access log written so far.
func (e *modeEnv) accessLines() []map[string]any {
	e.t.Helper()
	e.mu.Lock()
	defer e.mu.Unlock()
	return jsonLines(e.t, e.access.Bytes())
}

// metric sums the samples of the named family whose labels include want.
func (e *modeEnv) metric(name string, want map[string]string) float64 {
	e.t.Helper()
	mfs, err := e.reg.Gather()
	if err != nil {
		e.t.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, lp := range m.GetLabel() {
				labels[lp.GetName()] = lp.GetValue()
			}
			for k, v := range want {
				if labels[k] != v {
					continue next
				}
			}
			switch {
			case m.GetCounter() != nil:
				sum += m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				sum += m.GetGauge().GetValue()
			case m.GetHistogram() != nil:
				sum += float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	return sum
}

// backendCfg is simpleConfig for one destination at url.
func backendCfg(url, cluster, route, top string) string {
	return simpleConfig(map[string]string{"d1": url}, cluster, route, top)
}

// forEachMode runs f as a subtest per server mode.
// Under -short only the default servers run (the own HTTP/1.1 loop, the
// own HTTP/2 server, HTTP/3); make test runs every mode.
func forEachMode(t *testing.T, f func(t *testing.T, m serverMode)) {
	for _, m := range serverModes {
		t.Run(m.name, func(t *testing.T) {
			if testing.Short() && (m.http1 == frontdoor.HTTP1Stdlib || m.http2 == frontdoor.HTTP2Stdlib) {
				t.Skip("a server chosen by a flag, not the default (make test runs every mode)")
			}
			f(t, m)
		})
	}
}

// h2Raw sends one HTTP/2 request with the given header fields as they are
// (pseudo-headers included, unchecked) on a new connection, in the mode's
// way (prior knowledge, or TLS with ALPN h2; HTTP/3 in the h3 mode,
// h3Raw), and returns the final status ("" when the stream was reset or
// the connection closed).
func (e *modeEnv) h2Raw(fields []hpack.HeaderField) string {
	e.t.Helper()
	if e.mode.h3 {
		return e.h3Raw(fields)
	}
	var conn net.Conn
	var err error
	if e.mode.tls {
		conn, err = tls.Dial("tcp", e.addr, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"h2"}})
	} else {
		conn, err = net.Dial("tcp", e.addr)
	}
	if err != nil {
		e.t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(conn, http2.ClientPreface); err != nil {
		e.t.Fatal(err)
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
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			return ""
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				_ = fr.WriteSettingsAck()
			}
		case *http2.MetaHeadersFrame:
			if st := f.PseudoValue("status"); f.StreamID == 1 && !strings.HasPrefix(st, "1") {
				return st
			}
		case *http2.RSTStreamFrame, *http2.GoAwayFrame:
			return ""
		}
	}
}

// h2Get is a GET's fields for h2Raw with the given :path.
func h2Get(path string) []hpack.HeaderField {
	return []hpack.HeaderField{{Name: ":method", Value: "GET"}, {Name: ":scheme", Value: "http"},
		{Name: ":authority", Value: "h"}, {Name: ":path", Value: path}}
}

// dialMode opens a raw connection to the listener as the mode's client
// would (TLS with the mode's ALPN); h2 modes get no preface.
func (e *modeEnv) dialMode() net.Conn {
	e.t.Helper()
	if !e.mode.tls {
		return e.dial()
	}
	proto := "http/1.1"
	if e.mode.h2 {
		proto = "h2"
	}
	return e.connect(&net.Dialer{}, proto)
}

// closedWithin reads c until the server closes it and returns how long
// that took; it fails the test when c is still open after limit.
func closedWithin(t *testing.T, c net.Conn, limit time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	_ = c.SetReadDeadline(start.Add(limit))
	_, err := io.Copy(io.Discard, c)
	took := time.Since(start)
	if err != nil {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			t.Fatalf("the connection was still open after %v", limit)
		}
	}
	return took
}

// newClient is a second client of the mode's kind, with its own
// connections.
func (e *modeEnv) newClient() *http.Client {
	c := &http.Client{Transport: e.mode.roundTripper(e.t), Timeout: 10 * time.Second}
	e.t.Cleanup(c.CloseIdleConnections)
	return c
}

// unsized hides a reader's length, so the client streams it (chunked in
// HTTP/1.1, DATA frames without a content-length in HTTP/2).
type unsized struct{ io.Reader }

// newClientDo sends one request on a new client's connection.
func (e *modeEnv) newClientDo(method, path string, hdr http.Header) (*http.Response, string, error) {
	req, err := http.NewRequest(method, e.base+path, nil)
	if err != nil {
		e.t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header[k] = v
	}
	return readAll(e.newClient().Do(req))
}

// newClientDoBody sends one request with body on a new client's
// connection.
func (e *modeEnv) newClientDoBody(method, path string, body io.Reader) (*http.Response, string, error) {
	req, err := http.NewRequest(method, e.base+path, body)
	if err != nil {
		e.t.Fatal(err)
	}
	return readAll(e.newClient().Do(req))
}

// readAll reads resp's body; resp stays non-nil when only the body's
// read failed.
func readAll(resp *http.Response, err error) (*http.Response, string, error) {
	if err != nil {
		return nil, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp, string(b), err
}
