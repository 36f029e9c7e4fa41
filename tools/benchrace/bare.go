package main

import (
	"bufio"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
)

// The bare proxies answer "what would a server of tether's own save?":
// both forward every request to one backend over the same minimal
// synchronous pool (no feature at all: no routing, affinity, forwarded
// headers, log, metrics or timeouts), one behind net/http's server
// (bare-nethttp), one behind a goroutine-per-connection HTTP/1.1 loop with
// no background read (bare-own). They are measuring instruments, not
// proxies: the loop trusts its client (wrk) and handles only GETs without a
// body. A third, bare-loop (bareloop_linux.go), is the same proxy on an
// event loop of its own, as HAProxy's, and bare-gor (baregor_linux.go) the
// event loop's byte handling with a goroutine per connection again. Opt-in
// targets: -targets bare-nethttp,bare-own,bare-gor,bare-loop,haproxy.

// lifo is the bare proxies' pool of idle backend connections: the newest
// first, a new one from dial when there is none.
type lifo[T any] struct {
	dial func() (T, error)
	mu   sync.Mutex
	idle []T
}

func (l *lifo[T]) get() (T, error) {
	l.mu.Lock()
	if n := len(l.idle); n > 0 {
		c := l.idle[n-1]
		l.idle = l.idle[:n-1]
		l.mu.Unlock()
		return c, nil
	}
	l.mu.Unlock()
	return l.dial()
}

func (l *lifo[T]) put(c T) {
	l.mu.Lock()
	l.idle = append(l.idle, c)
	l.mu.Unlock()
}

// barePool is a LIFO of persistent connections to one backend.
type barePool struct {
	addr string
	lifo[*bareConn]
}

func newBarePool(addr string) *barePool {
	p := &barePool{addr: addr}
	p.dial = func() (*bareConn, error) {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			return nil, err
		}
		return &bareConn{c: c, br: bufio.NewReaderSize(c, 4<<10), bw: bufio.NewWriterSize(c, 4<<10)}, nil
	}
	return p
}

type bareConn struct {
	c  net.Conn
	br *bufio.Reader
	bw *bufio.Writer
}

// roundTrip sends GET path and reads the whole response (Content-Length
// bodies only) into buf.
func (p *barePool) roundTrip(path string, buf []byte) (*http.Response, []byte, error) {
	bc, err := p.get()
	if err != nil {
		return nil, nil, err
	}
	bc.bw.WriteString("GET " + path + " HTTP/1.1\r\nHost: backend\r\nX-Forwarded-For: 127.0.0.1\r\n\r\n")
	if err := bc.bw.Flush(); err != nil {
		bc.c.Close()
		return nil, nil, err
	}
	resp, err := http.ReadResponse(bc.br, nil)
	if err != nil {
		bc.c.Close()
		return nil, nil, err
	}
	if resp.ContentLength < 0 || resp.ContentLength > int64(len(buf)) {
		bc.c.Close()
		return nil, nil, errors.New("bare: response without a usable Content-Length")
	}
	n, err := io.ReadFull(resp.Body, buf[:resp.ContentLength])
	if err != nil {
		bc.c.Close()
		return nil, nil, err
	}
	p.put(bc)
	return resp, buf[:n], nil
}

const bareBuf = 70 << 10 // the race's largest body is 64 KiB

// badGateway is every bare proxy's answer when its backend fails.
const badGateway = "HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"

func runBare(args []string) error {
	fs := flag.NewFlagSet("bare", flag.ExitOnError)
	server := fs.String("server", "nethttp", "nethttp, own, gor or loop")
	backends := fs.String("backends", "", "comma-separated host:port (the first is used)")
	fs.Parse(args)
	pool := newBarePool(strings.Split(*backends, ",")[0])
	go func() { // until the harness closes stdin
		io.Copy(io.Discard, os.Stdin)
		os.Exit(0)
	}()
	if *server == "loop" {
		lfd, addr, err := listenLoop()
		if err != nil {
			return err
		}
		fmt.Println(addr)
		return runLoop(lfd, pool.addr)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	fmt.Println(ln.Addr().String())
	switch *server {
	case "nethttp":
		bufs := sync.Pool{New: func() any { b := make([]byte, bareBuf); return &b }}
		return http.Serve(ln, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			bp := bufs.Get().(*[]byte)
			defer bufs.Put(bp)
			resp, body, err := pool.roundTrip(r.URL.RequestURI(), *bp)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadGateway)
				return
			}
			h := w.Header()
			for k, v := range resp.Header {
				h[k] = v
			}
			w.WriteHeader(resp.StatusCode)
			w.Write(body)
		}))
	case "gor":
		return runGor(ln, pool.addr)
	case "own":
		for {
			c, err := ln.Accept()
			if err != nil {
				return err
			}
			go serveBare(c, pool)
		}
	}
	return fmt.Errorf("bare: -server %q is none of nethttp, own, gor and loop", *server)
}

// serveBare is the minimal HTTP/1.1 loop: read a head, proxy it, write the
// answer, flush when no pipelined request is waiting.
func serveBare(c net.Conn, pool *barePool) {
	defer c.Close()
	br := bufio.NewReaderSize(c, 4<<10)
	bw := bufio.NewWriterSize(c, 4<<10)
	buf := make([]byte, bareBuf)
	for {
		line, err := br.ReadSlice('\n')
		if err != nil {
			return
		}
		sp1, sp2 := bytes.IndexByte(line, ' '), bytes.LastIndexByte(line, ' ')
		if sp1 < 0 || sp2 <= sp1 {
			return
		}
		path := string(line[sp1+1 : sp2])
		closing := false
		for {
			l, err := br.ReadSlice('\n')
			if err != nil {
				return
			}
			if len(l) <= 2 {
				break
			}
			closing = closing || bytes.EqualFold(bytes.TrimSpace(l), []byte("connection: close"))
		}
		resp, body, err := pool.roundTrip(path, buf)
		if err != nil {
			bw.WriteString(badGateway)
			bw.Flush()
			return
		}
		bw.WriteString("HTTP/1.1 " + strconv.Itoa(resp.StatusCode) + " " + http.StatusText(resp.StatusCode) + "\r\n")
		for k, vs := range resp.Header {
			for _, v := range vs {
				bw.WriteString(k + ": " + v + "\r\n")
			}
		}
		bw.WriteString("\r\n")
		bw.Write(body)
		if closing || br.Buffered() == 0 {
			if err := bw.Flush(); err != nil || closing {
				return
			}
		}
	}
}
