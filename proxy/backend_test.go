package proxy

import (
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/tether-proxy/tether/proxy/dnscache"
	"github.com/tether-proxy/tether/test/testutil"
)

// TestBackendTLSRequiresTrustUnlessDangerousAcceptAnyServerCertificate: an
// https destination's certificate is verified; a self-signed one is a 502
// unless HttpClient.DangerousAcceptAnyServerCertificate is set.
func TestBackendTLSRequiresTrustUnlessDangerousAcceptAnyServerCertificate(t *testing.T) {
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "tls ok")
	}))
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // expected handshake failures
	srv.StartTLS()
	t.Cleanup(srv.Close)

	cases := []struct {
		desc    string
		cluster string
		want    int
		body    string
	}{
		{desc: "self-signed backend certificate without trust is 502", want: 502, body: "bad gateway\n"},
		{desc: "DangerousAcceptAnyServerCertificate false is 502",
			cluster: `"HttpClient": {"DangerousAcceptAnyServerCertificate": false}`, want: 502, body: "bad gateway\n"},
		{desc: "DangerousAcceptAnyServerCertificate true accepts any certificate",
			cluster: `"HttpClient": {"DangerousAcceptAnyServerCertificate": true}`, want: 200, body: "tls ok"},
	}
	for _, c := range cases {
		t.Run(c.desc, func(t *testing.T) {
			h := newHarness(t, mustParse(t, simpleConfig(map[string]string{"d1": srv.URL}, c.cluster, "", "")), nil)
			resp, body := get(t, nil, h.front.URL+"/x", nil)
			if resp.StatusCode != c.want || body != c.body {
				t.Fatalf("got %d %q, want %d %q", resp.StatusCode, body, c.want, c.body)
			}
		})
	}
}

// TestMaxConnectionsPerServerCapsConcurrentBackendConnections: with
// HttpClient.MaxConnectionsPerServer 2, six concurrent slow requests reach
// the backend over at most two connections; the rest wait for one and all
// complete.
func TestMaxConnectionsPerServerCapsConcurrentBackendConnections(t *testing.T) {
	const (
		limit    = 2
		requests = 6
	)
	release := make(chan struct{})
	var (
		mu          sync.Mutex
		inFlight    int
		maxInFlight int
		remotes     = map[string]bool{}
	)
	b := newBackend(t, func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		inFlight++
		maxInFlight = max(maxInFlight, inFlight)
		remotes[r.RemoteAddr] = true
		mu.Unlock()
		select {
		case <-release:
		case <-r.Context().Done():
		case <-time.After(10 * time.Second): // bound if the test fails early
		}
		mu.Lock()
		inFlight--
		mu.Unlock()
		_, _ = io.WriteString(w, "ok")
	})
	h := newHarness(t, mustParse(t, simpleConfig(map[string]string{"d1": b.URL},
		fmt.Sprintf(`"HttpClient": {"MaxConnectionsPerServer": %d}`, limit), "", "")), nil)
	released := false
	defer func() {
		if !released {
			close(release)
		}
	}()

	client := &http.Client{Transport: &http.Transport{MaxConnsPerHost: requests}, Timeout: 15 * time.Second}
	defer client.CloseIdleConnections()
	type result struct {
		status int
		err    error
	}
	results := make(chan result, requests)
	for i := 0; i < requests; i++ {
		go func() {
			resp, err := client.Get(h.front.URL + "/slow")
			if err != nil {
				results <- result{err: err}
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			results <- result{status: resp.StatusCode}
		}()
	}

	// Every request is inside the proxy and has picked the destination.
	d := h.p.Cluster("c").Destination("d1")
	testutil.Eventually(t, 5*time.Second, "condition", func() bool { return d.Inflight() == requests })
	testutil.Eventually(t, 5*time.Second, "condition", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return inFlight >= limit
	})
	// Without the cap the other four would reach the backend within
	// milliseconds; watch a short, bounded window that they do not.
	window := time.After(300 * time.Millisecond)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
watch:
	for {
		select {
		case <-window:
			break watch
		case <-tick.C:
			mu.Lock()
			m := maxInFlight
			mu.Unlock()
			if m > limit {
				t.Fatalf("backend saw %d concurrent requests, want at most %d", m, limit)
			}
		}
	}

	released = true
	close(release)
	for i := 0; i < requests; i++ {
		select {
		case r := <-results:
			if r.err != nil {
				t.Fatalf("request: %v", r.err)
			}
			if r.status != http.StatusOK {
				t.Fatalf("status %d, want 200", r.status)
			}
		case <-time.After(15 * time.Second):
			t.Fatalf("only %d of %d requests completed", i, requests)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if maxInFlight > limit {
		t.Errorf("backend saw %d concurrent requests, want at most %d", maxInFlight, limit)
	}
	if len(remotes) > limit {
		t.Errorf("backend saw %d distinct connections, want at most %d", len(remotes), limit)
	}
}

// TestDestinationByDNSNameResolvedThroughCache: a destination named by host
// name is dialled through the dnscache resolver given as Options.Dial (here
// answered by its hosts file), the backend sees the destination's host as
// Host, and a changed hosts file moves new connections to the new address.
func TestDestinationByDNSNameResolvedThroughCache(t *testing.T) {
	const name = "backend.tether.test"
	hosts := filepath.Join(t.TempDir(), "hosts")
	writeHosts := func(ip string, mtime time.Time) {
		t.Helper()
		if err := os.WriteFile(hosts, []byte(ip+" "+name+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		// The resolver notices changes by mtime and size; the size is the
		// same, so make the mtime differ for certain.
		if err := os.Chtimes(hosts, mtime, mtime); err != nil {
			t.Fatal(err)
		}
	}
	writeHosts("127.0.0.1", time.Now().Add(-time.Hour))

	// Backend one closes every connection so that each request dials anew.
	b1 := newBackend(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Connection", "close")
		_, _ = io.WriteString(w, "one")
	})
	_, port, err := net.SplitHostPort(b1.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	res := dnscache.New(dnscache.Options{
		HostsFile:          hosts,
		HostsCheckInterval: 20 * time.Millisecond,
		Servers:            []string{"127.0.0.1:1"}, // nothing answers: only the hosts file may
		Timeout:            200 * time.Millisecond,
	})
	addr := "http://" + net.JoinHostPort(name, port) + "/"
	h := newHarness(t, mustParse(t, simpleConfig(map[string]string{"d1": addr}, "", "", "")),
		func(o *Options) { o.Dial = res.DialContext })

	resp, body := get(t, nil, h.front.URL+"/x", nil)
	if resp.StatusCode != http.StatusOK || body != "one" {
		t.Fatalf("got %d %q, want 200 \"one\"", resp.StatusCode, body)
	}
	if got, want := b1.lastRequest().Host, name+":"+port; got != want {
		t.Errorf("backend saw Host %q, want %q", got, want)
	}

	ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.2", port))
	if err != nil {
		t.Skipf("second half needs 127.0.0.2:%s: %v", port, err)
	}
	b2 := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "two")
	}))
	b2.Listener.Close()
	b2.Listener = ln
	b2.Start()
	t.Cleanup(b2.Close)

	writeHosts("127.0.0.2", time.Now())
	testutil.Eventually(t, 5*time.Second, "condition", func() bool {
		resp, body := get(t, nil, h.front.URL+"/x", nil)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("status %d while the address changed, want 200", resp.StatusCode)
		}
		return body == "two"
	})
}
