package proxy

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tether-proxy/tether/proxy/accesslog"
	"github.com/tether-proxy/tether/proxy/frontdoor"
	"github.com/tether-proxy/tether/test/testutil"
)

// directPathAllocs is what a keep-alive GET with a valid HashCookie key
// allocates, from the own loop's read of the request to the last byte of
// the response, over the direct and lean path and the batched access
// log: the loop's request context and head string, the request state's
// context value with the traceparent, the response head's string.
const directPathAllocs = 4

// TestDirectPathAllocations holds the data path to directPathAllocs: a
// raw backend and a raw client that allocate nothing per request, so the
// process's count is the proxy's own.
func TestDirectPathAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates on its own")
	}
	send := directPathRig(t, false, false)
	if n := testing.AllocsPerRun(500, send); n > directPathAllocs {
		t.Errorf("a proxied request allocates %.1f times, want at most %d", n, directPathAllocs)
	} else {
		t.Logf("%.1f allocations per proxied request", n)
	}
}

// BenchmarkDirectPath: TestDirectPathAllocations's request, one after
// another on one connection. The time includes the raw client's and
// backend's share (their reads and writes on loopback), the same for
// every build, so it compares builds of the data path.
//
// user-µs/op is the process's user CPU per request (getrusage): the
// kernel's loopback work, which is most of ns/op and swings with the
// host, is left out, so a change to the proxy's own code shows there
// first. The raw client's and backend's user time (a few hundred ns) is in
// it too, the same for every build.
//
// The nethttp variant's backend is net/http's server answering as a real
// server does (Content-Length, Content-Type, Date, Server): its own user
// time is in user-µs/op and its allocations in allocs/op, the same for
// every build.
func BenchmarkDirectPath(b *testing.B) {
	for _, nethttp := range []bool{false, true} {
		name := "raw"
		if nethttp {
			name = "nethttp"
		}
		b.Run(name, func(b *testing.B) {
			send := directPathRig(b, nethttp, false)
			b.ReportAllocs()
			u0 := testutil.UserCPU()
			for b.Loop() {
				send()
			}
			b.ReportMetric(float64((testutil.UserCPU()-u0).Microseconds())/float64(b.N), "user-µs/op")
		})
	}
}

// BenchmarkFrontDoor: BenchmarkDirectPath's request through the front
// door as tether agent builds it for a cleartext listener with no
// connection cap (the race's config): frontdoor.New's handler (the header
// limit, the ACME challenge check) and listener (sockio's send(2) and
// recv(2), the write yield under GOMAXPROCS 1), the proxy with a
// Prometheus registry and the batched access log written to a file.
func BenchmarkFrontDoor(b *testing.B) {
	for _, nethttp := range []bool{false, true} {
		name := "raw"
		if nethttp {
			name = "nethttp"
		}
		b.Run(name, func(b *testing.B) {
			send := directPathRig(b, nethttp, true)
			b.ReportAllocs()
			u0 := testutil.UserCPU()
			for b.Loop() {
				send()
			}
			b.ReportMetric(float64((testutil.UserCPU()-u0).Microseconds())/float64(b.N), "user-µs/op")
		})
	}
}

// directPathRig starts a backend answering 1 KiB (raw, or net/http's
// server with nethttp), the proxy with a HashCookie cluster and the
// batched access log behind the own loop, and a raw client with a session
// key; send sends one request and reads its whole response. With front,
// the proxy is behind the front door (BenchmarkFrontDoor) and the access
// log goes to a file.
func directPathRig(tb testing.TB, nethttp, front bool) (send func()) {
	tb.Helper()
	body := bytes.Repeat([]byte("x"), 1024)
	ln, canned := backendListener(tb, body)
	if nethttp {
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Server", "Kestrel")
			w.Header().Set("Content-Type", "application/octet-stream")
			w.Header().Set("Content-Length", "1024")
			w.Write(body)
		})}
		go srv.Serve(ln)
		tb.Cleanup(func() { srv.Close() })
	} else {
		go acceptCanned(ln, canned)
	}
	cfg := regexp.MustCompile(`"http://10\.1\.2\.\d:8080/"`).ReplaceAllString(affinityBenchConfig, strconv.Quote("http://"+ln.Addr().String()+"/"))
	var addr string
	if front {
		cfg = strings.Replace(cfg, "{", `{ "Listeners": [ { "Address": "127.0.0.1:0" } ],`, 1)
		f, err := os.Create(filepath.Join(tb.TempDir(), "access.log"))
		if err != nil {
			tb.Fatal(err)
		}
		al := accesslog.New(f)
		tb.Cleanup(func() { al.Close(); f.Close() })
		c := mustParse(tb, cfg)
		p := newTestProxy(tb, c, prometheus.NewRegistry(), io.Discard, func(o *Options) { o.AccessLog = al.Logger() })
		s, err := frontdoor.New(c, p, nil)
		if err != nil {
			tb.Fatal(err)
		}
		if err := s.Start(); err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = s.Shutdown(ctx)
		})
		addr = s.Addrs()[0].String()
	} else {
		al := accesslog.New(io.Discard)
		tb.Cleanup(func() { al.Close() })
		h := newHarness(tb, mustParse(tb, cfg), func(o *Options) { o.AccessLog = al.Logger() })
		addr = ownLoopFront(tb, h.p)
	}
	c, err := net.Dial("tcp", addr)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { c.Close() })
	rc := testutil.NewRawClient(c)
	var cookie string
	rc.Get(tb, []byte("GET /x HTTP/1.1\r\nHost: front.example\r\n\r\n"), func(line []byte) { // a new session: its key
		if v, ok := bytes.CutPrefix(line, []byte("Set-Cookie: ")); ok && cookie == "" {
			cookie, _, _ = strings.Cut(string(v), ";")
		}
	})
	if cookie == "" {
		tb.Fatal("no affinity cookie")
	}
	req := []byte("GET /x HTTP/1.1\r\nHost: front.example\r\nUser-Agent: bench\r\nCookie: " + cookie + "\r\n\r\n")
	for range 200 {
		rc.Get(tb, req, nil)
	}
	return func() { rc.Get(tb, req, nil) }
}

// backendListener is a loopback listener for a benchmark's backend and
// the canned 200 answer with body a raw backend gives (acceptCanned).
func backendListener(tb testing.TB, body []byte) (net.Listener, []byte) {
	tb.Helper()
	canned := append([]byte("HTTP/1.1 200 OK\r\nContent-Length: "+strconv.Itoa(len(body))+"\r\nContent-Type: application/octet-stream\r\nDate: Tue, 01 Dec 2026 12:00:00 GMT\r\n\r\n"), body...)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { ln.Close() })
	return ln, canned
}

// acceptCanned serves ln's connections: canned for every request head.
func acceptCanned(ln net.Listener, canned []byte) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			var buf [8 << 10]byte
			n := 0
			for {
				m, err := c.Read(buf[n:])
				if err != nil {
					return
				}
				n += m
				for {
					i := bytes.Index(buf[:n], []byte("\r\n\r\n"))
					if i < 0 {
						break
					}
					if _, err := c.Write(canned); err != nil {
						return
					}
					n = copy(buf[:], buf[i+4:n])
				}
			}
		}()
	}
}
