package proxy

import (
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tether-proxy/tether/proxy/upstream"
	"github.com/tether-proxy/tether/test/testutil"
)

// TestProbesDoNotWaitForTheDataPathsConnectionSlots: a cluster whose
// MaxConnectionsPerServer is taken by a long request keeps probing its live
// destination over the checker's own transport, and the destination stays
// healthy (a probe queued behind the data path's slot would time out and,
// with ConsecutiveFailures 1, mark it unhealthy at once).
func TestProbesDoNotWaitForTheDataPathsConnectionSlots(t *testing.T) {
	release := make(chan struct{})
	var releaseOnce sync.Once
	unblock := func() { releaseOnce.Do(func() { close(release) }) }
	var probes atomic.Int64
	inLong := make(chan struct{}, 1)
	b := newBackend(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" {
			probes.Add(1)
			return
		}
		inLong <- struct{}{}
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		<-release
	})
	h := newHarness(t, mustParse(t, simpleConfig(map[string]string{"d1": b.URL},
		`"HttpClient": {"MaxConnectionsPerServer": 1},
		 "HealthCheck": {"Active": {"Enabled": true, "Interval": "00:00:00.02", "Timeout": "00:00:00.1", "Path": "/healthz", "ConsecutiveFailures": 1}}`, "", "")), nil)
	t.Cleanup(unblock) // runs before the servers close, which wait for it
	d := h.p.Cluster("c").Destination("d1")
	testutil.Eventually(t, 5*time.Second, "condition", func() bool { return d.LocalHealth() == upstream.Healthy })

	done := make(chan error, 1)
	go func() {
		resp, err := http.Get(h.front.URL + "/long")
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		done <- err
	}()
	select {
	case <-inLong:
	case <-time.After(5 * time.Second):
		t.Fatal("the long request never reached the backend")
	}
	// The only data-path slot is now taken. Several probe rounds (each of
	// which would time out behind the slot) must reach the backend.
	start := probes.Load()
	testutil.Eventually(t, 5*time.Second, "condition", func() bool {
		return probes.Load() >= start+5 || d.LocalHealth() != upstream.Healthy
	})
	if got := d.LocalHealth(); got != upstream.Healthy {
		t.Fatalf("live destination is %v while the data path's slots are full, want healthy", got)
	}
	unblock()
	if err := <-done; err != nil {
		t.Fatalf("long request: %v", err)
	}
}
