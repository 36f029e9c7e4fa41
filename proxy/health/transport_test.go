package health

import (
	"net/http"
	"testing"

	"github.com/tether-proxy/tether/proxy/config"
	"github.com/tether-proxy/tether/proxy/upstream"
)

// TestActiveNeverProbesOverTheGivenTransport: an *http.Transport handed
// to NewActive (the cluster's data path) is copied, never used: its
// connection limit does not apply to probes, and the original is untouched.
func TestActiveNeverProbesOverTheGivenTransport(t *testing.T) {
	base := &http.Transport{MaxConnsPerHost: 1, MaxIdleConnsPerHost: 256}
	c := upstream.NewCluster("c", nil)
	a := NewActive("c", c, config.ActiveHealthCheck{Enabled: true}, ActiveOptions{Transport: base})
	got, ok := a.client.Transport.(*http.Transport)
	if !ok || got == base {
		t.Fatalf("probes go over %T %p, want a copy of the data path's %p", a.client.Transport, a.client.Transport, base)
	}
	if got.MaxConnsPerHost != 0 || got.MaxIdleConnsPerHost != probeIdleConnsPerHost {
		t.Errorf("probe transport limits %d/%d, want 0/%d", got.MaxConnsPerHost, got.MaxIdleConnsPerHost, probeIdleConnsPerHost)
	}
	if base.MaxConnsPerHost != 1 || base.MaxIdleConnsPerHost != 256 {
		t.Errorf("data path transport changed: %d/%d", base.MaxConnsPerHost, base.MaxIdleConnsPerHost)
	}
	a.Stop()
}
