package test

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tether-proxy/tether/test/testutil"
)

func healthConfig(fanout int, backends ...*testutil.Backend) string {
	var dests []string
	for _, b := range backends {
		dests = append(dests, fmt.Sprintf(`"%s": { "Address": "%s/" }`, b.Name, b.URL()))
	}
	return fmt.Sprintf(`{
  "Listeners": [ { "Address": "127.0.0.1:0" } ],
  "ReverseProxy": {
    "Routes": { %s },
    "Clusters": { "app": {
      "LoadBalancingPolicy": "RoundRobin",
      "SessionAffinity": { "Enabled": true, "Policy": "Cookie", "AffinityKeyName": ".Tether.Affinity" },
      "HealthCheck": { "Active": { "Enabled": true, "Interval": "00:00:00.200", "Timeout": "00:00:00.500",
                                   "Path": "/healthz", "ConsecutiveFailures": 1, "ProbeFanout": %d } },
      "Destinations": { %s } } }
  }
}`, catchAll, fanout, strings.Join(dests, ", "))
}

// destView is one row of GET /v1/clusters/app/destinations as a node sees it.
func destRow(t *testing.T, a *clusterAgent, id string) map[string]any {
	_, m := adminJSON(t, "GET", a.adminURL+"/v1/clusters/app/destinations")
	rows, _ := m["destinations"].([]any)
	for _, r := range rows {
		if r := r.(map[string]any); r["id"] == id {
			return r
		}
	}
	return nil
}

// TestSharedHealthOneProberAllNodesAgree: with ProbeFanout 1 exactly one
// node probes each backend; when b2 fails its probes, every node stops
// giving it new sessions; when it dies, its sessions move without a failed
// request.
func TestSharedHealthOneProberAllNodesAgree(t *testing.T) {
	b1, b2, b3 := testutil.NewBackend(t, "b1"), testutil.NewBackend(t, "b2"), testutil.NewBackend(t, "b3")
	e := newClusterEnv(t, healthConfig(1, b1, b2, b3))
	nodes := e.form(3)

	// Every node names the same single prober for b2.
	var prober string
	testutil.Eventually(t, 15*time.Second, "one agreed prober for b2", func() bool {
		prober = ""
		for _, n := range nodes {
			row := destRow(t, n, "b2")
			ps, _ := row["probers"].([]any)
			if len(ps) != 1 || (prober != "" && ps[0] != prober) {
				return false
			}
			prober, _ = ps[0].(string)
		}
		return true
	})
	// Probe load is one node's: over ~2 s at 200 ms, about 10 probes, not 30.
	start := b2.Probes.Load()
	t0 := time.Now()
	time.Sleep(2 * time.Second) // a fixed measuring window, not a wait for a condition
	rate := float64(b2.Probes.Load()-start) / time.Since(t0).Seconds()
	t.Logf("prober %s; b2 probe rate %.1f/s with fanout 1 (interval 200 ms)", prober, rate)
	if rate > 8 {
		t.Fatalf("b2 is probed %.1f times a second: more than one node probes it", rate)
	}

	// Sessions pinned to b2 before it fails.
	var b2Sessions []string
	for i := 0; len(b2Sessions) < 4 && i < 60; i++ {
		_, hdr, _ := testutil.Get(t, http.DefaultClient, nodes[i%3].proxyURL+"/", nil)
		if hdr.Get("X-Demo-Backend") == "b2" {
			b2Sessions = append(b2Sessions, strings.Split(hdr.Get("Set-Cookie"), ";")[0])
		}
	}
	if len(b2Sessions) == 0 {
		t.Fatal("no session landed on b2")
	}

	b2.Sick.Store(true)
	testutil.Eventually(t, 10*time.Second, "every node sees b2 unhealthy cluster-wide", func() bool {
		for _, n := range nodes {
			if h, _ := destRow(t, n, "b2")["health"].(map[string]any); h["cluster"] != "unhealthy" {
				return false
			}
		}
		return true
	})
	for i := range 30 {
		st, hdr, _ := testutil.Get(t, http.DefaultClient, nodes[i%3].proxyURL+"/", nil)
		if st != 200 || hdr.Get("X-Demo-Backend") == "b2" {
			t.Fatalf("new session after b2 failed: %d from %q", st, hdr.Get("X-Demo-Backend"))
		}
	}

	// b2 dies under load: no client request fails.
	b2.Sick.Store(false)
	var sent, failed atomic.Int64
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for w := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 2000; i++ {
				select {
				case <-stop:
					return
				default:
				}
				req, _ := http.NewRequest("GET", nodes[rand.IntN(3)].proxyURL+"/", nil)
				req.Header.Set("Cookie", b2Sessions[(w+i)%len(b2Sessions)])
				resp, err := http.DefaultClient.Do(req)
				sent.Add(1)
				if err != nil || resp.StatusCode != 200 {
					failed.Add(1)
					if err == nil {
						t.Logf("failed request: %s", resp.Status)
					} else {
						t.Logf("failed request: %v", err)
					}
				}
				if resp != nil {
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
			}
		}()
	}
	time.Sleep(300 * time.Millisecond) // let the load run before the kill
	// b2 goes away: new connections are refused, idle ones closed. A request
	// b2 is serving at that instant is not cut here: the rule under test is
	// about connections that fail before any byte was sent.
	sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
	b2.Server.Config.Shutdown(sctx)
	scancel()
	time.Sleep(2 * time.Second) // the load keeps running past the kill
	close(stop)
	wg.Wait()
	t.Logf("after b2 died: %d requests, %d failed", sent.Load(), failed.Load())
	if failed.Load() != 0 || sent.Load() < 50 {
		t.Fatalf("%d of %d requests failed when b2 died", failed.Load(), sent.Load())
	}
}
