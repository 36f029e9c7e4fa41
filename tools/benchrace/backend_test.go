package main

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// startRawBackend serves serveRaw on a loopback port for the test.
func startRawBackend(t *testing.T) string {
	t.Helper()
	startRawDate()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	small, large := backendBodies()
	go acceptRaw(ln, small, large)
	return ln.Addr().String()
}

// TestRawBackendAnswersAsNetHTTP: what the proxies see of the raw backend
// is what net/http's server would send them.
func TestRawBackendAnswersAsNetHTTP(t *testing.T) {
	addr := startRawBackend(t)
	for _, tc := range []struct {
		name, head string
		// bodies: the body length of each 200 response; closed: the
		// backend closes the connection after them.
		bodies []int
		closed bool
	}{
		{"keep-alive GET", "GET /hash/1k HTTP/1.1\r\nHost: b\r\n\r\n", []int{1 << 10}, false},
		{"64 KiB by the last segment", "GET /hash/64k?x=1 HTTP/1.1\r\nHost: b\r\n\r\n", []int{64 << 10}, false},
		{"pipelined, both answered", "GET /a HTTP/1.1\r\nHost: b\r\n\r\nGET /b/64k HTTP/1.1\r\nHost: b\r\n\r\n", []int{1 << 10, 64 << 10}, false},
		{"Connection: close", "GET /a HTTP/1.1\r\nHost: b\r\nConnection: close\r\n\r\n", []int{1 << 10}, true},
		{"HTTP/1.0 closes", "GET /a HTTP/1.0\r\n\r\n", []int{1 << 10}, true},
		{"HTTP/1.0 keep-alive stays", "GET /a HTTP/1.0\r\nConnection: keep-alive\r\n\r\n", []int{1 << 10}, false},
		{"a body is skipped", "POST /a HTTP/1.1\r\nHost: b\r\nContent-Length: 5\r\n\r\nhelloGET /a HTTP/1.1\r\nHost: b\r\n\r\n", []int{1 << 10, 1 << 10}, false},
		{"HEAD has no body", "HEAD /a HTTP/1.1\r\nHost: b\r\n\r\n", []int{0}, false},
		{"chunked refused", "POST /a HTTP/1.1\r\nHost: b\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", nil, true},
		{"malformed refused", "GARBAGE\r\n\r\n", nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(10 * time.Second))
			if _, err := io.WriteString(c, tc.head); err != nil {
				t.Fatal(err)
			}
			br := bufio.NewReader(c)
			for i, n := range tc.bodies {
				method := "GET"
				if strings.HasPrefix(tc.head, "HEAD") {
					method = "HEAD"
				}
				resp, err := http.ReadResponse(br, &http.Request{Method: method})
				if err != nil {
					t.Fatalf("response %d: %v", i, err)
				}
				body, err := io.ReadAll(resp.Body)
				if err != nil {
					t.Fatalf("response %d body: %v", i, err)
				}
				if resp.StatusCode != 200 || resp.ContentLength != int64(max(n, 1<<10)) || len(body) != n {
					t.Fatalf("response %d: status %d, Content-Length %d, %d bytes; want 200 and %d bytes", i, resp.StatusCode, resp.ContentLength, len(body), n)
				}
				if ct := resp.Header.Get("Content-Type"); ct != "application/octet-stream" {
					t.Errorf("Content-Type %q", ct)
				}
				if _, err := http.ParseTime(resp.Header.Get("Date")); err != nil {
					t.Errorf("Date %q: %v", resp.Header.Get("Date"), err)
				}
				if n > 0 && body[0] != 'a' {
					t.Errorf("body starts %q", body[:1])
				}
			}
			if tc.closed {
				if _, err := br.ReadByte(); err != io.EOF {
					t.Fatalf("after the responses: %v, want EOF", err)
				}
				return
			}
			// Still open: it answers one more request.
			io.WriteString(c, "GET /again HTTP/1.1\r\nHost: b\r\n\r\n")
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatalf("kept-alive connection: %v", err)
			}
			if b, _ := io.ReadAll(resp.Body); len(b) != 1<<10 {
				t.Fatalf("kept-alive connection answered %d bytes", len(b))
			}
		})
	}
}
