package frontdoor

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"
	h3qlog "github.com/quic-go/quic-go/http3/qlog"
	"github.com/quic-go/quic-go/qlogwriter"

	"github.com/tether-proxy/tether/proxy/config"
	"github.com/tether-proxy/tether/test/testutil"
)

// h3Client is an HTTP/3 client trusting pool, with a session cache (so a
// second connection resumes, with 0-RTT where the server takes it).
func h3Client(t *testing.T, pool *x509.CertPool, cache tls.ClientSessionCache) (*http.Client, *http3.Transport) {
	t.Helper()
	tr := &http3.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: "127.0.0.1", ClientSessionCache: cache}}
	t.Cleanup(func() { _ = tr.Close() })
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}, tr
}

func h3Listener(t *testing.T, protocols string) (config.Listener, *x509.CertPool) {
	t.Helper()
	cert, key, pool := testutil.CertFiles(t)
	return certListener(cert, key, protocols, false), pool
}

func h3Get(t *testing.T, c *http.Client, url string) (*http.Response, string) {
	t.Helper()
	resp, err := c.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, string(b)
}

func TestHTTP3BesideTCPAdvertisedByAltSvc(t *testing.T) {
	l, pool := h3Listener(t, config.ProtocolsHttp1AndHttp2AndHttp3)
	s := startServer(t, &config.Config{Listeners: []config.Listener{l}}, http.HandlerFunc(protoHandler))
	addr := s.Addrs()[0].String()
	_, port, _ := net.SplitHostPort(addr)

	tcp := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, ForceAttemptHTTP2: true}}
	defer tcp.CloseIdleConnections()
	status, hdr, body := testutil.Get(t, tcp, "https://"+addr+"/", nil)
	want := `h3=":` + port + `"; ma=86400`
	if status != 200 || body != "HTTP/2.0 true" || hdr.Get("Alt-Svc") != want {
		t.Fatalf("over TCP: %d %q Alt-Svc %q, want 200 over HTTP/2 advertising %q", status, body, hdr.Get("Alt-Svc"), want)
	}

	c, _ := h3Client(t, pool, nil)
	resp, body := h3Get(t, c, "https://"+addr+"/")
	if resp.StatusCode != 200 || body != "HTTP/3.0 true" || resp.Header.Get("Alt-Svc") != "" {
		t.Fatalf("over QUIC: %d %q Alt-Svc %q", resp.StatusCode, body, resp.Header.Get("Alt-Svc"))
	}
}

func TestHTTP3AloneOpensNoTCPSocket(t *testing.T) {
	l, pool := h3Listener(t, config.ProtocolsHttp3)
	s := startServer(t, &config.Config{Listeners: []config.Listener{l}}, http.HandlerFunc(protoHandler))
	addr := s.Addrs()[0]
	if _, ok := addr.(*net.UDPAddr); !ok {
		t.Fatalf("Addrs()[0] = %T %v, want the UDP socket", addr, addr)
	}
	if c, err := net.DialTimeout("tcp", addr.String(), time.Second); err == nil {
		c.Close()
		t.Fatalf("a TCP connection to %s was accepted", addr)
	}
	c, _ := h3Client(t, pool, nil)
	if resp, body := h3Get(t, c, "https://"+addr.String()+"/"); resp.StatusCode != 200 || body != "HTTP/3.0 true" {
		t.Fatalf("over QUIC: %d %q", resp.StatusCode, body)
	}
}

func TestHTTP3NeedsTLS(t *testing.T) {
	l := config.Listener{Address: "127.0.0.1:0", ListenerOptions: config.ListenerOptions{KestrelEndpointDefaults: config.KestrelEndpointDefaults{Protocols: config.ProtocolsHttp3}}}
	_, err := New(&config.Config{Listeners: []config.Listener{l}}, http.HandlerFunc(okHandler), nil)
	var ces config.Errors
	if !errors.As(err, &ces) || ces[0].Path != "Listeners[0].Protocols" || !strings.Contains(ces[0].Message, "needs TLS") {
		t.Fatalf("err = %v, want one naming Listeners[0].Protocols", err)
	}
}

// TestHTTP3UDPInUse: a UDP socket that cannot bind fails Start (and
// Reserve) with an error naming the address, and releases the TCP socket.
func TestHTTP3UDPInUse(t *testing.T) {
	// A UDP port held by another socket whose TCP port is free.
	pc := testutil.TakenUDPPort(t)
	addr := pc.LocalAddr().String()
	for _, reserve := range []bool{false, true} {
		t.Run(fmt.Sprintf("reserve=%v", reserve), func(t *testing.T) {
			l, _ := h3Listener(t, config.ProtocolsHttp1AndHttp2AndHttp3)
			l.Address = addr
			s, err := New(&config.Config{Listeners: []config.Listener{l}}, http.HandlerFunc(okHandler), nil)
			if err != nil {
				t.Fatal(err)
			}
			if reserve {
				err = s.Reserve()
			} else {
				err = s.Start()
			}
			if err == nil || !strings.Contains(err.Error(), addr) || !strings.Contains(err.Error(), "UDP") {
				_ = s.Shutdown(t.Context())
				t.Fatalf("err = %v, want one naming %s (UDP)", err, addr)
			}
			ln, err := net.Listen("tcp", addr)
			if err != nil {
				t.Fatalf("the TCP port was not released: %v", err)
			}
			ln.Close()
		})
	}
}

// TestHTTP3ReservedThenStarted: Reserve holds the UDP port beside the TCP
// one (the same number), Start serves it.
func TestHTTP3ReservedThenStarted(t *testing.T) {
	l, pool := h3Listener(t, config.ProtocolsHttp1AndHttp2AndHttp3)
	s, err := New(&config.Config{Listeners: []config.Listener{l}}, http.HandlerFunc(protoHandler), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Shutdown(context.Background()) })
	if err := s.Reserve(); err != nil {
		t.Fatal(err)
	}
	addr := s.Addrs()[0].String()
	if pc, err := net.ListenPacket("udp", addr); err == nil {
		pc.Close()
		t.Fatalf("UDP %s is free after Reserve", addr)
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	c, _ := h3Client(t, pool, nil)
	if resp, body := h3Get(t, c, "https://"+addr+"/"); resp.StatusCode != 200 || body != "HTTP/3.0 true" {
		t.Fatalf("over QUIC: %d %q", resp.StatusCode, body)
	}
}

// TestHTTP3GracefulStop: Shutdown sends GOAWAY, lets the request in flight
// finish, and a new request is refused.
func TestHTTP3GracefulStop(t *testing.T) {
	l, pool := h3Listener(t, config.ProtocolsHttp3)
	c, _ := h3Client(t, pool, nil)
	checkGracefulStop(t, l,
		func(addr, path string) (string, error) { return bodyOf(c.Get("https://" + addr + path)) },
		// The connection has the GOAWAY once a new request on it is refused.
		func(addr string) bool {
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, "GET", "https://"+addr+"/new", nil)
			resp, err := c.Do(req)
			if err == nil {
				resp.Body.Close()
			}
			return err != nil
		})
}

// TestHTTP3ShutdownEndsAtItsDeadline: a request that does not finish is
// cut when the shutdown timeout ends.
func TestHTTP3ShutdownEndsAtItsDeadline(t *testing.T) {
	l, pool := h3Listener(t, config.ProtocolsHttp3)
	started := make(chan struct{})
	s, err := New(&config.Config{Listeners: []config.Listener{l}}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(started)
		<-r.Context().Done()
	}), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	c, _ := h3Client(t, pool, nil)
	go func() {
		if resp, err := c.Get("https://" + s.Addrs()[0].String() + "/"); err == nil {
			resp.Body.Close()
		}
	}()
	<-started
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	begin := time.Now()
	_ = s.Shutdown(ctx)
	if d := time.Since(begin); d > 3*time.Second {
		t.Fatalf("Shutdown took %v with a 300ms timeout", d)
	}
}

// earlyClient dials addr over QUIC with 0-RTT when the cache holds a
// ticket that allows it.
type earlyClient struct {
	tr    *quic.Transport
	pc    *lateHandshake
	tls   *tls.Config
	addr  *net.UDPAddr
	mu    sync.Mutex
	conns []*quic.Conn
}

// lateHandshake is a client socket that can hold back its Handshake
// packets (the client's Finished), so that a request sent in 0-RTT is
// answered before the server's handshake completes, as over a long round
// trip.
type lateHandshake struct {
	net.PacketConn
	mu   sync.Mutex
	hold bool
	held []func()
	// gate, while open, holds back what the server sends: quic-go's
	// client opening a stream in 0-RTT races (go test -race) with its
	// reading of the server's transport parameters, so the gate opens
	// once the client has opened every stream it will before the
	// handshake completes (its request stream, and its control stream,
	// which the http3 client opens on a goroutine of its own:
	// controlOpened).
	gate chan struct{}
}

// controlOpened is a qlog trace of a client connection that closes
// opened once the connection's HTTP/3 control stream is open.
type controlOpened struct {
	once   sync.Once
	opened chan struct{}
}

func newControlOpened() *controlOpened {
	return &controlOpened{opened: make(chan struct{})}
}

func (c *controlOpened) AddProducer() qlogwriter.Recorder { return c }

func (c *controlOpened) RecordEvent(e qlogwriter.Event) {
	if st, ok := e.(h3qlog.StreamTypeSet); ok && st.Initiator == h3qlog.InitiatorLocal && st.StreamType == h3qlog.StreamTypeControl {
		c.once.Do(func() { close(c.opened) })
	}
}

func (c *controlOpened) Close() error { return nil }

func (c *lateHandshake) ReadFrom(b []byte) (int, net.Addr, error) {
	n, a, err := c.PacketConn.ReadFrom(b)
	c.mu.Lock()
	g := c.gate
	c.mu.Unlock()
	if g != nil {
		<-g
	}
	return n, a, err
}

// holdServer holds back the server's packets until the returned open.
func (c *lateHandshake) holdServer() (open func()) {
	g := make(chan struct{})
	c.mu.Lock()
	c.gate = g
	c.mu.Unlock()
	return sync.OnceFunc(func() {
		c.mu.Lock()
		c.gate = nil
		c.mu.Unlock()
		close(g)
	})
}

// hasHandshakePacket reports whether datagram b holds a QUIC version 1
// Handshake packet (alone, or coalesced after an Initial one).
func hasHandshakePacket(b []byte) bool {
	varint := func(b []byte) (uint64, int) {
		if len(b) == 0 {
			return 0, 0
		}
		n := 1 << (b[0] >> 6)
		if len(b) < n {
			return 0, 0
		}
		v := uint64(b[0] & 0x3f)
		for _, x := range b[1:n] {
			v = v<<8 | uint64(x)
		}
		return v, n
	}
	for len(b) > 7 && b[0]&0x80 != 0 {
		typ := b[0] & 0x30
		if typ == 0x20 {
			return true
		}
		i := 5 // first byte, version
		i += 1 + int(b[i])
		if i >= len(b) {
			return false
		}
		i += 1 + int(b[i])
		if typ == 0x00 { // Initial: the token
			tl, n := varint(b[min(i, len(b)):])
			if n == 0 {
				return false
			}
			i += n + int(tl)
		}
		l, n := varint(b[min(i, len(b)):])
		if n == 0 {
			return false
		}
		i += n + int(l)
		if i > len(b) {
			return false
		}
		b = b[i:]
	}
	return false
}

func (c *lateHandshake) WriteTo(b []byte, a net.Addr) (int, error) {
	if hasHandshakePacket(b) {
		c.mu.Lock()
		if c.hold {
			late := bytes.Clone(b)
			c.held = append(c.held, func() { _, _ = c.PacketConn.WriteTo(late, a) })
			c.mu.Unlock()
			return len(b), nil
		}
		c.mu.Unlock()
	}
	return c.PacketConn.WriteTo(b, a)
}

// holdHandshake holds Handshake packets until the returned release (or,
// should the server not answer before the handshake, 10 s).
func (c *lateHandshake) holdHandshake() (release func()) {
	c.mu.Lock()
	c.hold = true
	c.mu.Unlock()
	release = sync.OnceFunc(func() {
		c.mu.Lock()
		held := c.held
		c.hold, c.held = false, nil
		c.mu.Unlock()
		for _, send := range held {
			send()
		}
	})
	time.AfterFunc(10*time.Second, release)
	return release
}

func newEarlyClient(t *testing.T, addr string, pool *x509.CertPool) *earlyClient {
	t.Helper()
	udp, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	pc := &lateHandshake{PacketConn: udp}
	ua, err := net.ResolveUDPAddr("udp", addr)
	if err != nil {
		t.Fatal(err)
	}
	c := &earlyClient{tr: &quic.Transport{Conn: pc}, pc: pc, addr: ua,
		tls: &tls.Config{RootCAs: pool, ServerName: "127.0.0.1", NextProtos: []string{http3.NextProtoH3}, ClientSessionCache: tls.NewLRUClientSessionCache(8)}}
	t.Cleanup(func() {
		c.mu.Lock()
		for _, qc := range c.conns {
			_ = qc.CloseWithError(0, "")
		}
		c.mu.Unlock()
		_ = c.tr.Close()
		_ = pc.Close()
	})
	return c
}

// at is a client of addr with c's tickets: the client, now asking
// another node.
func (c *earlyClient) at(t *testing.T, addr string) *earlyClient {
	t.Helper()
	n := newEarlyClient(t, addr, c.tls.RootCAs)
	n.tls.ClientSessionCache = c.tls.ClientSessionCache
	return n
}

// do sends req on a new connection, before the handshake completes when
// 0-RTT is possible; it returns the status and whether 0-RTT was used.
// With early, the client's Finished is held until the answer came.
func (c *earlyClient) do(t *testing.T, method string, early bool) (int, bool) {
	t.Helper()
	release, open := func() {}, func() {}
	if early {
		release, open = c.pc.holdHandshake(), c.pc.holdServer()
	}
	defer release()
	defer open()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	control := newControlOpened()
	qc, err := c.tr.DialEarly(ctx, c.addr, c.tls, &quic.Config{
		Tracer: func(context.Context, bool, quic.ConnectionID) qlogwriter.Trace { return control },
	})
	if err != nil {
		t.Fatal(err)
	}
	c.mu.Lock()
	c.conns = append(c.conns, qc)
	c.mu.Unlock()
	cc := (&http3.Transport{}).NewClientConn(qc)
	str, err := cc.OpenRequestStream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequestWithContext(ctx, method, "https://127.0.0.1:"+strconv.Itoa(c.addr.Port)+"/", nil)
	if err := str.SendRequestHeader(req); err != nil {
		t.Fatal(err)
	}
	_ = str.Close()
	select {
	case <-control.opened:
	case <-ctx.Done():
		t.Fatal("the HTTP/3 client opened no control stream")
	}
	open()
	resp, err := str.ReadResponse()
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	release()
	<-qc.HandshakeComplete()
	return resp.StatusCode, qc.ConnectionState().Used0RTT
}

// TestHTTP3ZeroRTT: early data is refused unless AllowZeroRtt; with it,
// safe methods are served from it (marked Early-Data: 1 for the
// backend) and the others answered 425.
func TestHTTP3ZeroRTT(t *testing.T) {
	t.Setenv("QUIC_GO_DISABLE_RECEIVE_BUFFER_WARNING", "true") // *lateHandshake is no *net.UDPConn
	for _, allow := range []bool{false, true} {
		t.Run(fmt.Sprintf("AllowZeroRtt=%v", allow), func(t *testing.T) {
			l, pool := h3Listener(t, config.ProtocolsHttp3)
			l.AllowZeroRtt = allow
			var mu sync.Mutex
			var early []string
			s := startServer(t, &config.Config{Listeners: []config.Listener{l}}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				mu.Lock()
				early = append(early, r.Method+" "+r.Header.Get("Early-Data"))
				mu.Unlock()
			}))
			c := newEarlyClient(t, s.Addrs()[0].String(), pool)
			if status, used := c.do(t, "GET", false); status != 200 || used {
				t.Fatalf("first connection: %d, 0-RTT %v", status, used)
			}
			for _, m := range []string{"GET", "HEAD", "OPTIONS", "POST", "DELETE"} {
				status, used := c.do(t, m, allow)
				want := 200
				if allow && m != "GET" && m != "HEAD" && m != "OPTIONS" {
					want = http.StatusTooEarly
				}
				if used != allow || status != want {
					t.Errorf("%s on a resumed connection: %d, 0-RTT %v; want %d, 0-RTT %v", m, status, used, want, allow)
				}
			}
			mu.Lock()
			defer mu.Unlock()
			for _, e := range early[1:] {
				if marked := strings.HasSuffix(e, " 1"); marked != allow {
					t.Errorf("handler saw %q; Early-Data marked %v, want %v", e, marked, allow)
				}
			}
		})
	}
}

// h3Resumes makes a GET over a new QUIC connection to addr with the
// client's session cache and reports whether the session was resumed.
func h3Resumes(t *testing.T, addr string, pool *x509.CertPool, cache tls.ClientSessionCache) bool {
	t.Helper()
	c, tr := h3Client(t, pool, cache)
	resp, _ := h3Get(t, c, "https://"+addr+"/")
	// The ticket follows the handshake; the next connection needs it.
	_ = tr.Close()
	return resp.TLS != nil && resp.TLS.DidResume
}

// TestHTTP3SessionResumesOnEveryNodeSharingTheKeys: QUIC's TLS seals
// tickets with the cluster's keys as TCP's does, so a session a node
// started resumes on another; a node with other keys does a full
// handshake.
func TestHTTP3SessionResumesOnEveryNodeSharingTheKeys(t *testing.T) {
	certFile, keyFile, pool := testutil.CertFiles(t)
	for _, sni := range []bool{false, true} {
		t.Run(fmt.Sprintf("sni=%v", sni), func(t *testing.T) {
			shared := &ticketSource{}
			shared.set(ticketKey(1))
			other := &ticketSource{}
			other.set(ticketKey(2))
			start := func(src TicketKeySource) string {
				l := certListener(certFile, keyFile, config.ProtocolsHttp1AndHttp2AndHttp3, sni)
				return serveWithTickets(t, &config.Config{Listeners: []config.Listener{l}}, src)
			}
			a, b, c := start(shared), start(shared), start(other)
			cache := tls.NewLRUClientSessionCache(8)
			if h3Resumes(t, a, pool, cache) {
				t.Fatal("the first connection resumed")
			}
			testutil.Eventually(t, 5*time.Second, "a ticket from node a resumes on node b", func() bool {
				return h3Resumes(t, b, pool, cache)
			})
			fresh := tls.NewLRUClientSessionCache(8)
			h3Resumes(t, a, pool, fresh)
			if h3Resumes(t, c, pool, fresh) {
				t.Fatal("a node with other ticket keys resumed node a's session")
			}
		})
	}
}

// retryCounter is a client socket that counts the QUIC Retry packets it
// receives (long header, type 3 in QUIC version 1).
type retryCounter struct {
	net.PacketConn
	n atomic.Int64
}

func (c *retryCounter) ReadFrom(b []byte) (int, net.Addr, error) {
	n, a, err := c.PacketConn.ReadFrom(b)
	if n > 0 && b[0]&0x80 != 0 && b[0]&0x30 == 0x30 {
		c.n.Add(1)
	}
	return n, a, err
}

// TestHTTP3RetryUnderAFloodOfHandshakes: below the threshold a handshake
// gets no Retry; past it, every new one is validated first, and still
// succeeds.
func TestHTTP3RetryUnderAFloodOfHandshakes(t *testing.T) {
	t.Setenv("QUIC_GO_DISABLE_RECEIVE_BUFFER_WARNING", "true") // the counting socket is no *net.UDPConn
	l, pool := h3Listener(t, config.ProtocolsHttp3)
	s, err := New(&config.Config{Listeners: []config.Listener{l}}, http.HandlerFunc(okHandler), nil)
	if err != nil {
		t.Fatal(err)
	}
	const threshold = 3
	s.ls[0].h3.retry.threshold = threshold
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Shutdown(context.Background()) })
	addr := s.Addrs()[0].String()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	rc := &retryCounter{PacketConn: pc}
	qt := &quic.Transport{Conn: rc}
	t.Cleanup(func() { _ = qt.Close(); _ = pc.Close() })
	c, _ := h3Client(t, pool, nil)
	c.Transport.(*http3.Transport).Dial = func(ctx context.Context, a string, tc *tls.Config, qc *quic.Config) (*quic.Conn, error) {
		ua, err := net.ResolveUDPAddr("udp", a)
		if err != nil {
			return nil, err
		}
		return qt.DialEarly(ctx, ua, tc, qc)
	}
	// Handshakes are counted per second: a Retry once the count passes the
	// threshold (a second boundary may start the count again). Each GET
	// is a new connection.
	for i := 1; rc.n.Load() == 0; i++ {
		if i > 10*threshold {
			t.Fatalf("%d handshakes (threshold %d a second) and no Retry", i-1, threshold)
		}
		c.Transport.(*http3.Transport).CloseIdleConnections()
		resp, _ := h3Get(t, c, "https://"+addr+"/")
		if resp.StatusCode != 200 {
			t.Fatalf("connection %d: status %d", i, resp.StatusCode)
		}
		if i == 1 && rc.n.Load() != 0 {
			t.Fatal("the first handshake was sent a Retry")
		}
	}
}

// TestHTTP3CertificatesFollowTheListener: the QUIC handshake serves the
// listener's certificate, a reload's new one once applied, and an Sni
// entry's own, as the TCP handshake does.
func TestHTTP3CertificatesFollowTheListener(t *testing.T) {
	certA, keyA, _ := testutil.CertFiles(t)
	certB, keyB, _ := testutil.CertFiles(t)
	certS, keyS, _ := testutil.CertFiles(t, "s.example")
	listener := func(cert, key string) config.Listener {
		l := certListener(cert, key, config.ProtocolsHttp1AndHttp2AndHttp3, false)
		l.Sni = []config.SniRule{{Pattern: "s.example", Certificate: &config.Certificate{Path: certS, KeyPath: keyS}}, {Pattern: "*"}}
		return l
	}
	s := startServer(t, &config.Config{Listeners: []config.Listener{listener(certA, keyA)}}, http.HandlerFunc(okHandler))
	addr := s.Addrs()[0].String()
	leaf := func(serverName string) []byte {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		qc, err := quic.DialAddr(ctx, addr, &tls.Config{InsecureSkipVerify: true, ServerName: serverName, NextProtos: []string{http3.NextProtoH3}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer qc.CloseWithError(0, "")
		return qc.ConnectionState().TLS.PeerCertificates[0].Raw
	}
	fileDER := func(path string) []byte {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		blk, _ := pem.Decode(b)
		return blk.Bytes
	}
	if !bytes.Equal(leaf("127.0.0.1"), fileDER(certA)) || !bytes.Equal(leaf("s.example"), fileDER(certS)) {
		t.Fatal("QUIC does not serve the listener's and the Sni entry's certificates")
	}
	apply, err := s.PrepareCertificates(&config.Config{Listeners: []config.Listener{listener(certB, keyB)}})
	if err != nil {
		t.Fatal(err)
	}
	apply()
	if !bytes.Equal(leaf("127.0.0.1"), fileDER(certB)) {
		t.Fatal("QUIC does not serve the reloaded certificate")
	}
}

// TestHTTP3ZeroRTTOnAnotherNode: with AllowZeroRtt on nodes sharing the
// ticket keys, a ticket one node issued carries 0-RTT to another.
func TestHTTP3ZeroRTTOnAnotherNode(t *testing.T) {
	t.Setenv("QUIC_GO_DISABLE_RECEIVE_BUFFER_WARNING", "true") // *lateHandshake is no *net.UDPConn
	certFile, keyFile, pool := testutil.CertFiles(t)
	shared := &ticketSource{}
	shared.set(ticketKey(1))
	start := func() string {
		l := certListener(certFile, keyFile, config.ProtocolsHttp3, false)
		l.AllowZeroRtt = true
		return serveWithTickets(t, &config.Config{Listeners: []config.Listener{l}}, shared)
	}
	a, b := start(), start()
	ca := newEarlyClient(t, a, pool)
	if status, used := ca.do(t, "GET", false); status != 200 || used {
		t.Fatalf("node a: %d, 0-RTT %v", status, used)
	}
	cb := ca.at(t, b)
	if status, used := cb.do(t, "GET", true); status != 200 || !used {
		t.Fatalf("node b with node a's ticket: %d, 0-RTT %v; want 200 in 0-RTT", status, used)
	}
}

// TestHTTP3ZeroRTTRefusedUnderALoweredHeaderLimit: a ticket records the
// header limit (SETTINGS_MAX_FIELD_SECTION_SIZE) it was issued under; a
// node sharing the ticket keys with a lower limit resumes the session
// without 0-RTT, and one with the same limit takes 0-RTT.
func TestHTTP3ZeroRTTRefusedUnderALoweredHeaderLimit(t *testing.T) {
	t.Setenv("QUIC_GO_DISABLE_RECEIVE_BUFFER_WARNING", "true") // *lateHandshake is no *net.UDPConn
	certFile, keyFile, pool := testutil.CertFiles(t)
	shared := &ticketSource{}
	shared.set(ticketKey(1))
	start := func(maxHeader int, sni bool) string {
		l := certListener(certFile, keyFile, config.ProtocolsHttp3, sni)
		l.AllowZeroRtt = true
		cfg := &config.Config{Listeners: []config.Listener{l}}
		cfg.Limits.MaxRequestHeadersTotalSize = maxHeader
		return serveWithTickets(t, cfg, shared)
	}
	// resumed dials addr with the client's tickets and reports whether the
	// session resumed and whether the server took 0-RTT.
	resumed := func(from *earlyClient, addr string) (bool, bool) {
		c := from.at(t, addr)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		qc, err := c.tr.DialEarly(ctx, c.addr, c.tls, &quic.Config{})
		if err != nil {
			t.Fatal(err)
		}
		defer qc.CloseWithError(0, "")
		select {
		case <-qc.HandshakeComplete():
		case <-ctx.Done():
			t.Fatal("no handshake")
		}
		st := qc.ConnectionState()
		return st.TLS.DidResume, st.Used0RTT
	}
	for _, sni := range []bool{false, true} {
		t.Run(fmt.Sprintf("sni=%v", sni), func(t *testing.T) {
			a := start(32<<10, sni)
			ca := newEarlyClient(t, a, pool)
			if status, _ := ca.do(t, "GET", false); status != 200 {
				t.Fatalf("node a: %d", status)
			}
			if resumes, early := resumed(ca, start(32<<10, sni)); !resumes || !early {
				t.Fatalf("the same limit: resumed %v, 0-RTT %v; want both", resumes, early)
			}
			if resumes, early := resumed(ca, start(16<<10, sni)); !resumes || early {
				t.Fatalf("a lower limit: resumed %v, 0-RTT %v; want resumed without 0-RTT", resumes, early)
			}
			if resumes, early := resumed(ca, start(64<<10, sni)); !resumes || !early {
				t.Fatalf("a higher limit: resumed %v, 0-RTT %v; want both", resumes, early)
			}
		})
	}
}
