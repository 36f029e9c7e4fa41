package h2server

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/tether-proxy/tether/proxy/internal/cancelhook"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// BenchmarkServe: GETs answered with 1 KiB over one h2c connection, 8
// streams at a time, by the own server and by net/http's (the client's
// cost is in both).
func BenchmarkServe(b *testing.B) {
	body := strings.Repeat("x", 1024)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		_, _ = io.WriteString(w, body)
	})
	for _, own := range []bool{true, false} {
		name := "stdlib"
		if own {
			name = "own"
		}
		b.Run(name, func(b *testing.B) {
			ln := serveH2C(b, h, own)
			tr := &http.Transport{Protocols: new(http.Protocols)}
			tr.Protocols.SetUnencryptedHTTP2(true)
			defer tr.CloseIdleConnections()
			url := "http://" + ln.Addr().String() + "/"
			b.SetParallelism(8)
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					req, _ := http.NewRequest("GET", url, nil)
					resp, err := tr.RoundTrip(req)
					if err != nil {
						b.Error(err)
						return
					}
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
			})
		})
	}
}

// BenchmarkServeRaw: the same GETs, 8 streams at a time on one h2c
// connection, from a client that sends pre-encoded HEADERS frames and only
// reads frames back, so that what is measured is mostly the server's. The
// handler registers a close-on-cancel as the lean transport does; the
// request carries an affinity cookie.
func BenchmarkServeRaw(b *testing.B) {
	body := strings.Repeat("x", 1024)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// As the lean transport does around a backend round trip.
		reg := cancelhook.OnCancel(r.Context(), func() {})
		w.Header().Set("Content-Type", "text/plain")
		_, _ = io.WriteString(w, body)
		reg.Stop()
	})
	for _, own := range []bool{true, false} {
		name := "stdlib"
		if own {
			name = "own"
		}
		b.Run(name, func(b *testing.B) {
			ln := serveH2C(b, h, own)
			nc, err := net.Dial("tcp", ln.Addr().String())
			if err != nil {
				b.Fatal(err)
			}
			defer nc.Close()
			bw := bufio.NewWriter(nc)
			fr := http2.NewFramer(bw, bufio.NewReader(nc))
			fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
			_, _ = io.WriteString(bw, http2.ClientPreface)
			_ = fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1 << 30})
			_ = fr.WriteWindowUpdate(0, 1<<30)
			// The first stream's block adds its fields to the dynamic
			// table; the others' refer to them, as a real client's do.
			var buf bytes.Buffer
			enc := hpack.NewEncoder(&buf)
			var blocks [2][]byte
			for i := range blocks {
				for _, f := range [][2]string{{":method", "GET"}, {":scheme", "http"}, {":authority", "bench.example"},
					{":path", "/x"}, {"user-agent", "h2load nghttp2/1.59.0"}, {"accept", "*/*"},
					{"cookie", ".Tether.Affinity=3f2a9c41d07be865"}} {
					_ = enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
				}
				blocks[i] = bytes.Clone(buf.Bytes())
				buf.Reset()
			}
			const depth = 8
			id := uint32(1)
			sent, recv := 0, 0
			var unacked uint32
			send := func() {
				for sent-recv < depth && sent < b.N {
					block := blocks[1]
					if id == 1 {
						block = blocks[0]
					}
					_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: block, EndStream: true, EndHeaders: true})
					id += 2
					sent++
				}
				if unacked > 1<<20 {
					_ = fr.WriteWindowUpdate(0, unacked)
					unacked = 0
				}
				_ = bw.Flush()
			}
			b.ReportAllocs()
			b.ResetTimer()
			send()
			for recv < b.N {
				f, err := fr.ReadFrame()
				if err != nil {
					b.Fatal(err)
				}
				switch f := f.(type) {
				case *http2.DataFrame:
					unacked += f.Length
					if f.StreamEnded() {
						recv++
						send()
					}
				case *http2.MetaHeadersFrame:
					if f.StreamEnded() {
						recv++
						send()
					}
				case *http2.GoAwayFrame, *http2.RSTStreamFrame:
					b.Fatalf("%v", f)
				}
			}
		})
	}
}

// serveH2C serves h over h2c (the own server when own) on a loopback
// listener until the benchmark ends.
func serveH2C(b *testing.B, h http.Handler, own bool) net.Listener {
	b.Helper()
	srv := &http.Server{Handler: h, Protocols: new(http.Protocols)}
	srv.Protocols.SetUnencryptedHTTP2(true)
	if own {
		New(srv)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	b.Cleanup(func() { srv.Close() })
	return ln
}
