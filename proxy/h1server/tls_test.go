package h1server

import (
	"context"
	"crypto/tls"
	"io"
	"log"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tether-proxy/tether/test/testutil"
)

// tlsFront serves h on the loop's ServeTLS with a self-signed certificate,
// HTTP/2 and HTTP/1.1 by ALPN, as frontdoor.New wires an HTTPS listener,
// and returns its address.
func tlsFront(t *testing.T, h http.Handler, headers time.Duration) string {
	t.Helper()
	certPEM, keyPEM, _ := testutil.SelfSignedCert(t)
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	tc := &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"h2", "http/1.1"}}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: headers, IdleTimeout: 10 * time.Second, TLSConfig: tc.Clone(),
		ErrorLog: discardLog()}
	srv.Protocols = new(http.Protocols)
	srv.Protocols.SetHTTP1(true)
	srv.Protocols.SetHTTP2(true)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	own := New(srv)
	go func() { _ = own.ServeHandoff() }()
	go func() { _ = own.ServeTLS(ln, tc) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
		_ = own.Shutdown(ctx)
	})
	return ln.Addr().String()
}

// TestServeTLSServesHTTP1OnTheLoop: over TLS the loop answers a plain GET
// itself, hands any other request's connection to net/http with its TLS
// state, and gives a connection that negotiated h2 to net/http's HTTP/2
// server; every request sees its TLS state.
func TestServeTLSServesHTTP1OnTheLoop(t *testing.T) {
	type seen struct {
		own   bool
		proto string
		tls   bool
		alpn  string
	}
	var mu sync.Mutex
	var got []seen
	addr := tlsFront(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, own := w.(*h1Writer)
		s := seen{own: own, proto: r.Proto, tls: r.TLS != nil}
		if r.TLS != nil {
			s.alpn = r.TLS.NegotiatedProtocol
		}
		mu.Lock()
		got = append(got, s)
		mu.Unlock()
		io.WriteString(w, "hello")
	}), 5*time.Second)
	for _, tc := range []struct {
		desc   string
		h2     bool
		method string
		want   seen
	}{
		{desc: "a GET over HTTPS/1.1: the loop's", method: "GET", want: seen{own: true, proto: "HTTP/1.1", tls: true}},
		{desc: "a POST over HTTPS/1.1: handed to net/http with its TLS state", method: "POST", want: seen{proto: "HTTP/1.1", tls: true}},
		{desc: "HTTP/2 by ALPN: net/http's HTTP/2 server", h2: true, method: "GET", want: seen{proto: "HTTP/2.0", tls: true, alpn: "h2"}},
	} {
		tr := &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, Protocols: new(http.Protocols)}
		if tc.h2 {
			tr.Protocols.SetHTTP2(true)
		} else {
			tr.Protocols.SetHTTP1(true)
		}
		req, _ := http.NewRequest(tc.method, "https://"+addr+"/x", strings.NewReader(""))
		resp, err := (&http.Client{Transport: tr, Timeout: 5 * time.Second}).Do(req)
		if err != nil {
			t.Fatalf("%s: %v", tc.desc, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		tr.CloseIdleConnections()
		mu.Lock()
		last := got[len(got)-1]
		mu.Unlock()
		if resp.StatusCode != 200 || string(body) != "hello" || last != tc.want {
			t.Errorf("%s: %d %q, handler saw %+v; want %+v", tc.desc, resp.StatusCode, body, last, tc.want)
		}
	}
}

// TestServeTLSAnswersPlainHTTPAndBoundsTheHandshake: as net/http's
// server, a client that speaks plain HTTP to the HTTPS listener gets a 400
// saying so, and one that connects and never shakes hands is closed at the
// header timeout.
func TestServeTLSAnswersPlainHTTPAndBoundsTheHandshake(t *testing.T) {
	addr := tlsFront(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}), 300*time.Millisecond)
	out, closed := exchange(t, addr, "GET / HTTP/1.1\r\nHost: x\r\n\r\n", 2*time.Second)
	if want := "HTTP/1.0 400 Bad Request\r\n\r\nClient sent an HTTP request to an HTTPS server.\n"; out != want || !closed {
		t.Fatalf("plain HTTP to the HTTPS listener: %q (closed %v), want %q", out, closed, want)
	}
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	start := time.Now()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("a silent client: read %v, want EOF at the header timeout", err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("a silent client was closed after %v, want about the 300 ms header timeout", d)
	}
}

func discardLog() *log.Logger { return log.New(io.Discard, "", 0) }
