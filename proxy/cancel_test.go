package proxy

import (
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/tether-proxy/tether/proxy/config"
	"github.com/tether-proxy/tether/test/testutil"
)

// TestOwnLoopClientGoneEndsTheBackendRequest: behind the own HTTP/1.1
// loop, a client that goes away while the backend is slow gets the
// backend's request cancelled (its connection closed) and a 499 logged.
func TestOwnLoopClientGoneEndsTheBackendRequest(t *testing.T) {
	started, gone := make(chan struct{}), make(chan struct{})
	b := newBackend(t, func(w http.ResponseWriter, r *http.Request) {
		close(started)
		select {
		case <-r.Context().Done():
			close(gone)
		case <-time.After(10 * time.Second):
		}
	})
	h := newHarness(t, mustParse(t, simpleConfig(map[string]string{"d1": b.URL}, "", "", "")), nil)
	s := startServer(t, &config.Config{Listeners: []config.Listener{{Address: "127.0.0.1:0"}}}, h.p)
	c, err := net.Dial("tcp", s.Addrs()[0].String())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: front\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	<-started
	c.Close()
	select {
	case <-gone:
	case <-time.After(5 * time.Second):
		t.Fatal("the backend's request went on after the client left")
	}
	testutil.Eventually(t, 5*time.Second, "condition", func() bool { return len(h.accessLines(t)) == 1 })
	if got := h.accessLines(t)[0]["status"]; got != float64(499) {
		t.Errorf("access log status %v, want 499", got)
	}
}
