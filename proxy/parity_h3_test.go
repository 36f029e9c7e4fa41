package proxy

import (
	"context"
	"crypto/tls"
	"io"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"
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
