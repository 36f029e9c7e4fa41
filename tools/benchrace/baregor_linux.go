package main

import (
	"bytes"
	"errors"
	"io"
	"net"
)

// bare-gor is bare-loop's proxy, byte for byte the same handling (the
// request head scanned in place, a fixed request to the backend, the
// response's head and body copied as they are), with a goroutine per
// client connection in place of the event loop: the difference between
// the two is the goroutine model on Go's poller alone.

type gorBackend struct {
	c   io.ReadWriteCloser
	buf []byte
}

var errBadResponse = errors.New("bare-gor: a response without a usable Content-Length")

// roundTrip sends req and reads one whole response into b.buf.
func (b *gorBackend) roundTrip(req []byte) ([]byte, error) {
	if _, err := b.c.Write(req); err != nil {
		return nil, err
	}
	n := 0
	for {
		r, err := b.c.Read(b.buf[n:])
		if err != nil {
			return nil, err
		}
		n += r
		size, complete := responseSize(b.buf[:n])
		switch {
		case size < 0 || complete && n > size:
			return nil, errBadResponse
		case complete:
			return b.buf[:size], nil
		case n == len(b.buf):
			return nil, errBadResponse
		}
	}
}

// runGor serves ln with a goroutine per connection.
func runGor(ln net.Listener, backend string) error {
	pool := &lifo[*gorBackend]{dial: func() (*gorBackend, error) {
		c, err := net.Dial("tcp", backend)
		if err != nil {
			return nil, err
		}
		return &gorBackend{c: newRawConn(c), buf: make([]byte, bareBuf)}, nil
	}}
	for {
		c, err := ln.Accept()
		if err != nil {
			return err
		}
		go serveGor(newRawConn(c), pool)
	}
}

func serveGor(c io.ReadWriteCloser, pool *lifo[*gorBackend]) {
	defer c.Close()
	buf := make([]byte, 8<<10)
	var req []byte
	n := 0
	for {
		end := bytes.Index(buf[:n], []byte("\r\n\r\n"))
		if end < 0 {
			if n == len(buf) {
				return
			}
			r, err := c.Read(buf[n:])
			if err != nil {
				return
			}
			n += r
			continue
		}
		var closing, ok bool
		if req, closing, ok = backendRequest(req[:0], buf[:end+4]); !ok {
			return
		}
		n = copy(buf, buf[end+4:n])
		b, err := pool.get()
		var resp []byte
		if err == nil {
			resp, err = b.roundTrip(req)
		}
		if err != nil {
			if b != nil {
				b.c.Close()
			}
			c.Write([]byte(badGateway))
			return
		}
		_, err = c.Write(resp)
		pool.put(b)
		if err != nil || closing {
			return
		}
	}
}
