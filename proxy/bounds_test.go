package proxy

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tether-proxy/tether/proxy/health"
	"github.com/tether-proxy/tether/test/testutil"
)

// TestConnectionSlotWaitIsBounded: with MaxConnectionsPerServer taken, a
// request gives up with 503 after the cluster's HttpRequest.Timeout instead
// of waiting as long as its client does.
func TestConnectionSlotWaitIsBounded(t *testing.T) {
	release := make(chan struct{})
	b := newBackend(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/busy" {
			return
		}
		// Keep the only connection busy, with activity, until released.
		w.WriteHeader(200)
		for {
			select {
			case <-release:
				return
			case <-time.After(20 * time.Millisecond):
				_, _ = io.WriteString(w, ".")
				w.(http.Flusher).Flush()
			}
		}
	})
	defer close(release)
	h := newHarness(t, mustParse(t, simpleConfig(map[string]string{"d1": b.URL},
		`"HttpClient": {"MaxConnectionsPerServer": 1}, "HttpRequest": {"Timeout": "00:00:01"}`, "", "")), nil)
	busy, err := http.Get(h.front.URL + "/busy")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Body.Close()
	if _, err := busy.Body.Read(make([]byte, 1)); err != nil {
		t.Fatal(err)
	}
	// Without the bound this request would wait for the busy one; the
	// client's own timeout keeps the test from hanging then.
	resp, body := get(t, &http.Client{Timeout: 5 * time.Second}, h.front.URL+"/other", nil)
	if resp.StatusCode != http.StatusServiceUnavailable || body != "no backend connection available\n" {
		t.Fatalf("status %d body %q, want 503 once the slot wait ran out", resp.StatusCode, body)
	}
	if d := h.p.Cluster("c").Destination("d1"); d.PassiveFailed(time.Now()) {
		t.Fatal("tether's own connection limit counted against the destination")
	}
}

// TestSlotBoundEndsWithTheConnection: a request that got its connection is
// not cut by the slot bound, however long the backend takes within its
// activity timeout.
func TestSlotBoundEndsWithTheConnection(t *testing.T) {
	b := newBackend(t, func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(200)
		for i := 0; i < 12; i++ {
			_, _ = io.WriteString(w, ".")
			w.(http.Flusher).Flush()
			time.Sleep(150 * time.Millisecond) // a slow stream: longer than the bound in total
		}
	})
	// The bound is long enough that getting to the dial never exceeds it,
	// even with -race on a loaded machine (0.3 s once did).
	h := newHarness(t, mustParse(t, simpleConfig(map[string]string{"d1": b.URL},
		`"HttpClient": {"MaxConnectionsPerServer": 1}, "HttpRequest": {"Timeout": "00:00:01"}`, "", "")), nil)
	resp, body := get(t, nil, h.front.URL+"/", nil)
	if resp.StatusCode != 200 || body != strings.Repeat(".", 12) {
		t.Fatalf("status %d body %q", resp.StatusCode, body)
	}
}

// TestBackendResponseHeadersAreBounded: a backend whose response headers
// exceed 64 KiB gets a 502, not unbounded memory.
func TestBackendResponseHeadersAreBounded(t *testing.T) {
	b := newBackend(t, func(w http.ResponseWriter, r *http.Request) {
		n := 60 << 10
		if r.URL.Path == "/huge" {
			n = 70 << 10
		}
		w.Header().Set("X-Big", strings.Repeat("a", n))
	})
	h := newHarness(t, mustParse(t, simpleConfig(map[string]string{"d1": b.URL}, "", "", "")), nil)
	if resp, _ := get(t, nil, h.front.URL+"/within", nil); resp.StatusCode != 200 {
		t.Fatalf("60 KiB of headers: status %d, want 200", resp.StatusCode)
	}
	if resp, _ := get(t, nil, h.front.URL+"/huge", nil); resp.StatusCode != http.StatusBadGateway {
		t.Fatalf("70 KiB of headers: status %d, want 502", resp.StatusCode)
	}
}

// TestBackendDyingMidBodyCountsAgainstIt: a backend that cuts its body
// short is a passive-health failure; a client that leaves in the middle
// of a body is not.
func TestBackendDyingMidBodyCountsAgainstIt(t *testing.T) {
	cases := []struct {
		desc         string
		backendDies  bool
		wantExcluded bool
	}{
		{desc: "backend cuts its body short: excluded", backendDies: true, wantExcluded: true},
		{desc: "client leaves mid-body: not excluded", backendDies: false, wantExcluded: false},
	}
	for _, c := range cases {
		t.Run(c.desc, func(t *testing.T) {
			b := newBackend(t, func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Length", "1000")
				w.WriteHeader(200)
				_, _ = io.WriteString(w, strings.Repeat("x", 100))
				w.(http.Flusher).Flush()
				if c.backendDies {
					conn, _, err := http.NewResponseController(w).Hijack()
					if err == nil {
						conn.Close()
					}
					return
				}
				// Stream the rest slowly; the client leaves before the end.
				for i := 0; i < 9; i++ {
					select {
					case <-r.Context().Done():
						return
					case <-time.After(50 * time.Millisecond):
					}
					_, _ = io.WriteString(w, strings.Repeat("x", 100))
					w.(http.Flusher).Flush()
				}
			})
			h := newHarness(t, mustParse(t, simpleConfig(map[string]string{"d1": b.URL}, passiveOn, "", "")), nil)
			addr := h.front.Listener.Addr().String()
			n := 2 * health.DefaultMinRequests
			var wg sync.WaitGroup
			errs := make(chan error, n)
			for i := 0; i < n; i++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					errs <- oneMidBodyRequest(addr, c.backendDies)
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				if err != nil {
					t.Fatal(err)
				}
			}
			// Every request has ended at the proxy once its access log line is out.
			testutil.Eventually(t, 5*time.Second, "condition", func() bool { return len(h.accessLines(t)) == n })
			if got := h.p.Cluster("c").Destination("d1").PassiveFailed(time.Now()); got != c.wantExcluded {
				t.Fatalf("excluded = %v, want %v", got, c.wantExcluded)
			}
		})
	}
}

// oneMidBodyRequest reads the first 100 bytes of a response, and the rest
// only when the backend is the one to cut it.
func oneMidBodyRequest(addr string, backendDies bool) error {
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		return err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprint(conn, "GET / HTTP/1.1\r\nHost: h\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	switch {
	case err != nil && backendDies:
		// tether had not flushed the headers yet: the connection is cut
		// without a response.
		return nil
	case err != nil:
		return err
	}
	_, _ = io.ReadFull(resp.Body, make([]byte, 100))
	if backendDies {
		_, _ = io.Copy(io.Discard, resp.Body)
	}
	return nil
}
