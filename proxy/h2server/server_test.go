package h2server

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// rawClient is an HTTP/2 client that writes frames as a test tells it.
type rawClient struct {
	t    *testing.T
	conn net.Conn
	fr   *http2.Framer
	hb   bytes.Buffer
	he   *hpack.Encoder
}

func dialRaw(t *testing.T, addr string, settings ...http2.Setting) *rawClient {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	_ = conn.SetDeadline(time.Now().Add(20 * time.Second))
	c := &rawClient{t: t, conn: conn, fr: http2.NewFramer(conn, conn)}
	c.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	c.he = hpack.NewEncoder(&c.hb)
	if _, err := io.WriteString(conn, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	c.must(c.fr.WriteSettings(settings...))
	return c
}

func (c *rawClient) must(err error) {
	c.t.Helper()
	if err != nil {
		c.t.Fatal(err)
	}
}

func (c *rawClient) block(kv ...string) []byte {
	c.hb.Reset()
	for i := 0; i+1 < len(kv); i += 2 {
		_ = c.he.WriteField(hpack.HeaderField{Name: kv[i], Value: kv[i+1]})
	}
	return append([]byte(nil), c.hb.Bytes()...)
}

func (c *rawClient) request(id uint32, method string, end bool, extra ...string) {
	c.t.Helper()
	kv := append([]string{":method", method, ":scheme", "http", ":path", "/", ":authority", "t"}, extra...)
	c.must(c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: c.block(kv...), EndStream: end, EndHeaders: true}))
}

// next reads frames until match takes one; SETTINGS are acknowledged.
func (c *rawClient) next(match func(http2.Frame) bool) http2.Frame {
	c.t.Helper()
	for {
		f, err := c.fr.ReadFrame()
		if err != nil {
			c.t.Fatalf("reading frames: %v", err)
		}
		if sf, ok := f.(*http2.SettingsFrame); ok && !sf.IsAck() {
			c.must(c.fr.WriteSettingsAck())
		}
		if match(f) {
			return f
		}
	}
}

// response reads stream id's response to its end: status, body, trailers.
func (c *rawClient) response(id uint32) (status string, body string, trailers map[string]string) {
	c.t.Helper()
	var b strings.Builder
	for {
		f := c.next(func(f http2.Frame) bool { return f.Header().StreamID == id })
		switch f := f.(type) {
		case *http2.MetaHeadersFrame:
			if s := f.PseudoValue("status"); s != "" {
				status = s
			} else {
				trailers = map[string]string{}
				for _, hf := range f.RegularFields() {
					trailers[hf.Name] = hf.Value
				}
			}
			if f.StreamEnded() {
				return status, b.String(), trailers
			}
		case *http2.DataFrame:
			b.Write(f.Data())
			if f.StreamEnded() {
				return status, b.String(), trailers
			}
		case *http2.RSTStreamFrame:
			c.t.Fatalf("stream %d reset: %v", id, f.ErrCode)
		}
	}
}

func maxStreams(n uint32) func(*http.Server) {
	return func(s *http.Server) { s.HTTP2 = &http.HTTP2Config{MaxConcurrentStreams: int(n)} }
}

// TestStreamLimits: streams beyond MaxConcurrentStreams are refused with
// REFUSED_STREAM while the others run, and a client that opens and resets
// streams faster than their handlers end (rapid reset) is sent GOAWAY
// ENHANCE_YOUR_CALM once more than four times the limit wait.
func TestStreamLimits(t *testing.T) {
	t.Run("REFUSED_STREAM beyond the limit", func(t *testing.T) {
		release := make(chan struct{})
		addr := startH2C(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			<-release
			_, _ = io.WriteString(w, "done")
		}), maxStreams(2))
		c := dialRaw(t, addr)
		c.request(1, "GET", true)
		c.request(3, "GET", true)
		c.request(5, "GET", true)
		f := c.next(func(f http2.Frame) bool { _, ok := f.(*http2.RSTStreamFrame); return ok }).(*http2.RSTStreamFrame)
		if f.StreamID != 5 || f.ErrCode != http2.ErrCodeRefusedStream {
			t.Fatalf("reset %d %v, want stream 5 REFUSED_STREAM", f.StreamID, f.ErrCode)
		}
		close(release)
		ended := map[uint32]string{}
		for len(ended) < 2 {
			f := c.next(func(f http2.Frame) bool { return f.Header().StreamID != 0 })
			switch f := f.(type) {
			case *http2.DataFrame:
				ended[f.StreamID] += string(f.Data())
			case *http2.RSTStreamFrame:
				t.Fatalf("stream %d reset: %v", f.StreamID, f.ErrCode)
			}
		}
		if ended[1] != "done" || ended[3] != "done" {
			t.Fatalf("bodies %v", ended)
		}
	})
	t.Run("rapid reset", func(t *testing.T) {
		release := make(chan struct{})
		var mu sync.Mutex
		ran := 0
		addr := startH2C(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			ran++
			mu.Unlock()
			<-release // a handler that does not watch its context
		}), maxStreams(1))
		defer close(release)
		c := dialRaw(t, addr)
		for id := uint32(1); id < 40; id += 2 {
			// The server may have given up on the connection already.
			if c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, EndStream: true, EndHeaders: true,
				BlockFragment: c.block(":method", "GET", ":scheme", "http", ":path", "/", ":authority", "t")}) != nil ||
				c.fr.WriteRSTStream(id, http2.ErrCodeCancel) != nil {
				break
			}
		}
		f := c.next(func(f http2.Frame) bool { _, ok := f.(*http2.GoAwayFrame); return ok }).(*http2.GoAwayFrame)
		if f.ErrCode != http2.ErrCodeEnhanceYourCalm {
			t.Fatalf("GOAWAY %v, want ENHANCE_YOUR_CALM", f.ErrCode)
		}
		mu.Lock()
		defer mu.Unlock()
		if ran > 1 {
			t.Fatalf("%d handlers ran at once, want at most MaxConcurrentStreams (1)", ran)
		}
	})
}

// TestFlowControl: a response is sent within the client's windows and the
// rest waits for WINDOW_UPDATE; a request body beyond the stream's window
// is a FLOW_CONTROL_ERROR, and the window is given back as the handler
// reads.
func TestFlowControl(t *testing.T) {
	t.Run("response within the client's window", func(t *testing.T) {
		body := strings.Repeat("x", 100)
		addr := startH2C(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.WriteString(w, body)
		}), nil)
		c := dialRaw(t, addr, http2.Setting{ID: http2.SettingInitialWindowSize, Val: 10})
		c.request(1, "GET", true)
		got := 0
		for got < 10 {
			f := c.next(func(f http2.Frame) bool { _, ok := f.(*http2.DataFrame); return ok }).(*http2.DataFrame)
			got += len(f.Data())
		}
		if got != 10 {
			t.Fatalf("%d bytes sent within a window of 10", got)
		}
		c.must(c.fr.WriteWindowUpdate(1, 90))
		_, rest, _ := c.response(1)
		if got+len(rest) != len(body) {
			t.Fatalf("%d bytes in all, want %d", got+len(rest), len(body))
		}
	})
	t.Run("request body beyond the stream window", func(t *testing.T) {
		read := make(chan struct{})
		addr := startH2C(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			<-read
			_, _ = io.Copy(io.Discard, r.Body)
		}), nil)
		c := dialRaw(t, addr)
		c.request(1, "POST", false)
		chunk := make([]byte, 16<<10)
		for sent := 0; sent < streamWindow; sent += len(chunk) {
			c.must(c.fr.WriteData(1, false, chunk))
		}
		c.must(c.fr.WriteData(1, false, []byte{1}))
		f := c.next(func(f http2.Frame) bool { _, ok := f.(*http2.RSTStreamFrame); return ok }).(*http2.RSTStreamFrame)
		if f.StreamID != 1 || f.ErrCode != http2.ErrCodeFlowControl {
			t.Fatalf("reset %d %v, want stream 1 FLOW_CONTROL_ERROR", f.StreamID, f.ErrCode)
		}
		close(read)
	})
	t.Run("the window comes back as the handler reads", func(t *testing.T) {
		read := make(chan struct{})
		addr := startH2C(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			<-read
			n, _ := io.Copy(io.Discard, r.Body)
			_, _ = io.WriteString(w, strings.Repeat("n", int(n>>10)))
		}), nil)
		c := dialRaw(t, addr)
		c.request(1, "POST", false)
		chunk := make([]byte, 16<<10)
		for sent := 0; sent < streamWindow; sent += len(chunk) {
			c.must(c.fr.WriteData(1, false, chunk))
		}
		close(read)
		c.next(func(f http2.Frame) bool {
			wu, ok := f.(*http2.WindowUpdateFrame)
			return ok && wu.StreamID == 1
		})
		c.must(c.fr.WriteData(1, true, chunk))
		if st, body, _ := c.response(1); st != "200" || len(body) != streamWindow>>10+16 {
			t.Fatalf("%s, %d KiB read, want %d", st, len(body), streamWindow>>10+16)
		}
	})
}

// TestTrailersAndPing: request trailers reach the handler after its body,
// response trailers follow the body, and a PING is answered with its data.
func TestTrailersAndPing(t *testing.T) {
	addr := startH2C(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		w.Header().Set("Trailer", "X-Echo")
		_, _ = w.Write(b)
		w.Header().Set("X-Echo", r.Trailer.Get("X-In"))
	}), nil)
	c := dialRaw(t, addr)
	c.must(c.fr.WritePing(false, [8]byte{7, 7}))
	p := c.next(func(f http2.Frame) bool { _, ok := f.(*http2.PingFrame); return ok }).(*http2.PingFrame)
	if !p.IsAck() || p.Data != [8]byte{7, 7} {
		t.Fatalf("PING answered %v %v", p.IsAck(), p.Data)
	}
	c.request(1, "POST", false, "trailer", "x-in")
	c.must(c.fr.WriteData(1, false, []byte("body")))
	c.must(c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: c.block("x-in", "v1"), EndStream: true, EndHeaders: true}))
	st, body, tr := c.response(1)
	if st != "200" || body != "body" || tr["x-echo"] != "v1" {
		t.Fatalf("%s %q trailers %v", st, body, tr)
	}
}

// TestContinuationFlood: a header block that goes on in CONTINUATION
// frames past the header list limit ends the connection with GOAWAY
// before the server has read the flood.
func TestContinuationFlood(t *testing.T) {
	addr := startH2C(t, http.NotFoundHandler(), func(s *http.Server) { s.MaxHeaderBytes = 4 << 10 })
	c := dialRaw(t, addr)
	blk := c.block(":method", "GET", ":scheme", "http", ":path", "/", ":authority", "t")
	c.must(c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: blk, EndHeaders: false}))
	field := c.block("x-flood", strings.Repeat("a", 4000))
	go func() {
		for i := 0; i < 10000; i++ {
			if c.fr.WriteContinuation(1, false, field) != nil {
				return
			}
		}
	}()
	for {
		f, err := c.fr.ReadFrame()
		if err != nil {
			t.Fatalf("connection ended without GOAWAY: %v", err)
		}
		if g, ok := f.(*http2.GoAwayFrame); ok {
			if g.ErrCode == http2.ErrCodeNo {
				t.Fatalf("GOAWAY NO_ERROR, want an error")
			}
			return
		}
	}
}

// TestGracefulShutdown: the http.Server's Shutdown sends GOAWAY; the
// stream in flight finishes, a stream opened after it is not served, and
// Shutdown returns once the connection is done.
func TestGracefulShutdown(t *testing.T) {
	release := make(chan struct{})
	started := make(chan struct{}, 1)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		started <- struct{}{}
		<-release
		_, _ = io.WriteString(w, "finished")
	}), Protocols: new(http.Protocols)}
	srv.Protocols.SetUnencryptedHTTP2(true)
	New(srv)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	c := dialRaw(t, ln.Addr().String())
	c.request(1, "GET", true)
	<-started
	shut := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		shut <- srv.Shutdown(ctx)
	}()
	g := c.next(func(f http2.Frame) bool { _, ok := f.(*http2.GoAwayFrame); return ok }).(*http2.GoAwayFrame)
	if g.ErrCode != http2.ErrCodeNo || g.LastStreamID != 1 {
		t.Fatalf("GOAWAY %v last %d, want NO_ERROR last 1", g.ErrCode, g.LastStreamID)
	}
	c.request(3, "GET", true) // after the GOAWAY: not served
	close(release)
	if st, body, _ := c.response(1); st != "200" || body != "finished" {
		t.Fatalf("stream 1: %s %q", st, body)
	}
	if err := <-shut; err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	select {
	case <-started:
		t.Fatal("stream 3 was served after GOAWAY")
	default:
	}
}

// TestWriteDeadlineFreesAStuckWriter: a client that grants every window
// and reads nothing fills the socket; a write deadline set through
// http.ResponseController still ends the handler's writes.
func TestWriteDeadlineFreesAStuckWriter(t *testing.T) {
	done := make(chan error, 1)
	addr := startH2C(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(500 * time.Millisecond))
		chunk := make([]byte, 64<<10)
		var err error
		for i := 0; i < 4096 && err == nil; i++ { // 256 MiB at most
			_, err = w.Write(chunk)
		}
		done <- err
	}), nil)
	c := dialRaw(t, addr, http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1<<31 - 1})
	c.must(c.fr.WriteWindowUpdate(0, 1<<31-1-65535))
	c.request(1, "GET", true)
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("256 MiB written to a client that reads nothing")
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the handler's writes still blocked 15 s after its write deadline")
	}
}

// TestUniqueValuesNotIndexed: a response field whose value is new on every
// response (a trace id) is sent as a literal without indexing, as it is
// (not Huffman-coded), and decodes as sent; the fields that repeat stay in
// the dynamic table, so the hundredth response's head is as short as the
// second's.
func TestUniqueValuesNotIndexed(t *testing.T) {
	var n int
	var mu sync.Mutex
	addr := startH2C(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		n++
		id := strings.Repeat(string(rune('a'+n%26)), 16) + strings.Repeat("0", 16-len(itoa(n))) + itoa(n)
		mu.Unlock()
		w.Header().Set("X-Tether-Trace-Id", id)
		w.Header().Set("Content-Type", "text/plain")
		w.Header().Set("Date", "Tue, 01 Dec 2026 12:00:00 GMT")
		w.Header().Set("X-Backend", "d1")
		w.WriteHeader(204)
	}), func(*http.Server) {})
	c := dialRaw(t, addr)
	c.fr.ReadMetaHeaders = nil // the blocks as sent
	dec := hpack.NewDecoder(4096, nil)
	var sizes []int
	for i := 1; i <= 100; i++ {
		id := uint32(2*i - 1)
		c.request(id, "GET", true)
		h := c.next(func(f http2.Frame) bool { _, ok := f.(*http2.HeadersFrame); return ok && f.Header().StreamID == id }).(*http2.HeadersFrame)
		block := h.HeaderBlockFragment()
		fields, err := dec.DecodeFull(block)
		if err != nil {
			t.Fatalf("response %d: %v", i, err)
		}
		want := strings.Repeat(string(rune('a'+i%26)), 16) + strings.Repeat("0", 16-len(itoa(i))) + itoa(i)
		var got string
		for _, f := range fields {
			if f.Name == "x-tether-trace-id" {
				got = f.Value
			}
		}
		if got != want {
			t.Fatalf("response %d: trace id %q, want %q (fields %v)", i, got, want, fields)
		}
		if !bytes.Contains(block, []byte("\x00\x11x-tether-trace-id\x20"+want)) {
			t.Fatalf("response %d: the trace id is not a literal without indexing, as it is: %x", i, block)
		}
		sizes = append(sizes, len(block))
	}
	if sizes[99] != sizes[1] {
		t.Errorf("head of response 2: %d bytes, of response 100: %d (the repeating fields left the table)", sizes[1], sizes[99])
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

// TestEndWithLastData: a response whose declared length is all written
// ends with the frame that carries its last bytes (or its HEADERS frame,
// with no body), also when the handler flushes before it returns, unless
// trailers may follow; no empty DATA frame of its own ends it.
func TestEndWithLastData(t *testing.T) {
	big := strings.Repeat("b", 3*respBufSize)
	for _, tc := range []struct {
		name     string
		h        func(w http.ResponseWriter)
		body     string
		trailers map[string]string
		// endOn is how the stream ends: "data" (the last bytes'
		// frame), "an empty DATA frame", "headers" (a body-less
		// response's head) or "trailers".
		endOn string
	}{
		{"length, flushed", func(w http.ResponseWriter) {
			w.Header().Set("Content-Length", "5")
			_, _ = io.WriteString(w, "hello")
			w.(http.Flusher).Flush()
		}, "hello", nil, "data"},
		{"length, written in two parts and flushed", func(w http.ResponseWriter) {
			w.Header().Set("Content-Length", "10")
			_, _ = io.WriteString(w, "hello")
			w.(http.Flusher).Flush()
			_, _ = io.WriteString(w, "world")
			w.(http.Flusher).Flush()
		}, "helloworld", nil, "data"},
		{"length, larger than the buffer", func(w http.ResponseWriter) {
			w.Header().Set("Content-Length", itoa(len(big)))
			_, _ = io.WriteString(w, big)
			w.(http.Flusher).Flush()
		}, big, nil, "data"},
		{"length zero, flushed", func(w http.ResponseWriter) {
			w.Header().Set("Content-Length", "0")
			w.WriteHeader(200)
			w.(http.Flusher).Flush()
		}, "", nil, "headers"},
		{"no length, flushed", func(w http.ResponseWriter) {
			_, _ = io.WriteString(w, "hello")
			w.(http.Flusher).Flush()
		}, "hello", nil, "an empty DATA frame"}, // its end is known only when the handler returns
		{"length and a declared trailer", func(w http.ResponseWriter) {
			w.Header().Set("Content-Length", "5")
			w.Header().Set("Trailer", "X-Sum")
			_, _ = io.WriteString(w, "hello")
			w.(http.Flusher).Flush()
			w.Header().Set("X-Sum", "abc")
		}, "hello", map[string]string{"x-sum": "abc"}, "trailers"},
		{"length and a prefixed trailer set before the flush", func(w http.ResponseWriter) {
			w.Header().Set("Content-Length", "5")
			_, _ = io.WriteString(w, "hello")
			w.Header().Set(http.TrailerPrefix+"X-Sum", "abc")
			w.(http.Flusher).Flush()
		}, "hello", map[string]string{"x-sum": "abc"}, "trailers"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addr := startH2C(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { tc.h(w) }), nil)
			c := dialRaw(t, addr)
			c.request(1, "GET", true)
			var body strings.Builder
			var trailers map[string]string
			for {
				f := c.next(func(f http2.Frame) bool { return f.Header().StreamID == 1 })
				end := ""
				switch f := f.(type) {
				case *http2.MetaHeadersFrame:
					if f.PseudoValue("status") == "" {
						trailers = map[string]string{}
						for _, hf := range f.RegularFields() {
							trailers[hf.Name] = hf.Value
						}
						if f.StreamEnded() {
							end = "trailers"
						}
					} else if f.StreamEnded() {
						end = "headers"
					}
				case *http2.DataFrame:
					body.Write(f.Data())
					if f.StreamEnded() {
						end = "data"
						if len(f.Data()) == 0 && tc.body != "" {
							end = "an empty DATA frame"
						}
					}
				case *http2.RSTStreamFrame:
					t.Fatalf("stream reset: %v", f.ErrCode)
				}
				if end == "" {
					continue
				}
				if end != tc.endOn {
					t.Errorf("the stream ended on %s, want %s", end, tc.endOn)
				}
				break
			}
			if body.String() != tc.body {
				t.Errorf("body %d bytes, want %d", body.Len(), len(tc.body))
			}
			if len(trailers) != len(tc.trailers) || trailers["x-sum"] != tc.trailers["x-sum"] {
				t.Errorf("trailers %v, want %v", trailers, tc.trailers)
			}
		})
	}
}

// TestHeadersFrameForms: a request's HEADERS frame is read alike in each
// of its forms (padded, with a priority field, both, split into
// CONTINUATION frames), and a padding longer than the frame resets the
// stream (PROTOCOL_ERROR) as the Framer has it, the connection going on.
func TestHeadersFrameForms(t *testing.T) {
	addr := startH2C(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, r.Method+" "+r.URL.Path+" "+r.Header.Get("X-A"))
	}), nil)
	c := dialRaw(t, addr)
	block := func(path string) []byte {
		return c.block(":method", "GET", ":scheme", "http", ":path", path, ":authority", "t", "x-a", "v")
	}
	id := uint32(1)
	for _, tc := range []struct {
		name string
		p    http2.HeadersFrameParam
	}{
		{"plain", http2.HeadersFrameParam{}},
		{"padded", http2.HeadersFrameParam{PadLength: 7}},
		{"priority", http2.HeadersFrameParam{Priority: http2.PriorityParam{StreamDep: 0, Weight: 9, Exclusive: true}}},
		{"padded with priority", http2.HeadersFrameParam{PadLength: 3, Priority: http2.PriorityParam{Weight: 1}}},
	} {
		p := tc.p
		p.StreamID, p.EndStream, p.EndHeaders = id, true, true
		p.BlockFragment = block("/" + strings.ReplaceAll(tc.name, " ", "-"))
		c.must(c.fr.WriteHeaders(p))
		if st, body, _ := c.response(id); st != "200" || body != "GET /"+strings.ReplaceAll(tc.name, " ", "-")+" v" {
			t.Errorf("%s: %s %q", tc.name, st, body)
		}
		id += 2
	}
	// Split: the block in a HEADERS frame and two CONTINUATION frames.
	b := block("/split")
	c.must(c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: b[:2], EndStream: true}))
	c.must(c.fr.WriteContinuation(id, false, b[2:4]))
	c.must(c.fr.WriteContinuation(id, true, b[4:]))
	if st, body, _ := c.response(id); st != "200" || body != "GET /split v" {
		t.Errorf("split: %s %q", st, body)
	}
	id += 2
	// A padding length past the frame's end: 1 byte of payload after the
	// pad length, which says 200.
	c.must(c.fr.WriteRawFrame(http2.FrameHeaders, http2.FlagHeadersEndHeaders|http2.FlagHeadersEndStream|http2.FlagHeadersPadded, id, []byte{200, 0x82}))
	f := c.next(func(f http2.Frame) bool { return f.Header().StreamID == id }).(*http2.RSTStreamFrame)
	if f.ErrCode != http2.ErrCodeProtocol {
		t.Errorf("padding past the end: reset %v, want PROTOCOL_ERROR", f.ErrCode)
	}
	id += 2
	c.must(c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: block("/after"), EndStream: true, EndHeaders: true}))
	if st, body, _ := c.response(id); st != "200" || body != "GET /after v" {
		t.Errorf("after the reset: %s %q", st, body)
	}
}
