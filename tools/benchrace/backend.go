package main

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// The raw backend answers as the net/http one does (200, Content-Type,
// Content-Length, Date, a 1 KiB or 64 KiB body; keep-alive unless the request
// asks to close) at a cost that hardly depends on the request's head. The
// load CPU is shared by wrk and the backends, and with net/http's server each
// extra request field costs it a parse, a map insert and an allocation: a
// proxy that forwards more fields (tether sends eight that HAProxy's `option
// forwardfor` does not: proxy/DESIGN.md, "Forwarded headers and trust") makes
// the load CPU, not itself, the closed loop's bottleneck. Requests with a
// chunked body are refused (none of the race's proxies sends one).

// rawDate is the Date field's value, rendered once a second.
var rawDate atomic.Pointer[[]byte]

var rawDateOnce sync.Once

// startRawDate renders the Date field now and then at every second.
func startRawDate() { rawDateOnce.Do(renderRawDate) }

func renderRawDate() {
	render := func() {
		b := []byte(time.Now().UTC().Format(http.TimeFormat))
		rawDate.Store(&b)
	}
	render()
	go func() {
		for {
			time.Sleep(time.Second - time.Duration(time.Now().Nanosecond()))
			render()
		}
	}()
}

// backendBodies are the 1 KiB and 64 KiB bodies every backend sends.
func backendBodies() (small, large []byte) {
	small, large = make([]byte, 1<<10), make([]byte, 64<<10)
	for i := range large {
		large[i] = 'a' + byte(i%26)
	}
	copy(small, large)
	return small, large
}

// acceptRaw serves every connection ln accepts with serveRaw, until ln
// is closed.
func acceptRaw(ln net.Listener, small, large []byte) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go serveRaw(c, small, large)
	}
}

var errRawHead = errors.New("raw backend: malformed or unsupported request head")

// serveRaw serves one connection: request heads are read a line at a
// time from the buffer, answers are flushed when no pipelined request
// is buffered.
func serveRaw(c net.Conn, small, large []byte) error {
	defer c.Close()
	br := bufio.NewReaderSize(c, 16<<10)
	bw := bufio.NewWriterSize(c, 8<<10)
	for {
		line, err := br.ReadSlice('\n')
		if err != nil {
			if err == io.EOF {
				return nil
			}
			return err
		}
		sp1, sp2 := bytes.IndexByte(line, ' '), bytes.LastIndexByte(line, ' ')
		if sp1 < 0 || sp2 <= sp1 {
			return errRawHead
		}
		method, target, proto := line[:sp1], line[sp1+1:sp2], bytes.TrimRight(line[sp2+1:], "\r\n")
		closing := !bytes.Equal(proto, []byte("HTTP/1.1"))
		var bodyLen int64
		for {
			l, err := br.ReadSlice('\n')
			if err != nil {
				return err
			}
			if len(l) <= 2 {
				break
			}
			name, value, ok := bytes.Cut(l, []byte(":"))
			if !ok {
				return errRawHead
			}
			value = bytes.TrimSpace(value)
			switch {
			case bytes.EqualFold(name, []byte("Connection")):
				if bytes.EqualFold(value, []byte("close")) {
					closing = true
				} else if bytes.EqualFold(value, []byte("keep-alive")) {
					closing = false
				}
			case bytes.EqualFold(name, []byte("Content-Length")):
				if bodyLen, err = strconv.ParseInt(string(value), 10, 64); err != nil || bodyLen < 0 {
					return errRawHead
				}
			case bytes.EqualFold(name, []byte("Transfer-Encoding")):
				return errRawHead
			}
		}
		if bodyLen > 0 {
			if _, err := br.Discard(int(bodyLen)); err != nil {
				return err
			}
		}
		path, _, _ := bytes.Cut(target, []byte("?"))
		body := small
		if bytes.HasSuffix(path, []byte("/64k")) { // as bodySize
			body = large
		}
		bw.WriteString("HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\nContent-Length: ")
		bw.WriteString(strconv.Itoa(len(body)))
		bw.WriteString("\r\nDate: ")
		bw.Write(*rawDate.Load())
		if closing {
			bw.WriteString("\r\nConnection: close")
		}
		bw.WriteString("\r\n\r\n")
		if !bytes.Equal(method, []byte("HEAD")) {
			bw.Write(body)
		}
		if closing || br.Buffered() == 0 {
			if err := bw.Flush(); err != nil || closing {
				return err
			}
		}
	}
}
