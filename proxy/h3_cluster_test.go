package proxy

import (
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tether-proxy/tether/proxy/frontdoor"
)

// TestHTTP3AffinityAcrossNodes: a session started over HTTP/3 on one node
// (the sealed Cookie policy, the keyring shared as the cluster replicates
// it) stays on its destination over HTTP/3 on another node, and over TCP
// on a third (a listener serving both), whose TCP answers advertise
// HTTP/3 with Alt-Svc through the whole data path.
func TestHTTP3AffinityAcrossNodes(t *testing.T) {
	ids := []string{"alpha", "bravo", "charlie"}
	addrs, _ := affBackends(t, ids...)
	js := affConfig("c", addrs, `"LoadBalancingPolicy": "RoundRobin", `+affBlock("Cookie", ".Tether.Affinity", ""), "", "")
	shared := affKey(t, time.Now().Add(-time.Hour), 0)
	h3 := serverMode{name: "h3", http1: frontdoor.HTTP1Own, tls: true, h3: true}
	node := func(m serverMode) *modeEnv {
		ring := affRing(t, nil, shared)
		return startMode(t, m, js, func(o *Options) { o.Keyring = ring })
	}
	n1, n2 := node(h3), node(h3)
	n3 := node(serverMode{name: "tls-h2-and-h3", http1: frontdoor.HTTP1Own, tls: true, h2: true, altH3: true})

	sessions := map[string]string{} // destination: its cookie
	for range 2 * len(ids) {
		resp, body := n1.mustDo(http.MethodGet, "/", nil, nil)
		if resp.Proto != "HTTP/3.0" {
			t.Fatalf("node 1 answered over %s", resp.Proto)
		}
		if sc := resp.Header.Get("Set-Cookie"); strings.HasPrefix(sc, ".Tether.Affinity=") {
			sessions[body] = strings.Split(sc, ";")[0]
		}
	}
	if len(sessions) != len(ids) {
		t.Fatalf("sessions %v, want one per destination", sessions)
	}
	for dest, cookie := range sessions {
		for _, n := range []*modeEnv{n1, n2, n3} {
			resp, body := n.mustDo(http.MethodGet, "/", nil, http.Header{"Cookie": {cookie}})
			if body != dest || resp.Header.Get("Set-Cookie") != "" {
				t.Fatalf("%s (%s): the session of %s went to %q, Set-Cookie %q", n.addr, resp.Proto, dest, body, resp.Header.Get("Set-Cookie"))
			}
		}
	}
	resp, _ := n3.mustDo(http.MethodGet, "/", nil, nil)
	_, port, _ := net.SplitHostPort(n3.addr)
	if want := `h3=":` + port + `"; ma=86400`; resp.Header.Get("Alt-Svc") != want || resp.Proto != "HTTP/2.0" {
		t.Errorf("node 3 over %s: Alt-Svc %q, want %q", resp.Proto, resp.Header.Get("Alt-Svc"), want)
	}
}
