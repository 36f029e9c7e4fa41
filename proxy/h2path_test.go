package proxy

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tether-proxy/tether/proxy/accesslog"
	"github.com/tether-proxy/tether/proxy/config"
	"github.com/tether-proxy/tether/proxy/frontdoor"
	"github.com/tether-proxy/tether/test/testutil"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// h2cDepth is how many streams the h2c rig keeps in flight on its one
// connection, as each of the race's h2load connections does (-m 8).
const h2cDepth = 8

// BenchmarkH2CPath: GETs with a valid HashCookie key over one h2c
// connection, h2cDepth streams at a time, through the front door (the own
// HTTP/2 server or net/http's), the proxy's direct and lean path and the
// batched access log to a raw backend answering 1 KiB. The raw client
// sends pre-encoded HEADERS frames and reads frames without decoding
// them; it and the backend allocate nothing per request, so allocs/op is
// the proxy's and its HTTP/2 server's. user-µs/op is as
// BenchmarkDirectPath's.
func BenchmarkH2CPath(b *testing.B) {
	for _, h2 := range []frontdoor.HTTP2Server{frontdoor.HTTP2Own, frontdoor.HTTP2Stdlib} {
		b.Run(string(h2), func(b *testing.B) {
			rig := h2cPathRig(b, h2)
			b.ReportAllocs()
			u0 := testutil.UserCPU()
			b.ResetTimer()
			rig.run(b, b.N)
			b.ReportMetric(float64((testutil.UserCPU()-u0).Microseconds())/float64(b.N), "user-µs/op")
		})
	}
}

// h2cRig is a raw h2c client on a proxy's front door.
type h2cRig struct {
	nc      net.Conn
	bw      *bufio.Writer
	br      *bufio.Reader
	fr      *http2.Framer
	blocks  [2][]byte // the first stream's HEADERS block, and the others'
	id      uint32
	unacked uint32
}

// h2cPathRig starts a raw backend answering 1 KiB, the proxy with a
// HashCookie cluster and the batched access log behind a front door whose
// one listener speaks h2c (served by h2), and a raw client on it with a
// session key, warmed up.
func h2cPathRig(tb testing.TB, h2 frontdoor.HTTP2Server) *h2cRig {
	tb.Helper()
	ln, canned := backendListener(tb, bytes.Repeat([]byte("x"), 1024))
	go acceptCanned(ln, canned)
	js := regexp.MustCompile(`"http://10\.1\.2\.\d:8080/"`).ReplaceAllString(affinityBenchConfig, strconv.Quote("http://"+ln.Addr().String()+"/"))
	cfg := mustParse(tb, js)
	l := config.Listener{Address: "127.0.0.1:0"}
	l.Protocols = config.ProtocolsHttp2
	cfg.Listeners = []config.Listener{l}
	al := accesslog.New(io.Discard)
	tb.Cleanup(func() { al.Close() })
	h := newHarness(tb, cfg, func(o *Options) { o.AccessLog = al.Logger() })
	s, err := frontdoor.New(cfg, h.p, nil, frontdoor.WithHTTP2Server(h2))
	if err != nil {
		tb.Fatal(err)
	}
	if err := s.Start(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = s.Shutdown(ctx)
	})
	nc, err := net.Dial("tcp", s.Addrs()[0].String())
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { nc.Close() })
	r := &h2cRig{nc: nc, bw: bufio.NewWriter(nc), br: bufio.NewReader(nc), id: 1}
	r.fr = http2.NewFramer(r.bw, r.br)
	r.fr.SetReuseFrames()
	_, _ = io.WriteString(r.bw, http2.ClientPreface)
	_ = r.fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1 << 30})
	_ = r.fr.WriteWindowUpdate(0, 1<<30)

	// A new session: its key, from a stream whose answer is decoded.
	var buf bytes.Buffer
	enc := hpack.NewEncoder(&buf)
	field := func(k, v string) { _ = enc.WriteField(hpack.HeaderField{Name: k, Value: v}) }
	for _, f := range [][2]string{{":method", "GET"}, {":scheme", "http"}, {":authority", "front.example"}, {":path", "/x"}} {
		field(f[0], f[1])
	}
	_ = r.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: r.id, BlockFragment: buf.Bytes(), EndStream: true, EndHeaders: true})
	r.id += 2
	_ = r.bw.Flush()
	dec := hpack.NewDecoder(4096, nil)
	var cookie string
	for done := false; !done; {
		f, err := r.fr.ReadFrame()
		if err != nil {
			tb.Fatal(err)
		}
		switch f := f.(type) {
		case *http2.HeadersFrame:
			hfs, err := dec.DecodeFull(f.HeaderBlockFragment())
			if err != nil {
				tb.Fatal(err)
			}
			for _, hf := range hfs {
				if hf.Name == "set-cookie" && cookie == "" {
					cookie, _, _ = strings.Cut(hf.Value, ";")
				}
			}
			done = f.StreamEnded()
		case *http2.DataFrame:
			done = f.StreamEnded()
		case *http2.GoAwayFrame, *http2.RSTStreamFrame:
			tb.Fatalf("%v", f)
		}
	}
	if cookie == "" {
		tb.Fatal("no affinity cookie")
	}
	// The first stream's block adds its fields to the dynamic table; the
	// others' refer to them, as a real client's do.
	buf.Reset()
	for i := range r.blocks {
		for _, f := range [][2]string{{":method", "GET"}, {":scheme", "http"}, {":authority", "front.example"},
			{":path", "/x"}, {"user-agent", "h2load nghttp2/1.59.0"}, {"accept", "*/*"}, {"cookie", cookie}} {
			field(f[0], f[1])
		}
		r.blocks[i] = bytes.Clone(buf.Bytes())
		buf.Reset()
	}
	r.run(tb, 200)
	return r
}

// run sends n requests, at most h2cDepth in flight, and reads their
// answers; finished streams are replaced once what was read is handled.
func (r *h2cRig) run(tb testing.TB, n int) {
	sent, recv := 0, 0
	send := func() {
		for sent-recv < h2cDepth && sent < n {
			block := r.blocks[1]
			if r.id == 3 {
				block = r.blocks[0]
			}
			_ = r.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: r.id, BlockFragment: block, EndStream: true, EndHeaders: true})
			r.id += 2
			sent++
		}
		if r.unacked > 1<<20 {
			_ = r.fr.WriteWindowUpdate(0, r.unacked)
			r.unacked = 0
		}
		_ = r.bw.Flush()
	}
	send()
	for recv < n {
		f, err := r.fr.ReadFrame()
		if err != nil {
			tb.Fatal(err)
		}
		end := false
		switch f := f.(type) {
		case *http2.DataFrame:
			r.unacked += f.Length
			end = f.StreamEnded()
		case *http2.HeadersFrame:
			if !f.HeadersEnded() {
				tb.Fatal("CONTINUATION in a small answer")
			}
			end = f.StreamEnded()
		case *http2.GoAwayFrame, *http2.RSTStreamFrame:
			tb.Fatalf("%v", f)
		}
		if end {
			recv++
		}
		if r.br.Buffered() == 0 {
			// As h2load: what was read is acted on, then new streams
			// are sent together.
			send()
		}
	}
}

// h2cPathAllocs is what a GET with a valid HashCookie key allocates
// through the own HTTP/2 server over h2c (BenchmarkH2CPath's request),
// the raw client's share (the Framer's HEADERS frame) included.
const h2cPathAllocs = 5

// TestH2CPathAllocations holds the own HTTP/2 server's data path to
// h2cPathAllocs per request, h2cDepth streams at a time.
func TestH2CPathAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates on its own")
	}
	rig := h2cPathRig(t, frontdoor.HTTP2Own)
	n := testing.AllocsPerRun(100, func() { rig.run(t, h2cDepth) }) / h2cDepth
	if n > h2cPathAllocs {
		t.Errorf("a proxied h2c request allocates %.1f times, want at most %d", n, h2cPathAllocs)
	} else {
		t.Logf("%.1f allocations per proxied h2c request", n)
	}
}
