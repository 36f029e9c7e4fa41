package proxy

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tether-proxy/tether/proxy/health"
	"github.com/tether-proxy/tether/proxy/upstream"
	"github.com/tether-proxy/tether/test/testutil"
)

const passiveOn = `"HealthCheck": {"Passive": {"Enabled": true, "ReactivationPeriod": "00:10:00"}}`

// TestClientFaultsDoNotExcludeDestination: requests that fail because of
// the client are answered with a 4xx and never mark the destination
// unhealthy (before, each was a 502 plus a passive exclusion: any client
// could empty a cluster).
func TestClientFaultsDoNotExcludeDestination(t *testing.T) {
	b := newBackend(t, func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		_, _ = io.WriteString(w, "ok")
	})
	cases := []struct {
		desc string
		req  string
		want int
	}{
		{desc: "Upgrade to a protocol name that is not a token", want: 400,
			req: "GET / HTTP/1.1\r\nHost: h\r\nConnection: Upgrade\r\nUpgrade: web\tsocket\r\n\r\n"},
		{desc: "malformed chunked body", want: 400,
			req: "POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n"},
		{desc: "CONNECT is not tunnelled", want: 405,
			req: "CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n"},
	}
	for _, c := range cases {
		t.Run(c.desc, func(t *testing.T) {
			h := newHarness(t, mustParse(t, simpleConfig(map[string]string{"d1": b.URL}, passiveOn, "", "")), nil)
			// Enough of them that, were they counted as failures, the failure
			// rate would exclude the destination.
			for i := 0; i < 2*health.DefaultMinRequests; i++ {
				resp, err := testutil.RawRequest(t, strings.TrimPrefix(h.front.URL, "http://"), c.req)
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				if resp.StatusCode != c.want {
					t.Fatalf("status %d, want %d", resp.StatusCode, c.want)
				}
			}
			d := h.p.Cluster("c").Destination("d1")
			if d.PassiveFailed(time.Now()) {
				t.Fatal("a client's fault excluded the destination")
			}
			if resp, _ := get(t, nil, h.front.URL+"/", nil); resp.StatusCode != 200 {
				t.Fatalf("next request: %d, want 200", resp.StatusCode)
			}
		})
	}
}

// TestDotSegmentsCannotEscapeARoute: "/public/../admin" neither matches the
// /public route nor reaches a backend as such.
func TestDotSegmentsCannotEscapeARoute(t *testing.T) {
	b := newBackend(t, nil)
	cfg := mustParse(t, `{"ReverseProxy": {
	  "Routes": {"pub": {"ClusterId": "c", "Match": {"Path": "/public/{**rest}"}}},
	  "Clusters": {"c": {"Destinations": {"d1": {"Address": "`+b.URL+`"}}}}}}`)
	h := newHarness(t, cfg, nil)
	for _, p := range []string{"/public/../admin", "/public/%2e%2e/admin", "/public/./../admin"} {
		resp, err := testutil.RawRequest(t, strings.TrimPrefix(h.front.URL, "http://"), "GET "+p+" HTTP/1.1\r\nHost: h\r\n\r\n")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 404 {
			t.Errorf("%s: %d, want 404 (no route for /admin)", p, resp.StatusCode)
		}
	}
	if b.hitCount() != 0 {
		t.Fatalf("backend reached %d times", b.hitCount())
	}
	resp, err := testutil.RawRequest(t, strings.TrimPrefix(h.front.URL, "http://"), "GET /public/x/../y HTTP/1.1\r\nHost: h\r\n\r\n")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || b.lastRequest().URL.Path != "/public/y" {
		t.Fatalf("status %d, backend path %q, want 200 /public/y", resp.StatusCode, b.lastRequest().URL.Path)
	}
}

func TestSpoofableForwardingHeadersDropped(t *testing.T) {
	b := newBackend(t, nil)
	spoof := "GET / HTTP/1.1\r\nHost: h\r\nX-Forwarded-Prefix: /evil\r\nX-Real-IP: 6.6.6.6\r\nX_Forwarded_For: 6.6.6.6\r\nX_Real_IP: 6.6.6.6\r\nX-Other_Thing: kept\r\n\r\n"
	cases := []struct {
		desc       string
		top        string
		wantPrefix string
	}{
		{desc: "untrusted peer: all dropped", wantPrefix: ""},
		{desc: "trusted peer: X-Forwarded-Prefix kept, underscore spellings still dropped", top: `"TrustedProxies": ["127.0.0.1"]`, wantPrefix: "/evil"},
	}
	for _, c := range cases {
		t.Run(c.desc, func(t *testing.T) {
			h := newHarness(t, mustParse(t, simpleConfig(map[string]string{"d1": b.URL}, "", "", c.top)), nil)
			resp, err := testutil.RawRequest(t, strings.TrimPrefix(h.front.URL, "http://"), spoof)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			got := b.lastRequest().Header
			if v := got.Get("X-Forwarded-Prefix"); v != c.wantPrefix {
				t.Errorf("X-Forwarded-Prefix = %q, want %q", v, c.wantPrefix)
			}
			for k := range got {
				if strings.Contains(strings.ToLower(k), "forwarded_for") || strings.Contains(strings.ToLower(k), "real_ip") {
					t.Errorf("underscore spelling %s reached the backend", k)
				}
			}
			if got.Get("X-Other_thing") != "kept" {
				t.Errorf("an unrelated underscore header was dropped: %v", got)
			}
			if got.Get("X-Forwarded-For") != "127.0.0.1" && c.top == "" {
				t.Errorf("X-Forwarded-For = %q", got.Get("X-Forwarded-For"))
			}
		})
	}
}

// TestStalledUploadGets408 and does not exclude the destination: the
// client's idle upload is cut after ActivityTimeout.
func TestStalledUploadGets408(t *testing.T) {
	b := newBackend(t, func(w http.ResponseWriter, r *http.Request) {
		if _, err := io.Copy(io.Discard, r.Body); err != nil {
			panic(http.ErrAbortHandler) // a strict backend drops a short upload
		}
	})
	h := newHarness(t, mustParse(t, simpleConfig(map[string]string{"d1": b.URL},
		passiveOn+`, "HttpRequest": {"ActivityTimeout": "00:00:00.3"}`, "", "")), nil)
	// Three at once: were they counted as failures, they would make 3 of
	// the 10 requests that follow fail (30 % is not over the limit) plus
	// these: enough to exclude.
	errs := make(chan error, 3)
	for i := 0; i < 3; i++ {
		go func() { errs <- stalledUpload(h.front.URL) }()
	}
	for i := 0; i < 3; i++ {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < health.DefaultMinRequests; i++ {
		if resp, _ := get(t, nil, h.front.URL+"/", nil); resp.StatusCode != 200 {
			t.Fatalf("request %d after stalled uploads: %d", i, resp.StatusCode)
		}
	}
	if h.p.Cluster("c").Destination("d1").PassiveFailed(time.Now()) {
		t.Fatal("a stalled client excluded the destination")
	}
}

// stalledUpload sends 1 byte of a 100-byte body and expects a 408.
func stalledUpload(front string) error {
	conn, err := net.Dial("tcp", strings.TrimPrefix(front, "http://"))
	if err != nil {
		return err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	_, _ = io.WriteString(conn, "POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 100\r\n\r\nx")
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		return fmt.Errorf("no response to a stalled upload: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestTimeout {
		return fmt.Errorf("status %d, want 408", resp.StatusCode)
	}
	return nil
}

// TestBackendStallMidResponseIsCut: a backend that stops sending in the
// middle of a body is cut after ActivityTimeout, and the access log says
// the response was aborted.
func TestBackendStallMidResponseIsCut(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	b := newBackend(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "100")
		_, _ = io.WriteString(w, "partial")
		http.NewResponseController(w).Flush()
		select {
		case <-release:
		case <-time.After(10 * time.Second):
		}
	})
	h := newHarness(t, mustParse(t, simpleConfig(map[string]string{"d1": b.URL},
		`"HttpRequest": {"ActivityTimeout": "00:00:00.3"}`, "", "")), nil)
	// The client sees the cut as an error: before the headers (they were
	// still buffered) or in the body.
	done := make(chan error, 1)
	go func() {
		resp, err := http.Get(h.front.URL + "/")
		if err == nil {
			_, err = io.ReadAll(resp.Body)
			resp.Body.Close()
		}
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("a cut response read as complete")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("stalled backend response was not cut")
	}
	testutil.Eventually(t, 5*time.Second, "condition", func() bool {
		for _, l := range h.accessLines(t) {
			if l["aborted"] == true {
				return true
			}
		}
		return false
	})
}

// TestReloadKeepsPassiveExclusion when only a destination's metadata changed.
func TestReloadKeepsPassiveExclusion(t *testing.T) {
	b := newBackend(t, nil)
	h := newHarness(t, mustParse(t, simpleConfig(map[string]string{"d1": b.URL}, passiveOn, "", "")), nil)
	h.p.Cluster("c").Destination("d1").MarkPassiveFailure(time.Now().Add(time.Hour))
	cfg := mustParse(t, `{"ReverseProxy": {
	  "Routes": {"r": {"ClusterId": "c", "Match": {"Path": "{**catch-all}"}}},
	  "Clusters": {"c": {`+passiveOn+`, "Destinations": {"d1": {"Address": "`+b.URL+`", "Metadata": {"zone": "b"}}}}}}}`)
	if err := h.p.Update(cfg); err != nil {
		t.Fatal(err)
	}
	d := h.p.Cluster("c").Destination("d1")
	if d.Metadata["zone"] != "b" || !d.PassiveFailed(time.Now()) {
		t.Fatalf("after reload: metadata %v, passive failed %v", d.Metadata, d.PassiveFailed(time.Now()))
	}
	if d.ActiveHealth() == upstream.Unhealthy {
		t.Fatal("active health changed by reload")
	}
}

// TestUpdateKeepsWarmBackendConnections: a reload that leaves a cluster's
// client settings alone keeps its transport and so its idle connections;
// one that changes them builds a new transport.
func TestUpdateKeepsWarmBackendConnections(t *testing.T) {
	var mu sync.Mutex
	remotes := map[string]bool{}
	b := newBackend(t, func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		remotes[r.RemoteAddr] = true
		mu.Unlock()
	})
	conns := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(remotes)
	}
	cfg := func(cluster string) string {
		return simpleConfig(map[string]string{"d1": b.URL}, cluster, "", "")
	}
	h := newHarness(t, mustParse(t, cfg(`"LoadBalancingPolicy": "RoundRobin"`)), nil)
	get(t, nil, h.front.URL+"/", nil)
	// A route-level or policy change only: same client settings.
	if err := h.p.Update(mustParse(t, cfg(`"LoadBalancingPolicy": "Random"`))); err != nil {
		t.Fatal(err)
	}
	get(t, nil, h.front.URL+"/", nil)
	if n := conns(); n != 1 {
		t.Fatalf("backend saw %d connections across a reload that kept the client settings, want 1", n)
	}
	if err := h.p.Update(mustParse(t, cfg(`"HttpClient": {"MaxConnectionsPerServer": 5}`))); err != nil {
		t.Fatal(err)
	}
	get(t, nil, h.front.URL+"/", nil)
	if n := conns(); n != 2 {
		t.Fatalf("backend saw %d connections after the client settings changed, want 2 (a new transport)", n)
	}
}

// TestDrainTimeoutZeroDrainsAtOnce: a given DrainTimeout of 0 gives
// existing sessions no grace; an absent one takes the 5-minute default.
func TestDrainTimeoutZeroDrainsAtOnce(t *testing.T) {
	b := newBackend(t, nil)
	cases := []struct {
		desc    string
		cluster string
		want    time.Duration
	}{
		{desc: "given 0: no grace", cluster: `"DrainTimeout": "00:00:00"`, want: 0},
		{desc: "absent: the default", cluster: "", want: defaultDrainTimeout},
	}
	for _, c := range cases {
		t.Run(c.desc, func(t *testing.T) {
			now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
			h := newHarness(t, mustParse(t, simpleConfig(map[string]string{"d1": b.URL}, c.cluster, "", "")), func(o *Options) {
				o.Now = func() time.Time { return now }
			})
			deadline, err := h.p.SetDraining("c", "d1", true)
			if err != nil {
				t.Fatal(err)
			}
			if got := deadline.Sub(now); got != c.want {
				t.Fatalf("drain deadline in %v, want %v", got, c.want)
			}
			if d := h.p.Cluster("c").Destination("d1"); d.AcceptsExisting(now) != (c.want > 0) {
				t.Fatalf("AcceptsExisting = %v at the start of a %v drain", d.AcceptsExisting(now), c.want)
			}
		})
	}
}

// TestLongResponseAfterUploadIsNotCut: the upload's idle deadline ends with
// the upload, so a response that streams for longer than ActivityTimeout
// (with data flowing) after a POST completes.
func TestLongResponseAfterUploadIsNotCut(t *testing.T) {
	b := newBackend(t, func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		for i := 0; i < 8; i++ {
			_, _ = io.WriteString(w, "tick\n")
			http.NewResponseController(w).Flush()
			time.Sleep(100 * time.Millisecond) // the backend streams slowly on purpose
		}
	})
	// 800 ms of response against a 500 ms ActivityTimeout; the gaps (100 ms)
	// stay well inside it on a loaded machine.
	h := newHarness(t, mustParse(t, simpleConfig(map[string]string{"d1": b.URL},
		`"HttpRequest": {"ActivityTimeout": "00:00:00.5"}`, "", "")), nil)
	resp, err := http.Post(h.front.URL+"/", "text/plain", strings.NewReader("payload"))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || strings.Count(string(body), "tick") != 8 {
		t.Fatalf("streamed response cut: %d ticks, err %v", strings.Count(string(body), "tick"), err)
	}
}

// TestPooledConnectionReusedNearItsIdleDeadline: a backend connection that
// sat idle for most of ActivityTimeout and is then reused gets a fresh idle
// window for the new request's answer.
func TestPooledConnectionReusedNearItsIdleDeadline(t *testing.T) {
	t.Run("net/http", func(t *testing.T) { pooledReuseNearIdleDeadline(t, false) })
	// The own loop's requests write a pooled connection's head with the
	// clock reading the pool took at the request's start (lean.NowWriter).
	t.Run("own loop", func(t *testing.T) { pooledReuseNearIdleDeadline(t, true) })
}

func pooledReuseNearIdleDeadline(t *testing.T, ownLoop bool) {
	var mu sync.Mutex
	remotes := map[string]bool{}
	b := newBackend(t, func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		remotes[r.RemoteAddr] = true
		mu.Unlock()
		if r.URL.Query().Get("slow") != "" {
			time.Sleep(600 * time.Millisecond) // answers within the idle window, not before the old deadline
		}
		_, _ = io.WriteString(w, "ok")
	})
	h := newHarness(t, mustParse(t, simpleConfig(map[string]string{"d1": b.URL},
		`"HttpRequest": {"ActivityTimeout": "00:00:01"}`, "", "")), nil)
	front := h.front.URL
	if ownLoop {
		front = "http://" + ownLoopFront(t, h.p)
	}
	if resp, _ := get(t, nil, front+"/", nil); resp.StatusCode != 200 {
		t.Fatal(resp.StatusCode)
	}
	time.Sleep(700 * time.Millisecond) // let the pooled connection idle for most of the window
	if resp, body := get(t, nil, front+"/?slow=1", nil); resp.StatusCode != 200 || body != "ok" {
		t.Fatalf("reused connection: %d %q", resp.StatusCode, body)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(remotes) != 1 {
		t.Fatalf("the pooled connection was not reused (%d connections)", len(remotes))
	}
}

// TestPathTransformsKeepEncodedSlashesEncoded: PathRemovePrefix on a path
// whose prefix the client spelled with escapes must not turn an encoded
// "..%2F" into a real "../" on the wire (a route escape at the backend).
func TestPathTransformsKeepEncodedSlashesEncoded(t *testing.T) {
	b := newBackend(t, nil)
	cfg := mustParse(t, `{"ReverseProxy": {
	  "Routes": {"pub": {"ClusterId": "c", "Match": {"Path": "/public/{**rest}"},
	    "Transforms": [{"PathRemovePrefix": "/public"}, {"PathPrefix": "/static"}]}},
	  "Clusters": {"c": {"Destinations": {"d1": {"Address": "`+b.URL+`"}}}}}}`)
	h := newHarness(t, cfg, nil)
	cases := []struct{ sent, want string }{
		{"/public/..%2Fadmin", "/static/..%2Fadmin"},
		{"/%70ublic/..%2Fadmin", "/static/..%2Fadmin"},
		{"/%70ublic/..%2F..%2Fetc/passwd", "/static/..%2F..%2Fetc/passwd"},
		{"/PUBLIC/a%20b", "/static/a%20b"},
	}
	for _, c := range cases {
		resp, err := testutil.RawRequest(t, strings.TrimPrefix(h.front.URL, "http://"), "GET "+c.sent+" HTTP/1.1\r\nHost: h\r\n\r\n")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if got := b.lastRequest().RequestURI; resp.StatusCode != 200 || got != c.want {
			t.Errorf("%s: status %d, backend got %q, want %q", c.sent, resp.StatusCode, got, c.want)
		}
	}
}

// TestFullDuplexStreamWithPausedUploadIsNotCut: response activity keeps the
// client's upload deadline alive, as YARP's ActivityTimeout counts activity
// in either direction.
func TestFullDuplexStreamWithPausedUploadIsNotCut(t *testing.T) {
	b := newBackend(t, func(w http.ResponseWriter, r *http.Request) {
		rc := http.NewResponseController(w)
		_ = rc.EnableFullDuplex()
		w.WriteHeader(200)
		go func() { _, _ = io.Copy(io.Discard, r.Body) }()
		for i := 0; i < 14; i++ {
			_, _ = io.WriteString(w, "tick\n")
			_ = rc.Flush()
			time.Sleep(100 * time.Millisecond) // the backend streams slowly on purpose
		}
	})
	h := newHarness(t, mustParse(t, simpleConfig(map[string]string{"d1": b.URL},
		`"HttpRequest": {"ActivityTimeout": "00:00:00.6"}`, "", "")), nil)
	pr, pw := io.Pipe()
	defer pw.Close()
	go func() {
		_, _ = io.WriteString(pw, "hello")
		time.Sleep(1000 * time.Millisecond) // the client pauses its upload longer than ActivityTimeout
		_, _ = io.WriteString(pw, "world")
		pw.Close()
	}()
	resp, err := http.Post(h.front.URL+"/", "text/plain", pr)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || strings.Count(string(body), "tick") != 14 {
		t.Fatalf("full-duplex stream cut: %d ticks, err %v", strings.Count(string(body), "tick"), err)
	}
}

// TestSilentBackendCutAfterOneActivityTimeout: a backend that takes the
// request and never answers is cut after ActivityTimeout (504), on a new
// connection and on a pooled one, through both HTTP/1.1 servers: the wait
// for the answer and the read that reports its end share one idle window.
func TestSilentBackendCutAfterOneActivityTimeout(t *testing.T) {
	const idle = 400 * time.Millisecond
	// "/?a;b" is a query ReverseProxy would re-encode: it goes through
	// ReverseProxy and net/http's Transport instead of the direct path.
	for _, path := range []string{"/", "/?a;b"} {
		for _, ownLoop := range []bool{false, true} {
			for _, pooled := range []bool{false, true} {
				t.Run(fmt.Sprintf("path=%s,ownLoop=%v,pooled=%v", path, ownLoop, pooled), func(t *testing.T) {
					var conns atomic.Int32
					be := testutil.NewRawServer(t, func(i int, conn net.Conn, br *bufio.Reader) {
						conns.Add(1)
						if pooled && i == 0 && !testutil.Answer(br, conn, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok") {
							return
						}
						_, _ = http.ReadRequest(br)
						_, _ = io.Copy(io.Discard, br) // silent until the proxy closes
					})
					h := newHarness(t, mustParse(t, simpleConfig(map[string]string{"d1": be.URL()},
						`"HttpRequest": {"ActivityTimeout": "00:00:00.4"}`, "", "")), nil)
					front := h.front.URL
					if ownLoop {
						front = "http://" + ownLoopFront(t, h.p)
					}
					if pooled {
						if resp, body := get(t, nil, front+"/", nil); resp.StatusCode != 200 || body != "ok" {
							t.Fatalf("first answer: %d %q", resp.StatusCode, body)
						}
					}
					start := time.Now()
					resp, _ := get(t, nil, front+path, nil)
					took := time.Since(start)
					if resp.StatusCode != http.StatusGatewayTimeout {
						t.Fatalf("silent backend: %d, want 504", resp.StatusCode)
					}
					// One window, not two: the guard re-arms at most every
					// eighth of it (so the cut may come that much early), the
					// upper bound leaves room for a loaded machine's timer slack,
					// and a second window would exceed it.
					if took < idle*7/8 || took >= idle*7/4 {
						t.Fatalf("silent backend cut after %v, want one ActivityTimeout (%v)", took, idle)
					}
					if pooled && conns.Load() != 1 {
						t.Fatalf("%d backend connections, want the pooled one alone", conns.Load())
					}
				})
			}
		}
	}
}
