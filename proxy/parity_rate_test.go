package proxy

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quic-go/quic-go"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/tether-proxy/tether/test/testutil"
)

// Limits.MinRequestBodyDataRate and MinResponseDataRate in every server
// mode. Small rates and grace periods keep the cases short; the
// assertions are on outcomes (a 408, a cut, the counter), never on timings.

const tooSlowMetric = "tether_requests_too_slow_total"

func parityMinRequestBodyDataRate(t *testing.T, m serverMode) {
	b := newBackend(t, func(w http.ResponseWriter, r *http.Request) {
		n, _ := io.Copy(io.Discard, r.Body)
		fmt.Fprintf(w, "got %d", n)
	})
	e := startMode(t, m, backendCfg(b.URL, "", "",
		`"Limits": {"MinRequestBodyDataRate": {"BytesPerSecond": 100, "GracePeriod": "00:00:01.5"}, "MinResponseDataRate": null}`), nil)
	// 2 bytes every 100 ms (20 B/s) of a 400-byte body: 408 once the grace
	// period is spent, long before the body could end.
	if status, _ := e.dripBody(400, 2, 100*time.Millisecond); status != "408" {
		t.Errorf("a body dripped at 20 B/s: %q, want 408", status)
	}
	testutil.Eventually(t, 5*time.Second, "the too-slow request counted", func() bool {
		return e.metric(tooSlowMetric, map[string]string{"direction": "request"}) == 1
	})
	if n := e.metric("tether_proxy_errors_total", map[string]string{"kind": "client_timeout"}); n != 1 {
		t.Errorf("client_timeout errors: %v, want 1", n)
	}
	// 60 bytes every 200 ms (300 B/s) for longer than the grace period:
	// slow, but within the rate.
	if status, body := e.dripBody(900, 60, 200*time.Millisecond); status != "200" || body != "got 900" {
		t.Errorf("a body sent at 300 B/s: %q %q, want 200 \"got 900\"", status, body)
	}
	if n := e.metric(tooSlowMetric, nil); n != 1 {
		t.Errorf("%s: %v, want 1", tooSlowMetric, n)
	}
}

func parityMinResponseDataRate(t *testing.T, m serverMode) {
	b := newBackend(t, func(w http.ResponseWriter, r *http.Request) {
		n, _ := strconv.Atoi(r.URL.Query().Get("n"))
		chunk := make([]byte, 32<<10)
		for sent := 0; sent < n; sent += len(chunk) {
			if _, err := w.Write(chunk); err != nil {
				return
			}
		}
	})
	e := startMode(t, m, backendCfg(b.URL, "", "",
		`"Limits": {"MinResponseDataRate": {"BytesPerSecond": 10000000, "GracePeriod": "00:00:01.5"}, "MinRequestBodyDataRate": null}`), nil)
	// A client that reads keeps its response, however long it is.
	if resp, body := e.mustDo(http.MethodGet, "/big?n="+strconv.Itoa(4<<20), nil, nil); resp.StatusCode != 200 || len(body) != 4<<20 {
		t.Fatalf("a reading client: %d with %d bytes", resp.StatusCode, len(body))
	}
	const huge = 1 << 30 // far more than the socket buffers hold
	if m.h1() {
		c := e.dial()
		if _, err := io.WriteString(c, "GET /big?n="+strconv.Itoa(huge)+" HTTP/1.1\r\nHost: h\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		testutil.Eventually(t, 15*time.Second, "the client that does not read counted as too slow", func() bool {
			return e.metric(tooSlowMetric, map[string]string{"direction": "response"}) == 1
		})
		// The connection was cut: what the socket buffers held, then the end.
		_ = c.SetReadDeadline(time.Now().Add(15 * time.Second))
		n, err := io.Copy(io.Discard, c)
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() || n >= huge {
			t.Errorf("after %d bytes: %v, want the connection cut", n, err)
		}
		return
	}
	if m.h3 {
		// HTTP/3: the stream is reset, the connection goes on. The client's
		// windows stay small, and it does not read.
		cc, _ := e.h3Conn(&quic.Config{InitialStreamReceiveWindow: 64 << 10, MaxStreamReceiveWindow: 64 << 10})
		status, resp := h3Do(t, cc, http.MethodGet, "/big?n="+strconv.Itoa(huge), nil, 0)
		if status != "200" {
			t.Fatalf("a stream whose client does not read: %s", status)
		}
		testutil.Eventually(t, 15*time.Second, "the client that does not read counted as too slow", func() bool {
			return e.metric(tooSlowMetric, map[string]string{"direction": "response"}) == 1
		})
		if n, err := io.Copy(io.Discard, resp.Body); err == nil || n >= huge {
			t.Errorf("after %d bytes: %v, want the stream reset", n, err)
		}
		if status, _ := h3Do(t, cc, http.MethodGet, "/big?n=0", nil, 0); status != "200" {
			t.Errorf("the next stream on the connection: %s, want 200", status)
		}
		return
	}
	// HTTP/2: the stream is reset, the connection goes on.
	h := e.h2Dial()
	h.request(1, "GET", "/big?n="+strconv.Itoa(huge), -1)
	if got := h.await(1); got != "reset" {
		t.Fatalf("a stream whose client grants no window: %q, want reset", got)
	}
	if n := e.metric(tooSlowMetric, map[string]string{"direction": "response"}); n != 1 {
		t.Errorf("%s{direction=response}: %v, want 1", tooSlowMetric, n)
	}
	h.request(3, "GET", "/big?n=0", -1)
	if got := h.await(3); got != "200" {
		t.Errorf("the next stream on the connection: %q, want 200", got)
	}
}

// parityMinResponseDataRateSmallResponses: responses small enough to sit
// in the server's buffer when the handler returns are held to the rate
// too. HTTP/1.1: a client that pipelines requests and never reads fills
// the socket buffers with small responses; HTTP/2: a client that grants no
// window has a small response wait for it after a large one took the
// connection's window.
func parityMinResponseDataRateSmallResponses(t *testing.T, m serverMode) {
	// tether's own answers are padded to about 24 KB by eight response
	// fields, so a few hundred fill the socket buffers however slowly a
	// loaded machine answers for a dead destination.
	var pads []string
	for i := range 8 {
		pads = append(pads, fmt.Sprintf(`{"ResponseHeader": "X-Pad-%d", "Set": "%s", "When": "Always"}`, i, strings.Repeat("p", 3000)))
	}
	padTransforms := strings.Join(pads, ", ")
	b := newBackend(t, func(w http.ResponseWriter, r *http.Request) {
		n, _ := strconv.Atoi(r.URL.Query().Get("n"))
		w.Header().Set("Content-Length", strconv.Itoa(n))
		_, _ = w.Write(make([]byte, n))
	})
	e := startMode(t, m, `{"Limits": {"MinResponseDataRate": {"BytesPerSecond": 10000000, "GracePeriod": "00:00:01.5"}},
	  "ReverseProxy": {"Routes": {"r": {"ClusterId": "c", "Match": {"Path": "/small"}}, "r2": {"ClusterId": "c", "Match": {"Path": "/big"}},
	                              "dead": {"ClusterId": "dead", "Match": {"Path": "/dead"}, "Transforms": [`+padTransforms+`]}},
	                   "Clusters": {"c": {"Destinations": {"d1": {"Address": "`+b.URL+`"}}},
	                                "dead": {"Destinations": {"d1": {"Address": "http://127.0.0.1:1/"}}}}}}`, nil)
	if m.h1() {
		// Up to 20000 responses of 3 KiB: far more than the socket buffers
		// hold.
		const requests = 20000
		e.pipelineUnread("GET /small?n=3072 HTTP/1.1\r\nHost: h\r\n\r\n", requests, requests*3072, 1)
		// tether's own answers too: a dead destination's 502s (or 503s once
		// it is found unhealthy), 24 KB each with the route's padding fields.
		e.pipelineUnread("GET /dead HTTP/1.1\r\nHost: h\r\n\r\n", requests, requests*24000, 2)
		return
	}
	if m.h3 {
		// A client whose windows stay at 1 KiB and that reads nothing: a
		// small response waits for window as it ends. (Unlike HTTP/2's
		// client here, quic-go's gives back the window of a stream the
		// server resets, so a large response cut first would not keep a
		// small one waiting behind it.)
		const window = 1 << 10
		cc, _ := e.h3Conn(&quic.Config{InitialStreamReceiveWindow: window, MaxStreamReceiveWindow: window,
			InitialConnectionReceiveWindow: window, MaxConnectionReceiveWindow: window})
		status, resp := h3Do(t, cc, http.MethodGet, "/small?n=3072", nil, 0)
		testutil.Eventually(t, 15*time.Second, "the small response cut", func() bool {
			return e.metric(tooSlowMetric, map[string]string{"direction": "response"}) == 1
		})
		if resp != nil {
			if _, err := io.Copy(io.Discard, resp.Body); err == nil {
				t.Error("a small response on a connection with 1 KiB of window came whole")
			}
		} else if status != "reset" {
			t.Errorf("a small response on a connection with 1 KiB of window: %s, want reset", status)
		}
		// tether's own answer: a dead destination's 502 (or 503 once it is
		// found unhealthy), 24 KB with the route's padding fields, to a
		// client with the same windows that reads nothing of its stream,
		// not even the head (HTTP/3's HEADERS frame takes stream window, as
		// DATA does; quic-go's client would read it and so give window).
		raw := e.quicDial(&quic.Config{InitialStreamReceiveWindow: window, MaxStreamReceiveWindow: window,
			InitialConnectionReceiveWindow: window, MaxConnectionReceiveWindow: window})
		str := e.h3Send(raw, h3Get("/dead"))
		testutil.Eventually(t, 15*time.Second, "tether's own answer cut", func() bool {
			return e.metric(tooSlowMetric, map[string]string{"direction": "response"}) == 2
		})
		_ = str.SetReadDeadline(time.Now().Add(15 * time.Second))
		n, err := io.Copy(io.Discard, str)
		var se *quic.StreamError
		if !errors.As(err, &se) || n >= 24000 {
			t.Errorf("tether's own 24 KB answer to a client with 1 KiB of window: %d bytes, %v; want the stream reset", n, err)
		}
		return
	}
	h := e.h2Dial()
	h.request(1, "GET", "/big?n="+strconv.Itoa(1<<30), -1)
	if got := h.await(1); got != "reset" {
		t.Fatalf("a large response on a stream with no window: %q, want reset", got)
	}
	h.request(3, "GET", "/small?n=3072", -1)
	if got := h.await(3); got != "reset" {
		t.Fatalf("a small response on a connection with no window left: %q, want reset", got)
	}
	if n := e.metric(tooSlowMetric, map[string]string{"direction": "response"}); n != 2 {
		t.Errorf("%s{direction=response}: %v, want 2", tooSlowMetric, n)
	}
}

// pipelineUnread sends req n times on a new HTTP/1.1 connection and never
// reads, until the too-slow counter for responses reaches want; then the
// connection must be cut (fewer than max bytes came).
func (e *modeEnv) pipelineUnread(req string, n, max int, want float64) {
	t := e.t
	t.Helper()
	c := e.dialSmallWindow()
	_ = c.SetDeadline(time.Now().Add(90 * time.Second))
	go func() {
		var batch []byte
		for range 100 {
			batch = append(batch, req...)
		}
		for sent := 0; sent < n; sent += 100 {
			if _, err := c.Write(batch); err != nil {
				return
			}
		}
	}()
	// The server fills the socket buffers first (a small window keeps them
	// small); a minute for that under the race detector on a loaded machine.
	testutil.Eventually(t, 60*time.Second, "the client that does not read counted as too slow", func() bool {
		return e.metric(tooSlowMetric, map[string]string{"direction": "response"}) >= want
	})
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	got, err := io.Copy(io.Discard, c)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() || got >= int64(max) {
		t.Errorf("after %d bytes: %v, want the connection cut", got, err)
	}
}

// A gRPC call over HTTP/2 may stream its request as slowly as it likes, as
// YARP exempts its streaming calls; the same drip as a plain POST is 408.
func TestMinRequestBodyDataRateExemptsGRPC(t *testing.T) {
	if testing.Short() {
		t.Skip("drips a body for a few seconds")
	}
	t.Parallel()
	b := newBackend(t, func(w http.ResponseWriter, r *http.Request) {
		n, _ := io.Copy(io.Discard, r.Body)
		fmt.Fprintf(w, "got %d", n)
	})
	for _, m := range serverModes {
		if m.h1() { // gRPC runs over HTTP/2 (and HTTP/3)
			continue
		}
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			e := startMode(t, m, backendCfg(b.URL, "", "",
				`"Limits": {"MinRequestBodyDataRate": {"BytesPerSecond": 100, "GracePeriod": "00:00:01.5"}}`), nil)
			const total = 60 // 2 bytes every 100 ms: 3 s at 20 B/s
			if m.h3 {
				cc, _ := e.h3Conn(nil)
				pr, pw := io.Pipe()
				go func() {
					tick := time.NewTicker(100 * time.Millisecond)
					defer tick.Stop()
					for sent := 0; sent < total; sent += 2 {
						<-tick.C
						if _, err := pw.Write([]byte("xx")); err != nil {
							return
						}
					}
					_ = pw.Close()
				}()
				req, _ := http.NewRequest(http.MethodPost, "https://h/pkg.Svc/Stream", pr)
				req.ContentLength = total
				req.Header.Set("Content-Type", "application/grpc")
				req.Header.Set("Te", "trailers")
				resp, body, err := readAll(cc.RoundTrip(req))
				if err != nil || resp.StatusCode != 200 || body != "got 60" {
					t.Errorf("a gRPC stream at 20 B/s: %v %q, want 200 \"got 60\"", err, body)
				}
				if n := e.metric(tooSlowMetric, nil); n != 0 {
					t.Errorf("%s: %v, want 0", tooSlowMetric, n)
				}
				return
			}
			h := e.h2Dial()
			h.request(1, "POST", "/pkg.Svc/Stream", total, hpack.HeaderField{Name: "content-type", Value: "application/grpc"},
				hpack.HeaderField{Name: "te", Value: "trailers"})
			tick := time.NewTicker(100 * time.Millisecond)
			defer tick.Stop()
			for sent := 0; sent < total; sent += 2 {
				<-tick.C
				if err := h.write(func(fr *http2.Framer) error { return fr.WriteData(1, sent+2 == total, []byte("xx")) }); err != nil {
					t.Fatal(err)
				}
			}
			if got := h.await(1); got != "200" || h.body(1) != "got 60" {
				t.Errorf("a gRPC stream at 20 B/s: %q %q, want 200 \"got 60\"", got, h.body(1))
			}
			if n := e.metric(tooSlowMetric, nil); n != 0 {
				t.Errorf("%s: %v, want 0", tooSlowMetric, n)
			}
		})
	}
}

// dripBody sends a POST with a total-byte body, chunk bytes each every
// tick, on a new connection, and returns the status ("reset" when the
// stream was reset, "closed" when the connection ended first) and the
// response body.
func (e *modeEnv) dripBody(total, chunk int, every time.Duration) (string, string) {
	e.t.Helper()
	done := make(chan struct{})
	defer close(done)
	drip := func(write func([]byte) error) {
		tick := time.NewTicker(every)
		defer tick.Stop()
		for sent := 0; sent < total; sent += chunk {
			select {
			case <-done:
				return
			case <-tick.C:
			}
			if write(bytes.Repeat([]byte("x"), min(chunk, total-sent))) != nil {
				return
			}
		}
	}
	if e.mode.h3 {
		cc, _ := e.h3Conn(nil)
		pr, pw := io.Pipe()
		defer pw.CloseWithError(io.ErrClosedPipe)
		go func() {
			drip(func(p []byte) error { _, err := pw.Write(p); return err })
			_ = pw.Close()
		}()
		status, resp := h3Do(e.t, cc, http.MethodPost, "/", pr, int64(total))
		if resp == nil {
			return status, ""
		}
		body, _ := io.ReadAll(resp.Body)
		return status, string(body)
	}
	if e.mode.h1() {
		c := e.dial()
		if _, err := fmt.Fprintf(c, "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: %d\r\n\r\n", total); err != nil {
			e.t.Fatal(err)
		}
		go drip(func(p []byte) error { _, err := c.Write(p); return err })
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			return "closed", ""
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return strconv.Itoa(resp.StatusCode), string(body)
	}
	h := e.h2Dial()
	h.request(1, "POST", "/", total)
	sent := 0
	go drip(func(p []byte) error {
		sent += len(p)
		return h.write(func(fr *http2.Framer) error { return fr.WriteData(1, sent == total, p) })
	})
	status := h.await(1)
	return status, h.body(1)
}

// h2Client is a raw HTTP/2 connection in the mode's way (prior knowledge,
// or TLS with ALPN h2) whose client never grants flow-control window
// beyond the initial one: await reads frames, answering SETTINGS.
type h2Client struct {
	t     *testing.T
	conn  net.Conn
	fr    *http2.Framer
	wmu   sync.Mutex
	enc   *hpack.Encoder
	block bytes.Buffer
	data  map[uint32]*bytes.Buffer
}

func (e *modeEnv) h2Dial() *h2Client {
	e.t.Helper()
	conn := e.connect(&net.Dialer{}, "h2")
	_ = conn.SetDeadline(time.Now().Add(20 * time.Second))
	h := &h2Client{t: e.t, conn: conn, fr: http2.NewFramer(conn, conn), data: map[uint32]*bytes.Buffer{}}
	h.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	h.enc = hpack.NewEncoder(&h.block)
	if _, err := io.WriteString(conn, http2.ClientPreface); err != nil {
		e.t.Fatal(err)
	}
	if err := h.write(func(fr *http2.Framer) error { return fr.WriteSettings() }); err != nil {
		e.t.Fatal(err)
	}
	return h
}

func (h *h2Client) write(f func(*http2.Framer) error) error {
	h.wmu.Lock()
	defer h.wmu.Unlock()
	return f(h.fr)
}

// request opens stream id with the extra fields; a body of length n
// follows (n < 0: none).
func (h *h2Client) request(id uint32, method, path string, n int, extra ...hpack.HeaderField) {
	h.t.Helper()
	err := h.write(func(fr *http2.Framer) error {
		h.block.Reset()
		fields := []hpack.HeaderField{{Name: ":method", Value: method}, {Name: ":scheme", Value: "http"},
			{Name: ":authority", Value: "h"}, {Name: ":path", Value: path}}
		if n >= 0 {
			fields = append(fields, hpack.HeaderField{Name: "content-length", Value: strconv.Itoa(n)})
		}
		fields = append(fields, extra...)
		for _, f := range fields {
			_ = h.enc.WriteField(f)
		}
		return fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: h.block.Bytes(), EndStream: n < 0, EndHeaders: true})
	})
	if err != nil {
		h.t.Fatal(err)
	}
}

// await reads frames until stream id's final status, then its end (its
// DATA kept for body, within the initial window), and returns the status:
// "reset" for RST_STREAM, "closed" when the connection ended first.
func (h *h2Client) await(id uint32) string {
	status := ""
	for {
		f, err := h.fr.ReadFrame()
		if err != nil {
			if status != "" {
				return status
			}
			return "closed"
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				_ = h.write(func(fr *http2.Framer) error { return fr.WriteSettingsAck() })
			}
		case *http2.GoAwayFrame:
			if status != "" {
				return status
			}
			return "closed"
		case *http2.RSTStreamFrame:
			if f.StreamID == id {
				return "reset" // before its end, whatever its status
			}
		case *http2.MetaHeadersFrame:
			if f.StreamID != id {
				continue
			}
			if st := f.PseudoValue("status"); st != "" && !strings.HasPrefix(st, "1") {
				status = st
			}
			if f.StreamEnded() && status != "" {
				return status
			}
		case *http2.DataFrame:
			if f.StreamID != id {
				continue
			}
			if h.data[id] == nil {
				h.data[id] = new(bytes.Buffer)
			}
			h.data[id].Write(f.Data())
			if f.StreamEnded() && status != "" {
				return status
			}
		}
	}
}

func (h *h2Client) body(id uint32) string {
	if b := h.data[id]; b != nil {
		return b.String()
	}
	return ""
}
