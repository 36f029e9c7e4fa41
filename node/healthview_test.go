package node

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	demobackend "github.com/tether-proxy/tether/node/demo/backend"
	"github.com/tether-proxy/tether/proxy/upstream"
	"github.com/tether-proxy/tether/test/testutil"
)

// TestHealthWithoutMajorityGoesByLocalVerdictAndViewsConverge: two nodes
// probe d1 (ProbeFanout 2) through health addresses that answer
// differently, so their verdicts split and no majority exists. Each node
// then goes by its own verdict (cluster/healthgossip/DESIGN.md): the node whose probe
// fails gives d1 no traffic, the other keeps it. Once the second probe
// fails too the views agree, and within a second both nodes send a
// session pinned to d1 to the same replacement.
func TestHealthWithoutMajorityGoesByLocalVerdictAndViewsConverge(t *testing.T) {
	var sickA, sickB atomic.Bool
	healthSrv := func(sick *atomic.Bool) *httptest.Server {
		s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if sick.Load() {
				w.WriteHeader(http.StatusServiceUnavailable)
			}
		}))
		t.Cleanup(s.Close)
		return s
	}
	hA, hB := healthSrv(&sickA), healthSrv(&sickB)
	var dests []string
	for i := 1; i <= 4; i++ {
		b := httptest.NewServer(demobackend.Handler(fmt.Sprintf("b%d", i)))
		t.Cleanup(b.Close)
		dests = append(dests, fmt.Sprintf(`"d%d": { "Address": "%s/", "Health": "%%s" }`, i, b.URL))
	}
	tc := newTestCluster(t, 1)
	// Each node's config differs only in d1's health address.
	cfgFor := func(d1Health string) string {
		ds := make([]string, len(dests))
		for i, d := range dests {
			h := strings.TrimSuffix(strings.SplitN(strings.SplitN(d, `"Address": "`, 2)[1], `"`, 2)[0], "/")
			if i == 0 {
				h = d1Health
			}
			ds[i] = fmt.Sprintf(d, h+"/")
		}
		return fmt.Sprintf(`{
	  "Listeners": [ { "Address": "127.0.0.1:0" } ],
	  "ReverseProxy": {
	    "Routes": { "all": { "ClusterId": "app", "Match": { "Path": "{**catch-all}" } } },
	    "Clusters": { "app": {
	      "LoadBalancingPolicy": "RoundRobin",
	      "SessionAffinity": { "Enabled": true, "Policy": "Cookie", "AffinityKeyName": "aff" },
	      "HealthCheck": { "Active": { "Enabled": true, "Interval": "00:00:00.100", "Timeout": "00:00:00.500", "Path": "/healthz",
	                                   "ConsecutiveFailures": 1, "ProbeFanout": 2 } },
	      "Destinations": { %s } } }
	  }
	}`, strings.Join(ds, ", "))
	}
	var nodes []*Node
	var join []string
	for i, h := range []string{hA.URL, hB.URL} {
		id := fmt.Sprintf("n%d", i+1)
		path := filepath.Join(tc.dir, id+".json")
		if err := os.WriteFile(path, []byte(cfgFor(h)), 0o600); err != nil {
			t.Fatal(err)
		}
		cfg := tc.config(id, 2, append([]string(nil), join...))
		cfg.ConfigPath = path
		n := tc.start(cfg)
		join = append(join, n.GossipAddr())
		nodes = append(nodes, n)
	}
	tc.waitSettled()
	n1, n2 := nodes[0], nodes[1]
	d1 := func(n *Node) *upstream.Destination { return n.proxy.Cluster("app").Destination("d1") }
	testutil.Eventually(t, 15*time.Second, "both nodes probe d1 and see it healthy", func() bool {
		return len(n1.health.gossip.Probers("app", "d1", 2)) == 2 && len(n2.health.gossip.Probers("app", "d1", 2)) == 2 &&
			d1(n1).ActiveHealth() == upstream.Healthy && d1(n2).ActiveHealth() == upstream.Healthy
	})
	// Sessions pinned to d1, issued by n2.
	var sessions []string
	for i := 0; len(sessions) < 4 && i < 200; i++ {
		if st, backend, cookie := proxyGet(t, n2, ""); st == 200 && backend == "b1" && cookie != "" {
			sessions = append(sessions, cookie)
		}
	}
	if len(sessions) < 4 {
		t.Fatalf("only %d sessions landed on d1", len(sessions))
	}

	// n1's probe of d1 fails, n2's passes: one of two probers, no majority.
	sickA.Store(true)
	testutil.Eventually(t, 10*time.Second, "the verdicts split", func() bool {
		return d1(n1).LocalHealth() == upstream.Unhealthy && d1(n2).LocalHealth() == upstream.Healthy &&
			len(n2.health.gossip.Verdicts("app", "d1")) == 2 && len(n1.health.gossip.Verdicts("app", "d1")) == 2
	})
	testutil.Eventually(t, 5*time.Second, "each node goes by its own verdict", func() bool {
		return d1(n1).ActiveHealth() == upstream.Unhealthy && d1(n2).ActiveHealth() == upstream.Healthy
	})
	for _, c := range sessions {
		if _, backend, _ := proxyGet(t, n1, c); backend == "b1" {
			t.Fatalf("n1, whose own probe fails, sent a d1 session to d1 without a majority")
		}
		if _, backend, _ := proxyGet(t, n2, c); backend != "b1" {
			t.Fatalf("n2, whose own probe passes, moved a d1 session to %s", backend)
		}
	}

	// n2's probe fails too: the views agree, and so do the replacements.
	sickB.Store(true)
	testutil.Eventually(t, 10*time.Second, "both views say d1 is unhealthy", func() bool {
		return d1(n1).ActiveHealth() == upstream.Unhealthy && d1(n2).ActiveHealth() == upstream.Unhealthy
	})
	agreed := time.Now()
	testutil.Eventually(t, time.Second, "both nodes pick the same replacement for every d1 session", func() bool {
		for _, c := range sessions {
			_, r1, _ := proxyGet(t, n1, c)
			_, r2, _ := proxyGet(t, n2, c)
			if r1 == "b1" || r1 != r2 {
				return false
			}
		}
		return true
	})
	t.Logf("same replacement on both nodes %s after their views agreed", time.Since(agreed).Round(time.Millisecond))
}
