package proxy

import (
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/tether-proxy/tether/proxy/upstream"
)

// TestRedistributionAgreesAcrossThreeProxiesAndSpreads (DESIGN.md,
// "Session affinity"): the
// sessions of a dead destination are redistributed by three proxies
// sharing one keyring; for each session, parallel requests through all
// three land on one replacement, and different sessions land on different
// replacements. Cookie spreads by the session id sealed in the value;
// HashCookie, whose value is one per destination, by the value plus the
// client address (here the X-Forwarded-For of a trusted front proxy).
func TestRedistributionAgreesAcrossThreeProxiesAndSpreads(t *testing.T) {
	ids := []string{"d1", "d2", "d3", "d4", "d5"}
	addrs, _ := affBackends(t, ids...)
	ring := affRing(t, nil, affKey(t, time.Now().Add(-time.Hour), 0))
	const name, sessions = ".T", 40
	for _, pol := range []string{"Cookie", "HashCookie"} {
		t.Run(pol, func(t *testing.T) {
			js := affConfig("c", addrs, `"LoadBalancingPolicy": "Random", `+affBlock(pol, name, ""), "", `"TrustedProxies": ["127.0.0.1"]`)
			nodes := []*harness{affHarness(t, js, ring, nil), affHarness(t, js, ring, nil), affHarness(t, js, ring, nil)}
			keys := make([]string, sessions)
			for i := range keys {
				keys[i] = affSessionTo(t, nodes[i%3], pol, name, "d3")
			}
			for _, n := range nodes {
				n.p.Cluster("c").Destination("d3").SetActiveHealth(upstream.Unhealthy)
			}
			replacements := map[string]int{}
			for i, key := range keys {
				hdr := affCarrying(pol, name, key)
				hdr.Set("X-Forwarded-For", fmt.Sprintf("203.0.113.%d", 10+i))
				type result struct {
					body string
					err  error
				}
				results := make(chan result, 9)
				for g := range 9 {
					go func() {
						req, _ := http.NewRequest(http.MethodGet, nodes[g%3].front.URL+"/", nil)
						req.Header = hdr.Clone()
						resp, err := http.DefaultClient.Do(req)
						if err != nil {
							results <- result{err: err}
							return
						}
						b, err := io.ReadAll(resp.Body)
						resp.Body.Close()
						if err == nil && resp.StatusCode != http.StatusOK {
							err = fmt.Errorf("status %d", resp.StatusCode)
						}
						results <- result{body: string(b), err: err}
					}()
				}
				seen := map[string]int{}
				for range 9 {
					r := <-results
					if r.err != nil {
						t.Fatalf("session %d: %v", i, r.err)
					}
					seen[r.body]++
				}
				if len(seen) != 1 || seen["d3"] != 0 {
					t.Fatalf("session %d: parallel requests through 3 proxies reached %v, want one replacement for d3", i, seen)
				}
				for d := range seen {
					replacements[d]++
				}
			}
			if len(replacements) != len(ids)-1 {
				t.Errorf("%d sessions of d3 went to %v, want them spread over all 4 healthy destinations", sessions, replacements)
			}
		})
	}
}
