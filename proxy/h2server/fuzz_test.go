package h2server

import (
	"bytes"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// fuzzConn is a connection whose client sends in and then closes; what
// the server writes is discarded.
type fuzzConn struct{ r *bytes.Reader }

func (c *fuzzConn) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	if err == io.EOF {
		return n, net.ErrClosed
	}
	return n, err
}
func (c *fuzzConn) Write(p []byte) (int, error) { return len(p), nil }
func (c *fuzzConn) Close() error                { return nil }
func (c *fuzzConn) LocalAddr() net.Addr         { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 443} }
func (c *fuzzConn) RemoteAddr() net.Addr {
	return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 50000}
}
func (c *fuzzConn) SetDeadline(t time.Time) error      { return nil }
func (c *fuzzConn) SetReadDeadline(t time.Time) error  { return nil }
func (c *fuzzConn) SetWriteDeadline(t time.Time) error { return nil }

// frames builds a client's bytes after the preface with a Framer.
func frames(f func(fr *http2.Framer, enc func(...string) []byte)) []byte {
	var buf, hb bytes.Buffer
	fr := http2.NewFramer(&buf, nil)
	he := hpack.NewEncoder(&hb)
	enc := func(kv ...string) []byte {
		hb.Reset()
		for i := 0; i+1 < len(kv); i += 2 {
			_ = he.WriteField(hpack.HeaderField{Name: kv[i], Value: kv[i+1]})
		}
		return append([]byte(nil), hb.Bytes()...)
	}
	f(fr, enc)
	return buf.Bytes()
}

var get = []string{":method", "GET", ":scheme", "https", ":path", "/", ":authority", "a"}

// FuzzFrames feeds a client's frames, after the preface, to a connection:
// whatever they are, the server neither panics nor hangs, and returns once
// the client has gone.
func FuzzFrames(f *testing.F) {
	f.Add(frames(func(fr *http2.Framer, enc func(...string) []byte) {
		_ = fr.WriteSettings()
		_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: enc(get...), EndStream: true, EndHeaders: true})
	}))
	f.Add(frames(func(fr *http2.Framer, enc func(...string) []byte) {
		_ = fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 10})
		post := append([]string{}, get...)
		post[1] = "POST"
		_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: enc(append(post, "content-length", "5", "trailer", "x-t")...), EndHeaders: true})
		_ = fr.WriteData(1, false, []byte("hello"))
		_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: enc("x-t", "v"), EndStream: true, EndHeaders: true})
		_ = fr.WriteWindowUpdate(1, 100)
		_ = fr.WriteWindowUpdate(0, 100)
		_ = fr.WritePing(false, [8]byte{1})
	}))
	f.Add(frames(func(fr *http2.Framer, enc func(...string) []byte) {
		b := enc(get...)
		_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: b[:2], EndHeaders: false})
		_ = fr.WriteContinuation(1, false, b[2:4])
		_ = fr.WriteContinuation(1, true, b[4:])
		_ = fr.WriteRSTStream(1, http2.ErrCodeCancel)
		_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 3, BlockFragment: enc(get...), EndStream: true, EndHeaders: true,
			Priority: http2.PriorityParam{StreamDep: 3}})
		_ = fr.WritePriority(5, http2.PriorityParam{StreamDep: 1, Weight: 3})
		_ = fr.WriteGoAway(0, http2.ErrCodeNo, nil)
	}))
	f.Add([]byte{0, 0, 0, 4, 0, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, in []byte) {
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
			w.Header().Set("Trailer", "X-T")
			_, _ = w.Write(bytes.Repeat([]byte("x"), 70000)) // beyond the initial window
			w.Header().Set("X-T", "t")
		}), MaxHeaderBytes: 1 << 10}
		s := New(srv)
		done := make(chan struct{})
		go func() {
			defer close(done)
			s.ServeConn(&fuzzConn{r: bytes.NewReader(append([]byte(http2.ClientPreface), in...))}, nil)
		}()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatal("ServeConn did not return after the client went away")
		}
	})
}
