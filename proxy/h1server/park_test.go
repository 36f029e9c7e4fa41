package h1server

import (
	"bufio"
	"io"
	"net"
	"net/http"
	goruntime "runtime"
	"strings"
	"testing"
	"time"

	"github.com/tether-proxy/tether/test/testutil"
)

// parkedAndServing counts s's parked connections (on the poller or in
// parkWait) and the goroutines in a connection's serve (a worker on a
// request or in wait).
func parkedAndServing(s *Server) (parked, serving int) {
	buf := make([]byte, 1<<22)
	buf = buf[:goruntime.Stack(buf, true)]
	for g := range strings.SplitSeq(string(buf), "\n\n") {
		if strings.Contains(g, "(*h1Conn).serve(") {
			serving++
		}
	}
	return int(s.parked.Load()), serving
}

// An idle keep-alive connection that has made one request holds neither
// buffers nor, where the loop has its poller (Linux), a goroutine: with
// n of them open, every connection's read and write buffers are back in
// their pools and the process has no more goroutines than before but the
// idle workers the loop keeps. Each connection is then served again.
func TestH1IdleConnectionsHoldNoGoroutineNorBuffer(t *testing.T) {
	p := ownServer(t, http.HandlerFunc(okHandler), time.Minute, watchDelay, nil)
	h1PollerOf() // its goroutine is the process's, not the connections'
	base := goruntime.NumGoroutine()
	const n = 4 * maxIdleWorkers
	conns := make([]*waitConn, n)
	for i := range conns {
		c, err := net.Dial("tcp", p.own)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		_ = c.SetDeadline(time.Now().Add(20 * time.Second))
		conns[i] = &waitConn{t: t, c: c, br: bufio.NewReader(c)}
		conns[i].send(waitGet)
		conns[i].expect("ok")
	}
	s := p.ownSrv
	testutil.Eventually(t, 5*time.Second, "condition", func() bool { return s.parked.Load() == n && s.bufsHeld.Load() == 0 })
	if goruntime.GOOS == "linux" {
		if extra := goruntime.NumGoroutine() - base; extra > maxIdleWorkers+4 {
			t.Fatalf("%d goroutines more with %d idle connections, want at most the %d idle workers (and a few)", extra, n, maxIdleWorkers)
		}
	}
	for _, wc := range conns {
		wc.send(waitGet)
		wc.expect("ok")
	}
}

// A connection that has made fewer than waitAfter requests waits in
// parkWait, not on the worker that served it: with n such connections
// idle, n goroutines are parked and none is in a connection's serve. Each
// connection then goes on where it was (its count of requests too: the
// fifth request is followed by the second descriptor's wait, which needs
// waitAfter requests counted across the parks).
func TestH1IdleConnectionsParkOffTheirWorker(t *testing.T) {
	p := ownServer(t, http.HandlerFunc(okHandler), time.Minute, watchDelay, nil)
	const n = 8
	conns := make([]*waitConn, n)
	for i := range conns {
		c, err := net.Dial("tcp", p.own)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		conns[i] = &waitConn{t: t, c: c, br: bufio.NewReader(c)}
		conns[i].send(waitGet)
		conns[i].expect("ok")
	}
	testutil.Eventually(t, 5*time.Second, "condition", func() bool {
		parked, serving := parkedAndServing(p.ownSrv)
		return parked == n && serving == 0
	})
	for range waitAfter {
		for _, wc := range conns {
			wc.send(waitGet)
			wc.expect("ok")
		}
	}
	// Every connection has answered waitAfter+1 requests: each waits on
	// its second descriptor, in its worker's serve, and none is parked.
	testutil.Eventually(t, 5*time.Second, "condition", func() bool {
		parked, serving := parkedAndServing(p.ownSrv)
		return parked == 0 && serving == n && p.ownSrv.waitFiles.Load() == n
	})
	for _, wc := range conns {
		wc.send(waitGet)
		wc.expect("ok")
	}
}

// A parked connection has no goroutine on Linux (the poller waits for
// it), and elsewhere one that keeps the runtime's smallest stack, so an
// idle connection that made one request holds no stack (about 2 KiB
// without the poller) where one waiting on its worker held the 8 KiB the
// request path grew. Measured as the stack memory in use per connection,
// with more connections than idle workers are kept (whose stacks count,
// spread over the connections). On Linux the whole of an idle connection,
// its stack and its live heap (the client's side, in this process,
// included: about 0.4 KiB), is at most 2.5 KiB: it holds no buffers, no
// header maps and no request (h1Req) while it waits. Not under -race,
// whose instrumentation grows stacks.
func TestH1ParkedConnectionStackAllocation(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector grows goroutine stacks")
	}
	// The handler grows its goroutine's stack as the proxy's path does.
	deepOK := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { deepFrame(w, 12) })
	p := ownServer(t, deepOK, time.Minute, watchDelay, nil)
	// Two collections, as after the connections below: the stacks of
	// earlier tests' goroutines are gone from both readings.
	var before goruntime.MemStats
	goruntime.GC()
	goruntime.GC()
	goruntime.ReadMemStats(&before)
	const n = 1000
	conns := make([]net.Conn, 0, n)
	t.Cleanup(func() {
		for _, c := range conns {
			c.Close()
		}
	})
	br := bufio.NewReader(nil)
	for range n {
		c, err := net.Dial("tcp", p.own)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := c.Write([]byte(waitGet)); err != nil {
			t.Fatal(err)
		}
		br.Reset(c)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	testutil.Eventually(t, 5*time.Second, "condition", func() bool {
		parked, serving := parkedAndServing(p.ownSrv)
		return parked+serving == n // each waits, parked or on a worker
	})
	// Stacks of workers that have ended and what the pools held at the
	// first collection are gone at the second.
	goruntime.GC()
	goruntime.GC()
	var live goruntime.MemStats
	goruntime.ReadMemStats(&live)
	per := float64(int64(live.StackInuse)-int64(before.StackInuse)) / n
	heap := float64(int64(live.HeapAlloc)-int64(before.HeapAlloc)) / n
	t.Logf("stack in use per idle connection: %.0f B; live heap: %.0f B", per, heap)
	if goruntime.GOOS == "linux" && per+heap > 2.5*1024 {
		t.Fatalf("%.0f B of stack and live heap per idle connection, want at most 2.5 KiB", per+heap)
	}
	want := 3 << 10 // a parked goroutine's 2 KiB
	if goruntime.GOOS == "linux" {
		want = 1 << 10 // the idle workers' stacks over n connections
	}
	if per > float64(want) {
		t.Fatalf("%.0f B of stack per idle connection, want at most %d B", per, want)
	}
}

// deepFrame answers "ok" from depth frames of half a KiB each.
//
//go:noinline
func deepFrame(w http.ResponseWriter, depth int) byte {
	var pad [512]byte
	pad[depth%len(pad)] = byte(depth)
	if depth == 0 {
		_, _ = w.Write([]byte("ok"))
		return pad[0]
	}
	return deepFrame(w, depth-1) + pad[depth%len(pad)]
}

// BenchmarkH1ServerShortKeepAlive: connections of waitAfter requests
// each, so every request after a connection's first follows a park (what
// parking costs a connection that makes a few requests: a goroutine and a
// hand-off to a worker per wait). One op is one connection.
func BenchmarkH1ServerShortKeepAlive(b *testing.B) {
	body := make([]byte, 1024) // what testutil.RawClient.Get reads
	p := newPair(b, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write(body) }), nil)
	req := []byte(waitGet)
	b.ReportAllocs()
	u0 := testutil.UserCPU()
	for b.Loop() {
		c, err := net.Dial("tcp", p.own)
		if err != nil {
			b.Fatal(err)
		}
		rc := testutil.NewRawClient(c)
		for range waitAfter {
			rc.Get(b, req, nil)
		}
		c.Close()
	}
	b.ReportMetric(float64((testutil.UserCPU()-u0).Microseconds())/float64(b.N), "user-µs/op")
}

// A connection that waits on its second descriptor for parkAfter is
// parked too: its descriptor closed, no goroutine left in its serve. Its
// next request is served, and it gets a second descriptor again; its
// idle timeout still ends it while parked.
func TestH1LongIdleConnectionsParkToo(t *testing.T) {
	p := ownServer(t, http.HandlerFunc(okHandler), 2*time.Second, watchDelay, func(s *Server) {
		s.parkAfter = 100 * time.Millisecond
	})
	wc := dialWaiting(t, p) // waitAfter+1 requests: waiting on its second descriptor
	parkedOnce := func() {
		t.Helper()
		testutil.Eventually(t, 5*time.Second, "condition", func() bool {
			parked, serving := parkedAndServing(p.ownSrv)
			return parked == 1 && serving == 0 && p.ownSrv.waitFiles.Load() == 0
		})
	}
	parkedOnce()
	wc.send(waitGet)
	wc.expect("ok")
	testutil.Eventually(t, 5*time.Second, "condition", func() bool { return p.ownSrv.anyWaitFile() })
	parkedOnce()
	start := time.Now()
	wc.expectEOF(5 * time.Second)
	if d := time.Since(start); d > 4*time.Second {
		t.Fatalf("a parked connection closed %v after it parked, idle timeout 2 s", d)
	}
}

// A connection parked on the poller shares its timer between the idle
// deadline (while parked) and the client watch (while a request runs):
// after parks, a slow request's context is still cancelled when its
// client goes away, and a connection left idle still closes at its idle
// timeout.
func TestH1ParkedConnectionKeepsItsWatchAndIdleTimeout(t *testing.T) {
	cancelled := make(chan struct{})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/slow" {
			_, _ = io.WriteString(w, "ok")
			return
		}
		select {
		case <-r.Context().Done():
			close(cancelled)
		case <-time.After(10 * time.Second):
		}
	})
	p := ownServer(t, h, 500*time.Millisecond, watchDelay, nil)
	t.Run("the watch after parks", func(t *testing.T) {
		c, err := net.Dial("tcp", p.own)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		wc := &waitConn{t: t, c: c, br: bufio.NewReader(c)}
		for range 2 {
			wc.send(waitGet)
			wc.expect("ok")
			testutil.Eventually(t, 5*time.Second, "condition", func() bool { return p.ownSrv.parked.Load() == 1 })
		}
		wc.send("GET /slow HTTP/1.1\r\nHost: h\r\n\r\n")
		waitWatch(t, p.ownSrv, watchReading)
		c.Close()
		select {
		case <-cancelled:
		case <-time.After(5 * time.Second):
			t.Fatal("the request's context was not cancelled when its client went away")
		}
	})
	t.Run("the idle timeout while parked", func(t *testing.T) {
		c, err := net.Dial("tcp", p.own)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		wc := &waitConn{t: t, c: c, br: bufio.NewReader(c)}
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		wc.send(waitGet)
		wc.expect("ok")
		start := time.Now()
		wc.expectEOF(5 * time.Second)
		if d := time.Since(start); d < 400*time.Millisecond || d > 3*time.Second {
			t.Fatalf("closed %v after its response, idle timeout 500 ms", d)
		}
	})
}
