package proxy

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// routeTimeout is short: the cases wait for it to fire.
const routeTimeout = 150 * time.Millisecond

func TestRouteTimeoutRules(t *testing.T) {
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	b := newBackend(t, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/slow-headers":
		case "/slow-body":
			_, _ = io.WriteString(w, "start")
			http.NewResponseController(w).Flush()
		default:
			_, _ = io.WriteString(w, "ok")
			return
		}
		select {
		case <-r.Context().Done():
		case <-release:
		}
	})
	route := fmt.Sprintf(`"Timeout": "%s"`, routeTimeout)
	h := newHarness(t, mustParse(t, simpleConfig(map[string]string{"d1": b.URL}, "", route, "")), nil)
	c := &http.Client{Transport: h.front.Client().Transport, Timeout: 10 * time.Second}

	t.Run("a backend that answers within the timeout is served", func(t *testing.T) {
		resp, body := get(t, c, h.front.URL+"/fast", nil)
		if resp.StatusCode != 200 || body != "ok" {
			t.Fatalf("%d %q", resp.StatusCode, body)
		}
	})
	t.Run("no response headers within the timeout: 504", func(t *testing.T) {
		resp, body := get(t, c, h.front.URL+"/slow-headers", nil)
		if resp.StatusCode != http.StatusGatewayTimeout || body != "gateway timeout\n" {
			t.Fatalf("%d %q, want 504", resp.StatusCode, body)
		}
	})
	t.Run("the timeout bounds the body too: the response is cut", func(t *testing.T) {
		resp, err := c.Get(h.front.URL + "/slow-body")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("status %d", resp.StatusCode)
		}
		body, err := io.ReadAll(resp.Body)
		if err == nil {
			t.Fatalf("body %q ended cleanly; want the response cut at the timeout", body)
		}
	})
}

func TestRouteTimeoutStopsAtUpgrade(t *testing.T) {
	b := newBackend(t, func(w http.ResponseWriter, r *http.Request) {
		echoUpgrade(w)
	})
	route := fmt.Sprintf(`"Timeout": "%s"`, routeTimeout)
	h := newHarness(t, mustParse(t, simpleConfig(map[string]string{"d1": b.URL}, "", route, "")), nil)
	conn, err := net.Dial("tcp", h.front.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprintf(conn, "GET /ws HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != 101 {
		t.Fatalf("upgrade: %v %v", resp, err)
	}
	// Nothing to poll for: the point is that the route's timeout passes
	// without cutting the upgraded connection.
	time.Sleep(3 * routeTimeout)
	fmt.Fprintf(conn, "hello\n")
	if line, err := br.ReadString('\n'); err != nil || line != "echo:hello\n" {
		t.Fatalf("after the route timeout the upgraded connection read %q, %v", line, err)
	}
}

// BenchmarkServeHTTPRouteTimeout is BenchmarkServeHTTP with a route
// Timeout: the cost of the stoppable timer per request.
func BenchmarkServeHTTPRouteTimeout(b *testing.B) {
	cfg := strings.Replace(benchConfig, `"ClusterId": "c",`, `"ClusterId": "c", "Timeout": "00:00:30",`, 1)
	h := newHarness(b, mustParse(b, cfg), func(o *Options) { o.AccessLog = nil })
	h.p.rt.Load().clusters["c"].rp.Transport = fakeTransport{}
	req := httptest.NewRequest("GET", "http://front.example/api/users/42?x=1", nil)
	req.RemoteAddr = "192.0.2.1:5555"
	serveLoop(b, h, req)
}
