package h1server

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

const waitGet = "GET / HTTP/1.1\r\nHost: h\r\n\r\n"

// waitConn is a client connection to p's own loop that has made enough
// requests for the loop to wait on the second descriptor.
type waitConn struct {
	t  *testing.T
	c  net.Conn
	br *bufio.Reader
}

// ownServer is the own loop alone, with its idle timeout and client
// watch delay; tune, when not nil, sets the rest before it starts.
func ownServer(t testing.TB, h http.Handler, idle, watch time.Duration, tune func(*Server)) *pair {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second, IdleTimeout: idle}
	s := New(srv)
	s.watch = watch
	if tune != nil {
		tune(s)
	}
	go func() { _ = srv.Serve(s.handoff) }()
	go func() { _ = s.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
		_ = s.Shutdown(ctx)
	})
	return &pair{own: ln.Addr().String(), ownSrv: s}
}

func dialWaiting(t *testing.T, p *pair) *waitConn {
	t.Helper()
	c, err := net.Dial("tcp", p.own)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	wc := &waitConn{t: t, c: c, br: bufio.NewReader(c)}
	for range waitAfter + 1 {
		wc.send(waitGet)
		wc.expect("ok")
	}
	// The loop is in its wait now, or about to be: the descriptor is
	// there, as the connection answered more than waitAfter requests.
	deadline := time.Now().Add(5 * time.Second)
	for !p.ownSrv.anyWaitFile() {
		if time.Now().After(deadline) {
			t.Fatal("no connection got its second descriptor")
		}
		time.Sleep(time.Millisecond)
	}
	return wc
}

func (s *Server) anyWaitFile() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := range s.conns {
		if c.wf.Load() != nil {
			return true
		}
	}
	return false
}

func (wc *waitConn) send(raw string) {
	wc.t.Helper()
	if _, err := io.WriteString(wc.c, raw); err != nil {
		wc.t.Fatal(err)
	}
}

func (wc *waitConn) expect(body string) *http.Response {
	wc.t.Helper()
	resp, err := http.ReadResponse(wc.br, nil)
	if err != nil {
		wc.t.Fatalf("reading the response: %v", err)
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil || string(b) != body {
		wc.t.Fatalf("body %q (%v), want %q", b, err, body)
	}
	return resp
}

// expectEOF: the server closed the connection, before the test's deadline.
func (wc *waitConn) expectEOF(within time.Duration) {
	wc.t.Helper()
	_ = wc.c.SetReadDeadline(time.Now().Add(within))
	if b, err := wc.br.ReadByte(); err != io.EOF {
		wc.t.Fatalf("read %q, %v; want the server's EOF", b, err)
	}
}

// A connection waiting on its second descriptor is served as before: its
// requests one by one, pipelined ones (sent together, or sent while the
// previous one was being served: the wake-up must not be lost), a head
// that comes in pieces, and the ends: a half-close, Connection: close, a
// request the loop hands to net/http, the idle timeout. Each end must
// reach the client as an EOF, which it does only when both descriptors
// of the socket are closed.
func TestH1WaitOnTheSecondDescriptor(t *testing.T) {
	held, hold := make(chan struct{}), make(chan struct{})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/hold" {
			held <- struct{}{}
			<-hold
		}
		io.WriteString(w, "ok")
	})
	// No client watch: it would read the pipelined request's first byte,
	// which then needs no wake-up.
	p := ownServer(t, h, time.Minute, time.Hour, nil)

	t.Run("one by one", func(t *testing.T) {
		wc := dialWaiting(t, p)
		for range 20 {
			wc.send(waitGet)
			wc.expect("ok")
		}
	})
	t.Run("pipelined together", func(t *testing.T) {
		wc := dialWaiting(t, p)
		wc.send(waitGet + waitGet + waitGet)
		for range 3 {
			wc.expect("ok")
		}
	})
	t.Run("pipelined while served", func(t *testing.T) {
		wc := dialWaiting(t, p)
		wc.send("GET /hold HTTP/1.1\r\nHost: h\r\n\r\n")
		<-held
		wc.send(waitGet)
		// Let the bytes arrive before the handler ends: their arrival,
		// during the request, is the only wake-up the wait gets.
		time.Sleep(20 * time.Millisecond)
		hold <- struct{}{}
		wc.expect("ok")
		wc.expect("ok") // within the test's deadline, far below the idle timeout
	})
	t.Run("head in pieces", func(t *testing.T) {
		wc := dialWaiting(t, p)
		wc.send("GET / HTTP/1.1\r\n")
		time.Sleep(20 * time.Millisecond) // the first piece wakes the wait alone
		wc.send("Host: h\r\n\r\n")
		wc.expect("ok")
		wc.send(waitGet)
		wc.expect("ok")
	})
	t.Run("half-close", func(t *testing.T) {
		wc := dialWaiting(t, p)
		_ = wc.c.(*net.TCPConn).CloseWrite()
		wc.expectEOF(5 * time.Second)
	})
	t.Run("Connection: close", func(t *testing.T) {
		wc := dialWaiting(t, p)
		wc.send("GET / HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n")
		wc.expect("ok")
		wc.expectEOF(5 * time.Second)
	})
	t.Run("handed off", func(t *testing.T) {
		wc := dialWaiting(t, p)
		wc.send("POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 2\r\n\r\nhi")
		wc.expect("ok")
		wc.send("GET / HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n")
		wc.expect("ok")
		wc.expectEOF(5 * time.Second)
	})
}

func TestH1WaitIdleTimeout(t *testing.T) {
	p := newPair(t, http.HandlerFunc(okHandler), func(s *http.Server) { s.IdleTimeout = 200 * time.Millisecond })
	wc := dialWaiting(t, p)
	start := time.Now()
	wc.expectEOF(5 * time.Second)
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("closed %v after the last response, idle timeout 200ms", d)
	}
}

// A shutdown ends a connection waiting on its second descriptor at once
// (graceful), or one whose request is under way (the forced close after
// the deadline), and the clients see the end.
func TestH1WaitShutdown(t *testing.T) {
	for _, forced := range []bool{false, true} {
		t.Run(map[bool]string{false: "graceful", true: "forced"}[forced], func(t *testing.T) {
			hold := make(chan struct{})
			defer close(hold)
			h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == "/hold" {
					select {
					case <-hold:
					case <-r.Context().Done():
					}
				}
				io.WriteString(w, "ok")
			})
			p := newPair(t, h, func(s *http.Server) { s.IdleTimeout = time.Minute })
			idle := dialWaiting(t, p)
			var busy *waitConn
			if forced {
				busy = dialWaiting(t, p)
				busy.send("GET /hold HTTP/1.1\r\nHost: h\r\n\r\n")
				waitWatch(t, p.ownSrv, watchReading)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			defer cancel()
			start := time.Now()
			err := p.ownSrv.Shutdown(ctx)
			if forced != (err != nil) {
				t.Fatalf("shutdown: %v", err)
			}
			idle.expectEOF(5 * time.Second)
			if forced {
				// Its response may or may not have gone out before the
				// close; the end must come.
				_ = busy.c.SetReadDeadline(time.Now().Add(5 * time.Second))
				rest, err := io.ReadAll(busy.br)
				if err != nil {
					t.Fatalf("busy connection: %v after %q", err, rest)
				}
				if len(rest) > 0 && !strings.HasPrefix(string(rest), "HTTP/1.1 ") {
					t.Fatalf("busy connection got %q", rest)
				}
			}
			if d := time.Since(start); d > 3*time.Second {
				t.Fatalf("the connections ended %v after the shutdown began", d)
			}
		})
	}
}

// The second descriptors are capped (a quarter of the descriptor limit in
// production): past the cap a connection peeks, and is served as well;
// each close gives its descriptor back.
func TestH1WaitFilesAreCapped(t *testing.T) {
	if c := waitFileCap(); c < 1 {
		t.Fatalf("waitFileCap() = %d", c)
	}
	p := ownServer(t, http.HandlerFunc(okHandler), time.Minute, watchDelay, func(s *Server) { s.waitCap = 1 })
	first := dialWaiting(t, p)
	second := dialWaiting(t, p) // served past waitAfter, with no descriptor
	for range 3 {
		second.send(waitGet)
		second.expect("ok")
	}
	if n := p.ownSrv.waitFiles.Load(); n != 1 {
		t.Fatalf("%d second descriptors, want 1 (the cap)", n)
	}
	first.send("GET / HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n")
	first.expect("ok")
	first.expectEOF(5 * time.Second)
	deadline := time.Now().Add(5 * time.Second)
	for p.ownSrv.waitFiles.Load() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d second descriptors after the close, want 0", p.ownSrv.waitFiles.Load())
		}
		time.Sleep(time.Millisecond)
	}
}
