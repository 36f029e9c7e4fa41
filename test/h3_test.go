package test

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/quic-go/quic-go/http3"

	"github.com/tether-proxy/tether/test/testutil"
)

// h3ClusterConfig is a node's file: one HTTPS listener serving HTTP/1.1,
// HTTP/2 and HTTP/3 on the given address with the certificate files, and
// the route "all" to cluster app, round robin over backends with the
// sealed Cookie affinity policy.
func h3ClusterConfig(addr, certFile, keyFile string, backends ...*testutil.Backend) string {
	var dests []string
	for _, b := range backends {
		dests = append(dests, fmt.Sprintf(`"%s": { "Address": "%s/" }`, b.Name, b.URL()))
	}
	return fmt.Sprintf(`{
  "Listeners": [ { "Address": %q, "Protocols": "Http1AndHttp2AndHttp3",
                   "Certificate": { "Path": %q, "KeyPath": %q } } ],
  "Limits": { "ShutdownTimeout": "00:00:20" },
  "ReverseProxy": {
    "Routes": { %s },
    "Clusters": {
      "app": {
        "LoadBalancingPolicy": "RoundRobin",
        "SessionAffinity": { "Enabled": "true", "Policy": "Cookie", "AffinityKeyName": ".Tether.Affinity" },
        "Destinations": { %s },
      },
    },
  },
}`, addr, certFile, keyFile, catchAll, strings.Join(dests, ",\n"))
}

// h3Client is quic-go's HTTP/3 client trusting pool, with session cache
// cache (nil: none).
func h3Client(t *testing.T, pool *x509.CertPool, cache tls.ClientSessionCache) *http.Client {
	tr := &http3.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: "127.0.0.1", ClientSessionCache: cache}}
	t.Cleanup(func() { _ = tr.Close() })
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}
}

// h3Do sends a GET of url with the cookie ("" for none) and returns the
// answer with its body read (reading it reads the tickets TLS 1.3 sends
// after the handshake).
func h3Do(t *testing.T, c *http.Client, url, cookie string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if cookie != "" {
		req.Header.Set("Cookie", cookie)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: reading the body: %v", url, err)
	}
	return resp, string(b)
}

// affinityCookie is the Cookie header value for the affinity cookie an
// answer sets ("" if none).
func affinityCookie(h http.Header) string {
	sc := h.Get("Set-Cookie")
	if !strings.HasPrefix(sc, ".Tether.Affinity=") {
		return ""
	}
	return strings.Split(sc, ";")[0]
}

// TestHTTP3OnAThreeNodeCluster: three `tether agent` processes over Raft,
// each with an HTTPS listener serving HTTP/1.1, HTTP/2 and HTTP/3, and
// quic-go's HTTP/3 client. TCP answers advertise the UDP port with
// Alt-Svc; an affinity cookie one node issues (over HTTP/3 or over TCP)
// sends HTTP/3 requests on the other nodes to the same destination; a TLS
// session a node issues over QUIC resumes on the other nodes; and a node
// whose UDP port is taken fails to start with an error naming the address.
func TestHTTP3OnAThreeNodeCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("a three-node cluster of processes")
	}
	b1, b2 := testutil.NewBackend(t, "b1"), testutil.NewBackend(t, "b2")
	certFile, keyFile, pool := testutil.CertFiles(t)
	e := newClusterEnv(t, h3ClusterConfig("127.0.0.1:0", certFile, keyFile, b1, b2))
	nodes := e.form(3)
	urls := make([]string, len(nodes))
	for i, a := range nodes {
		urls[i] = "https://" + strings.TrimPrefix(a.proxyURL, "http://") + "/"
	}

	t.Run("Alt-Svc", func(t *testing.T) {
		tcp := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, ForceAttemptHTTP2: true}, Timeout: 10 * time.Second}
		defer tcp.CloseIdleConnections()
		h3 := h3Client(t, pool, nil)
		for i, u := range urls {
			_, port, _ := net.SplitHostPort(strings.TrimSuffix(strings.TrimPrefix(u, "https://"), "/"))
			status, hdr, _ := testutil.Get(t, tcp, u, nil)
			want := `h3=":` + port + `"; ma=86400`
			if status != 200 || hdr.Get("Alt-Svc") != want {
				t.Errorf("%s over TCP: %d, Alt-Svc %q, want %q", nodes[i].id, status, hdr.Get("Alt-Svc"), want)
			}
			// The port advertised serves HTTP/3.
			resp, body := h3Do(t, h3, u, "")
			if resp.StatusCode != 200 || resp.Proto != "HTTP/3.0" || !strings.HasSuffix(body, " /") {
				t.Errorf("%s over QUIC: %d %s %q", nodes[i].id, resp.StatusCode, resp.Proto, body)
			}
		}
	})

	t.Run("affinity", func(t *testing.T) {
		h3 := h3Client(t, pool, nil)
		// Sessions started over HTTP/3 on node 1, one per destination
		// (round robin spreads them).
		sessions := map[string]string{} // destination: its cookie
		for range 4 {
			resp, _ := h3Do(t, h3, urls[0], "")
			if resp.StatusCode != 200 || resp.Proto != "HTTP/3.0" {
				t.Fatalf("n1: %d over %s", resp.StatusCode, resp.Proto)
			}
			if c := affinityCookie(resp.Header); c != "" {
				sessions[resp.Header.Get("X-Demo-Backend")] = c
			}
		}
		if len(sessions) != 2 {
			t.Fatalf("sessions started on n1: %v, want one on each of b1 and b2", sessions)
		}
		// A session started over TCP on node 1.
		tcp := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}, Timeout: 10 * time.Second}
		defer tcp.CloseIdleConnections()
		status, hdr, _ := testutil.Get(t, tcp, urls[0], nil)
		tcpCookie := affinityCookie(hdr)
		if status != 200 || tcpCookie == "" {
			t.Fatalf("n1 over TCP: %d, Set-Cookie %q", status, hdr.Get("Set-Cookie"))
		}
		tcpDest := hdr.Get("X-Demo-Backend")

		check := func(how, dest, cookie string) {
			for _, i := range []int{1, 2} {
				// Enough requests that round robin would have moved one.
				for range 3 {
					resp, body := h3Do(t, h3, urls[i], cookie)
					if resp.Proto != "HTTP/3.0" || resp.Header.Get("X-Demo-Backend") != dest || resp.Header.Get("Set-Cookie") != "" {
						t.Fatalf("%s over HTTP/3 (%s) with the cookie of a session %s on %s: reached %q (%q), Set-Cookie %q",
							nodes[i].id, resp.Proto, how, dest, resp.Header.Get("X-Demo-Backend"), body, resp.Header.Get("Set-Cookie"))
					}
				}
			}
		}
		for dest, cookie := range sessions {
			check("started over HTTP/3 on n1", dest, cookie)
		}
		check("started over TCP on n1", tcpDest, tcpCookie)
	})

	t.Run("resumption", func(t *testing.T) {
		// node 1's ticket, taken over QUIC. The nodes take the ticket keys
		// from the replicated keyring: a node that has not got them yet
		// issues no ticket.
		held := &testutil.HeldSession{}
		testutil.Eventually(t, 30*time.Second, "a session ticket from n1 over QUIC", func() bool {
			c := h3Client(t, pool, held)
			h3Do(t, c, urls[0], "")
			return held.Held()
		})
		for _, i := range []int{1, 2} {
			// A new client each time, offering only node 1's session.
			resp, _ := h3Do(t, h3Client(t, pool, held), urls[i], "")
			if resp.Proto != "HTTP/3.0" || resp.TLS == nil || !resp.TLS.DidResume {
				t.Errorf("%s over %s: node 1's session did not resume (TLS %v)", nodes[i].id, resp.Proto, resp.TLS != nil)
			}
		}
	})

	t.Run("UDP port taken", func(t *testing.T) {
		// A UDP port held by this test whose TCP port is free.
		pc := testutil.TakenUDPPort(t)
		addr := pc.LocalAddr().String()
		cfg := writeConfig(t, "n4.json", h3ClusterConfig(addr, certFile, keyFile, b1, b2))
		p := start(t, nil, "agent", "--config", cfg, "--node-id", "n4", "--data-dir", t.TempDir(),
			"--admin-addr", "127.0.0.1:0", "--raft-addr", e.RaftAddr("n4"), "--gossip-addr", e.GossipAddr("n4"),
			"--cluster-secret-file", e.Secret, "--no-access-log", "--join", nodes[0].gossip)
		if code := p.Wait(60 * time.Second); code == 0 {
			t.Fatalf("n4 with its UDP port %s taken exited 0", addr)
		}
		if p.LogLine("node started") != nil {
			t.Errorf("n4 logged \"node started\" with its UDP port taken")
		}
		if out := p.Stderr.String(); !strings.Contains(out, addr) || !strings.Contains(out, "UDP") {
			t.Fatalf("n4's error does not name %s (UDP):\n%s", addr, out)
		}
	})
}
