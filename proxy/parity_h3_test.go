package proxy

import (
	"bytes"
	"context"
	"crypto/tls"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/quic-go/qpack"
	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"
	"github.com/quic-go/quic-go/quicvarint"
	"golang.org/x/net/http2/hpack"
)

// The h3 mode's own wire for the parity cases that drive a connection
// themselves: a QUIC connection of quic-go's client, raw or with its
// HTTP/3 client connection on top.

// quicDial opens a QUIC connection (ALPN h3) to the listener; qc bounds
// its flow-control windows (nil: quic-go's).
func (e *modeEnv) quicDial(qc *quic.Config) *quic.Conn {
	e.t.Helper()
	if qc == nil {
		qc = &quic.Config{}
	}
	qc.MaxIdleTimeout = time.Minute // only the server may end it in a test
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := quic.DialAddr(ctx, e.addr, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{http3.NextProtoH3}}, qc) // the listener's self-signed certificate
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { _ = c.CloseWithError(0, "") })
	return c
}

// h3Conn is an HTTP/3 client connection on a QUIC connection of its own.
func (e *modeEnv) h3Conn(qc *quic.Config) (*http3.ClientConn, *quic.Conn) {
	c := e.quicDial(qc)
	return (&http3.Transport{DisableCompression: true}).NewClientConn(c), c
}

// quicClosedWithin waits for the server to close c and returns how long
// that took; it fails the test when c is still open after limit.
func quicClosedWithin(t *testing.T, c *quic.Conn, limit time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	select {
	case <-c.Context().Done():
		return time.Since(start)
	case <-time.After(limit):
		t.Fatalf("the connection was still open after %v", limit)
		return 0
	}
}

// h3Do sends a request on cc and returns the status ("reset" when the
// stream or connection failed) and the response, its body unread.
func h3Do(t *testing.T, cc *http3.ClientConn, method, path string, body io.Reader, length int64) (string, *http.Response) {
	t.Helper()
	req, err := http.NewRequest(method, "https://h"+path, body)
	if err != nil {
		t.Fatal(err)
	}
	req.ContentLength = length
	resp, err := cc.RoundTrip(req)
	if err != nil {
		return "reset", nil
	}
	t.Cleanup(func() { _ = resp.Body.Close() })
	return strconv.Itoa(resp.StatusCode), resp
}

// h3Raw sends one HTTP/3 request with the given header fields as they are
// (pseudo-headers included, unchecked; :scheme made https) on a new QUIC
// connection and returns the final status ("" when the stream was reset
// or the connection closed): the raw QPACK client quic-go's client is
// not, since it refuses to send a malformed request.
func (e *modeEnv) h3Raw(fields []hpack.HeaderField) string {
	e.t.Helper()
	c := e.quicDial(nil)
	defer c.CloseWithError(0, "")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	str, err := c.OpenStreamSync(ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	var block bytes.Buffer
	enc := qpack.NewEncoder(&block)
	for _, f := range fields {
		if f.Name == ":scheme" {
			f.Value = "https"
		}
		_ = enc.WriteField(qpack.HeaderField{Name: f.Name, Value: f.Value})
	}
	frame := quicvarint.Append(quicvarint.Append(nil, 0x01), uint64(block.Len())) // HEADERS
	if _, err := str.Write(append(frame, block.Bytes()...)); err != nil {
		e.t.Fatal(err)
	}
	_ = str.Close()
	_ = str.SetReadDeadline(time.Now().Add(5 * time.Second))
	r := quicvarint.NewReader(str)
	for {
		typ, err := quicvarint.Read(r)
		if err != nil {
			return ""
		}
		n, err := quicvarint.Read(r)
		if err != nil {
			return ""
		}
		payload := make([]byte, n)
		if _, err := io.ReadFull(str, payload); err != nil {
			return ""
		}
		if typ != 0x01 {
			continue
		}
		next := qpack.NewDecoder().Decode(payload)
		for {
			f, err := next()
			if err != nil {
				return ""
			}
			if f.Name == ":status" && !strings.HasPrefix(f.Value, "1") {
				return f.Value
			}
			if f.Name == ":status" {
				break // an informational answer: the next HEADERS
			}
		}
	}
}
