package proxy

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
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

	"github.com/tether-proxy/tether/proxy/frontdoor"
	"github.com/tether-proxy/tether/test/testutil"
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
	str := e.h3Send(c, fields)
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

// h3Send opens a request stream on c and sends one HEADERS frame with the
// given fields as they are (:scheme made https), then ends the stream's
// sending side; the answer is left unread.
func (e *modeEnv) h3Send(c *quic.Conn, fields []hpack.HeaderField) *quic.Stream {
	e.t.Helper()
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
	return str
}

// h3Get is the header fields of a GET of path.
func h3Get(path string) []hpack.HeaderField {
	return []hpack.HeaderField{{Name: ":method", Value: "GET"}, {Name: ":scheme", Value: "https"},
		{Name: ":authority", Value: "h"}, {Name: ":path", Value: path}}
}

// TestHTTP3SmallOwnAnswerLeftToTheConnection: where HTTP/3 differs from
// HTTP/2 under Limits.MinResponseDataRate. quic-go's stream takes the
// last bytes of a response (up to one packet's worth, 1452 bytes) into its
// buffer and returns from the write whether or not the client has granted
// window for them, and gives no sign when they leave; so tether's own
// answer whose head and body fit in that (a 404 here) ends its handler at
// once, even to a client that grants less window than the answer, and the
// rate does not cut it. What it holds then is bounded: that buffer, the
// stream (one of the connection's 100), until the connection has had no
// request in flight for KeepAliveTimeout, which closes it. (Answers larger
// than that buffer, a 24 KB one of tether's own included, are cut:
// parityMinResponseDataRateSmallResponses.)
func TestHTTP3SmallOwnAnswerLeftToTheConnection(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for a keep-alive timeout")
	}
	t.Parallel()
	e := startMode(t, serverMode{name: "h3", http1: frontdoor.HTTP1Own, tls: true, h3: true},
		`{"Limits": {"MinResponseDataRate": {"BytesPerSecond": 10000000, "GracePeriod": "00:00:01.5"}, "KeepAliveTimeout": "00:00:03"},
		  "ReverseProxy": {"Routes": {"r": {"ClusterId": "c", "Match": {"Path": "/r"}}},
		                   "Clusters": {"c": {"Destinations": {"d1": {"Address": "http://127.0.0.1:1/"}}}}}}`, nil)
	// The whole answer, as a client that reads it gets it.
	resp, body := e.mustDo(http.MethodGet, "/nowhere", nil, nil)
	if resp.StatusCode != http.StatusNotFound {
		t.Fatalf("GET /nowhere: %d, want 404", resp.StatusCode)
	}
	// A client that grants 16 bytes of window per stream and reads nothing.
	const window = 16
	c := e.quicDial(&quic.Config{InitialStreamReceiveWindow: window, MaxStreamReceiveWindow: window})
	str := e.h3Send(c, h3Get("/nowhere"))
	testutil.Eventually(t, 10*time.Second, "the second 404 answered (its handler returned)", func() bool {
		return len(e.accessLines()) == 2
	})
	// The connection is closed for being idle, the answer still waiting
	// for window: the client never had more than its window of it.
	quicClosedWithin(t, c, 30*time.Second)
	n, err := io.Copy(io.Discard, str)
	var ae *quic.ApplicationError
	if n > window || !errors.As(err, &ae) || ae.ErrorMessage != "idle timeout" {
		t.Errorf("after the connection closed: %d bytes of the answer (%d), %v; want at most %d and the idle timeout's close", n, len(body), err, window)
	}
	if got := e.metric(tooSlowMetric, nil); got != 0 {
		t.Errorf("%s: %v, want 0 (the handler had returned)", tooSlowMetric, got)
	}
}
