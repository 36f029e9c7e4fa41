package testutil

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// RawServer accepts TCP connections on a loopback port and hands the i-th
// (from 0) to its serve function with a reader over it, so that a test can
// misbehave on the wire as a backend. A connection is closed when serve
// returns; the listener at the test's end, which waits for every serve.
type RawServer struct {
	ln    net.Listener
	conns atomic.Int32
	wg    sync.WaitGroup
}

// NewRawServer listens and serves until the test ends.
func NewRawServer(t testing.TB, serve func(i int, c net.Conn, br *bufio.Reader)) *RawServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &RawServer{ln: ln}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			i := int(s.conns.Add(1)) - 1
			s.wg.Add(1)
			go func() {
				defer s.wg.Done()
				defer c.Close()
				serve(i, c, bufio.NewReader(c))
			}()
		}
	}()
	t.Cleanup(func() { ln.Close(); s.wg.Wait() })
	return s
}

// Addr is the host:port it listens on.
func (s *RawServer) Addr() string { return s.ln.Addr().String() }

// URL is http://Addr.
func (s *RawServer) URL() string { return "http://" + s.Addr() }

// Conns is how many connections it accepted.
func (s *RawServer) Conns() int { return int(s.conns.Load()) }

// Answer reads one request from br (its body to the end) and writes resp
// on c as it is; false when the client went.
func Answer(br *bufio.Reader, c net.Conn, resp string) bool {
	req, err := http.ReadRequest(br)
	if err != nil {
		return false
	}
	_, _ = io.Copy(io.Discard, req.Body)
	_, err = io.WriteString(c, resp)
	return err == nil
}

// RawRequest sends req, as it is, on a new connection to addr and reads
// the response (the connection closes at the test's end).
func RawRequest(t testing.TB, addr, req string) (*http.Response, error) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(conn, req); err != nil {
		return nil, err
	}
	return http.ReadResponse(bufio.NewReader(conn), nil)
}
