package main

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestResponseSize(t *testing.T) {
	for _, tc := range []struct {
		in       string
		size     int
		complete bool
	}{
		{"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nabc", 41, true},
		{"HTTP/1.1 200 OK\r\ncontent-length:3\r\n\r\nab", 40, false},
		{"HTTP/1.1 200 OK\r\nX: 1\r\nCONTENT-LENGTH: 0\r\n\r\n", 44, true},
		{"HTTP/1.1 200 OK\r\nContent-Len", 0, false},
		{"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", -1, true},
		{"HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n", -1, true},
	} {
		size, complete := responseSize([]byte(tc.in))
		if size != tc.size || complete != tc.complete {
			t.Errorf("%q: %d, %v; want %d, %v", tc.in, size, complete, tc.size, tc.complete)
		}
	}
}

func TestIndexFold(t *testing.T) {
	for _, tc := range []struct {
		p, lower string
		want     int
	}{
		{"a\r\nConnection: Close", "\r\nconnection: close", 1},
		{"\r\nconnection: keep-alive", "\r\nconnection: close", -1},
		{"ab", "abc", -1},
		{"xxABC", "abc", 2},
	} {
		if got := indexFold([]byte(tc.p), tc.lower); got != tc.want {
			t.Errorf("indexFold(%q, %q) = %d, want %d", tc.p, tc.lower, got, tc.want)
		}
	}
}

func TestBackendRequest(t *testing.T) {
	const fixed = " HTTP/1.1\r\nHost: backend\r\nX-Forwarded-For: 127.0.0.1\r\n\r\n"
	for _, tc := range []struct {
		head, req   string
		closing, ok bool
	}{
		{"GET /hash/1k HTTP/1.1\r\nHost: x\r\n\r\n", "GET /hash/1k" + fixed, false, true},
		{"GET /a HTTP/1.1\r\nConnection: Close\r\n\r\n", "GET /a" + fixed, true, true},
		{"GET\r\n\r\n", "", false, false},
		{"GET /a\r\n\r\n", "", false, false},
	} {
		req, closing, ok := backendRequest(nil, []byte(tc.head))
		if string(req) != tc.req || closing != tc.closing || ok != tc.ok {
			t.Errorf("%q: %q, %v, %v; want %q, %v, %v", tc.head, req, closing, ok, tc.req, tc.closing, tc.ok)
		}
	}
}

// TestBareLoopProxies drives the event loop and bare-gor, its goroutine
// twin, as the race does: keep-alive requests, a 64 KiB body, two client
// connections, Connection: close.
func TestBareLoopProxies(t *testing.T) {
	t.Run("loop", func(t *testing.T) {
		lfd, addr, err := listenLoop()
		if err != nil {
			t.Fatal(err)
		}
		testBareProxy(t, addr, func(backend string) {
			go runLoop(lfd, backend) // the loop holds its thread for the test binary's life
		})
	})
	t.Run("gor", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		testBareProxy(t, ln.Addr().String(), func(backend string) { go runGor(ln, backend) })
	})
}

func testBareProxy(t *testing.T, addr string, start func(backend string)) {
	be, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer be.Close()
	small, large := backendBodies()
	go http.Serve(be, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Forwarded-For") != "127.0.0.1" {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		b := small
		if bodySize(r.URL.Path) == len(large) {
			b = large
		}
		w.Header().Set("Content-Length", strconv.Itoa(len(b))) // the loop takes no chunked answer
		w.Write(b)
	}))
	start(be.Addr().String())
	get := func(c net.Conn, br *bufio.Reader, path string, closing bool) *http.Response {
		t.Helper()
		req := "GET " + path + " HTTP/1.1\r\nHost: x\r\n"
		if closing {
			req += "Connection: close\r\n"
		}
		c.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := io.WriteString(c, req+"\r\n"); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		want := small
		if strings.HasSuffix(path, "64k") {
			want = large
		}
		if resp.StatusCode != 200 || string(body) != string(want) {
			t.Fatalf("%s: %d, %d bytes", path, resp.StatusCode, len(body))
		}
		return resp
	}
	c1, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c1.Close()
	c2, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	br1, br2 := bufio.NewReader(c1), bufio.NewReader(c2)
	for range 3 {
		get(c1, br1, "/hash/1k", false)
		get(c2, br2, "/hash/64k", false)
	}
	get(c1, br1, "/hash/1k", true)
	c1.SetDeadline(time.Now().Add(10 * time.Second))
	if n, err := br1.Read(make([]byte, 1)); n != 0 || err != io.EOF {
		t.Fatalf("after Connection: close: %d, %v; want the connection closed", n, err)
	}
	get(c2, br2, "/hash/1k", false)
}
