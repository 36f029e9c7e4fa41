package proxy

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"testing"
	"time"

	"github.com/tether-proxy/tether/proxy/upstream"
)

// TestRetryOfASessionGoesToItsDeterministicReplacement (DESIGN.md, "One
// retry"):
// a session whose only destination died (connections refused, not yet
// known unhealthy) is retried on the replacement every node redistributes
// it to, through any of three proxies, and the response carries that
// destination's key, which the next request follows without a retry. Once
// the dead destination is known unhealthy, the session's redistribution
// is the same replacement.
func TestRetryOfASessionGoesToItsDeterministicReplacement(t *testing.T) {
	ring := affRing(t, nil, affKey(t, time.Now().Add(-time.Hour), 0))
	const name = ".T"
	for _, pol := range []string{"Cookie", "HashCookie"} {
		t.Run(pol, func(t *testing.T) {
			addrs, bs := affBackends(t, "a", "b", "c", "d", "x")
			js := affConfig("c", addrs, `"LoadBalancingPolicy": "Random", `+affBlock(pol, name, ""), "", `"TrustedProxies": ["127.0.0.1"]`)
			nodes := []*harness{affHarness(t, js, ring, nil), affHarness(t, js, ring, nil), affHarness(t, js, ring, nil)}
			var keys []string
			for i := range 8 {
				keys = append(keys, affSessionTo(t, nodes[i%3], pol, name, "x"))
			}
			bs["x"].Close() // x dies: its port refuses connections
			replacements := map[string]bool{}
			for i, key := range keys {
				hdr := affCarrying(pol, name, key)
				hdr.Set("X-Forwarded-For", fmt.Sprintf("203.0.113.%d", 1+i))
				var first, firstKey string
				for n, h := range nodes {
					resp, body := get(t, nil, h.front.URL+"/", hdr)
					nk := affIssuedKey(t, resp, pol, name)
					if resp.StatusCode != http.StatusOK || body == "x" || nk == "" {
						t.Fatalf("session %d node %d: status %d from %q new key %q; want 200 from a replacement with its key", i, n, resp.StatusCode, body, nk)
					}
					if first == "" {
						first, firstKey = body, nk
					} else if body != first {
						t.Fatalf("session %d: node %d retried on %s, node 0 on %s", i, n, body, first)
					}
				}
				replacements[first] = true
				// The new key leads to the replacement directly.
				next := affCarrying(pol, name, firstKey)
				for n, h := range nodes {
					resp, body := get(t, nil, h.front.URL+"/", next)
					if resp.StatusCode != http.StatusOK || body != first || affIssuedKey(t, resp, pol, name) != "" {
						t.Fatalf("session %d node %d with the new key: status %d from %q, want %s without a new key", i, n, resp.StatusCode, body, first)
					}
				}
				// Known unhealthy, x's sessions redistribute the same way.
				d := nodes[1].p.Cluster("c").Destination("x")
				d.SetActiveHealth(upstream.Unhealthy)
				resp, body := get(t, nil, nodes[1].front.URL+"/", hdr)
				d.SetActiveHealth(upstream.Healthy)
				if resp.StatusCode != http.StatusOK || body != first {
					t.Fatalf("session %d with x unhealthy: status %d from %q, want %s", i, resp.StatusCode, body, first)
				}
			}
			if pol == "Cookie" && len(replacements) < 2 {
				t.Errorf("8 sessions of x all retried on %v", replacements)
			}
		})
	}
}

// TestFewConsecutiveConnectFailuresExclude: with passive health on, a dead
// destination (a closed port) with little traffic is excluded on this
// node after 3 connect failures in a row, each of which was retried
// without a client-visible error; YARP's rate window alone would need 10
// requests.
func TestFewConsecutiveConnectFailuresExclude(t *testing.T) {
	live := newBackend(t, nil)
	js := simpleConfig(map[string]string{"a-dead": "http://" + deadAddr(t), "b-live": live.URL},
		`"LoadBalancingPolicy": "FirstAlphabetical", "HealthCheck": {"Passive": {"Enabled": true, "ReactivationPeriod": "00:10:00"}}`, "", "")
	h := newHarness(t, mustParse(t, js), nil)
	dead := h.p.Cluster("c").Destination("a-dead")
	for i := range 3 {
		if dead.PassiveFailed(time.Now()) {
			t.Fatalf("excluded after %d connect failures, want 3", i)
		}
		if resp, body := get(t, nil, h.front.URL+"/", nil); resp.StatusCode != http.StatusOK || body != "ok" {
			t.Fatalf("request %d: status %d %q, want 200 from the live destination", i, resp.StatusCode, body)
		}
	}
	if !dead.PassiveFailed(time.Now()) {
		t.Fatal("a-dead not excluded after 3 connect failures in a row")
	}
	if live.hitCount() != 3 {
		t.Fatalf("live destination served %d requests, want 3", live.hitCount())
	}
}

// TestDialTimeoutIsRetried: a destination whose connect times out (here a
// dialer that gives up as a blackholed address would) counts as a connect
// failure: the request is retried on another destination, and with passive
// health on, 3 in a row exclude it.
func TestDialTimeoutIsRetried(t *testing.T) {
	live := newBackend(t, nil)
	const blackhole = "192.0.2.1:9" // TEST-NET-1: never dialled, see Dial below
	js := simpleConfig(map[string]string{"a-slow": "http://" + blackhole, "b-live": live.URL},
		`"LoadBalancingPolicy": "FirstAlphabetical", "HealthCheck": {"Passive": {"Enabled": true}}`, "", "")
	var d net.Dialer
	h := newHarness(t, mustParse(t, js), func(o *Options) {
		o.Dial = func(ctx context.Context, network, addr string) (net.Conn, error) {
			if addr == blackhole {
				return nil, &net.OpError{Op: "dial", Net: network, Err: os.ErrDeadlineExceeded}
			}
			return d.DialContext(ctx, network, addr)
		}
	})
	for i := range 3 {
		if resp, body := get(t, nil, h.front.URL+"/", nil); resp.StatusCode != http.StatusOK || body != "ok" {
			t.Fatalf("request %d: status %d %q, want 200 from the live destination", i, resp.StatusCode, body)
		}
	}
	if !h.p.Cluster("c").Destination("a-slow").PassiveFailed(time.Now()) {
		t.Fatal("a-slow not excluded after 3 dial timeouts in a row")
	}
}

// TestStrictSessionIsNotRetriedElsewhere: under Return503Error a session
// never moves, not even on a connect failure: its request is answered 502
// (backend unreachable) and no other destination sees it.
func TestStrictSessionIsNotRetriedElsewhere(t *testing.T) {
	live := newBackend(t, nil)
	js := simpleConfig(map[string]string{"a-dead": "http://" + deadAddr(t), "b-live": live.URL},
		`"SessionAffinity": {"Enabled": true, "Policy": "HashCookie", "AffinityKeyName": ".S", "FailurePolicy": "Return503Error"}`, "", "")
	h := newHarness(t, mustParse(t, js), nil)
	resp, _ := get(t, nil, h.front.URL+"/", http.Header{"Cookie": {".S=" + hashKeyOf("a-dead")}})
	if resp.StatusCode != http.StatusBadGateway || live.hitCount() != 0 {
		t.Fatalf("status %d, live hits %d; want 502 and no retry", resp.StatusCode, live.hitCount())
	}
	// A request without a session still gets a retry (or lands on b-live).
	for i := range 4 {
		if resp, body := get(t, nil, h.front.URL+"/", nil); resp.StatusCode != http.StatusOK || body != "ok" {
			t.Fatalf("new session %d: status %d %q, want 200", i, resp.StatusCode, body)
		}
	}
}
