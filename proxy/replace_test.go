package proxy

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tether-proxy/tether/proxy/upstream"
)

// TestRetryAndRedistributionChooseOneReplacement (DESIGN.md, "One retry",
// "Session affinity"): a
// session whose destination died is sent to one replacement whichever
// path moves it, on whichever node: the connect-failure retry of a node
// that does not know yet (the port refuses) and the redistribution of a
// node that already excludes it pick the same destination, in either
// order. The key the move hands out then leads there on every node
// without moving again, even once every node excludes the dead one: the
// session moves exactly once. When the replacement dies as well, both
// paths agree again on the next one.
func TestRetryAndRedistributionChooseOneReplacement(t *testing.T) {
	ring := affRing(t, nil, affKey(t, time.Now().Add(-time.Hour), 0))
	const name, sessions = ".T", 8
	cases := []struct {
		desc, policy string
		// retryFirst: the retry (on a node that still thinks the dead
		// destination healthy) moves the session before a redistribution
		// (on a node that excludes it) sees it; else the other way round.
		retryFirst bool
	}{
		{"Cookie, retry first", "Cookie", true},
		{"Cookie, redistribution first", "Cookie", false},
		{"CustomHeader, retry first", "CustomHeader", true},
		{"CustomHeader, redistribution first", "CustomHeader", false},
		{"HashCookie, retry first", "HashCookie", true},
		{"HashCookie, redistribution first", "HashCookie", false},
		{"ArrCookie, retry first", "ArrCookie", true},
		{"ArrCookie, redistribution first", "ArrCookie", false},
	}
	for _, c := range cases {
		t.Run(c.desc, func(t *testing.T) {
			addrs, bs := affBackends(t, "a", "b", "c", "d", "x")
			js := affConfig("c", addrs, `"LoadBalancingPolicy": "Random", `+affBlock(c.policy, name, ""), "", `"TrustedProxies": ["127.0.0.1"]`)
			nodes := []*harness{affHarness(t, js, ring, nil), affHarness(t, js, ring, nil), affHarness(t, js, ring, nil)}
			exclude := func(n int, id string, on bool) {
				h := upstream.Healthy
				if on {
					h = upstream.Unhealthy
				}
				nodes[n].p.Cluster("c").Destination(id).SetActiveHealth(h)
			}
			keys := make([]string, sessions)
			for i := range keys {
				keys[i] = affSessionTo(t, nodes[i%3], c.policy, name, "x")
			}
			bs["x"].Close() // x dies: its port refuses connections
			// move sends key's session through node n (excluding dead there
			// first when redistribute) and returns where it went and the key
			// it was handed.
			move := func(i, n int, key, dead string, redistribute bool) (string, string) {
				t.Helper()
				hdr := affCarrying(c.policy, name, key)
				hdr.Set("X-Forwarded-For", fmt.Sprintf("203.0.113.%d", 1+i)) // the client, for the hash policies
				if redistribute {
					exclude(n, dead, true)
					defer exclude(n, dead, false)
				}
				resp, body := get(t, nil, nodes[n].front.URL+"/", hdr)
				nk := affIssuedKey(t, resp, c.policy, name)
				if resp.StatusCode != http.StatusOK || body == dead || nk == "" {
					t.Fatalf("session %d through node %d (redistribute=%v): status %d from %q, new key %q; want 200 from a replacement of %s with its key",
						i, n, redistribute, resp.StatusCode, body, nk, dead)
				}
				return body, nk
			}
			// stays checks that key leads to want on every node, with dead
			// excluded everywhere, without a move (no new key).
			stays := func(i int, key, dead, want string) {
				t.Helper()
				for n := range nodes {
					exclude(n, dead, true)
				}
				defer func() {
					for n := range nodes {
						exclude(n, dead, false)
					}
				}()
				hdr := affCarrying(c.policy, name, key)
				hdr.Set("X-Forwarded-For", fmt.Sprintf("203.0.113.%d", 1+i))
				for n, h := range nodes {
					resp, body := get(t, nil, h.front.URL+"/", hdr)
					if resp.StatusCode != http.StatusOK || body != want || affIssuedKey(t, resp, c.policy, name) != "" {
						t.Fatalf("session %d with its new key through node %d: status %d from %q; want %s without another move", i, n, resp.StatusCode, body, want)
					}
				}
			}
			spread := map[string]bool{}
			var moved []string // each session's key after its move
			var to []string
			for i, key := range keys {
				first, second := (i+1)%3, (i+2)%3
				a, ka := move(i, first, key, "x", !c.retryFirst)
				b, _ := move(i, second, key, "x", c.retryFirst)
				if a != b {
					t.Fatalf("session %d of x: the %s on node %d chose %s, the %s on node %d chose %s",
						i, pathName(!c.retryFirst), first, a, pathName(c.retryFirst), second, b)
				}
				stays(i, ka, "x", a)
				spread[a] = true
				moved, to = append(moved, ka), append(to, a)
			}
			// The sealed policies spread by the session id, the hash policies
			// by the client address: not all on one replacement.
			if len(spread) < 2 {
				t.Errorf("%d sessions of x all moved to %v", sessions, spread)
			}
			// The first session's replacement dies too, when every node
			// long knows x is gone: its sessions move once more, to one
			// destination again, whichever path moves them.
			for n := range nodes {
				exclude(n, "x", true)
			}
			second := to[0]
			bs[second].Close()
			for i, key := range moved {
				if to[i] != second {
					continue
				}
				a, ka := move(i, 0, key, second, !c.retryFirst)
				b, _ := move(i, 1, key, second, c.retryFirst)
				if a != b || a == "x" {
					t.Fatalf("session %d after %s died too: node 0 chose %s, node 1 %s", i, second, a, b)
				}
				stays(i, ka, second, a)
			}
		})
	}
}

func pathName(redistribution bool) string {
	if redistribution {
		return "redistribution"
	}
	return "retry"
}

// TestUnansweredConnectIsCutAndRetried (DESIGN.md, "One retry"): a
// destination whose address answers no SYN (a listener whose backlog is full
// drops them, as a killed container's address does) is a connect failure
// after upstream.ConnectTimeout, not after the dialer's own timeout or the
// kernel's minutes of SYN retries: the request is retried on another
// destination while the client waits, whatever its method, and a session on
// it goes to its replacement with the new key.
func TestUnansweredConnectIsCutAndRetried(t *testing.T) {
	hole := blackholeAddr(t)
	live := newBackend(t, nil)
	var mu sync.Mutex
	var bounds []time.Duration // how long each dial to hole was allowed
	var d net.Dialer           // no timeout of its own: only the data path's bound cuts the dial
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		if addr == hole {
			dl, ok := ctx.Deadline()
			mu.Lock()
			if ok {
				bounds = append(bounds, time.Until(dl))
			} else {
				bounds = append(bounds, -1)
			}
			mu.Unlock()
		}
		return d.DialContext(ctx, network, addr)
	}
	cases := []struct {
		desc, method, body, cluster, cookie string
		wantKey                             bool
	}{
		{desc: "GET without a session", method: http.MethodGet},
		{desc: "POST with a body", method: http.MethodPost, body: "payload"},
		{desc: "a session on the silent destination", method: http.MethodGet,
			cluster: `"SessionAffinity": {"Enabled": true, "Policy": "HashCookie", "AffinityKeyName": ".S"}, `,
			cookie:  ".S=" + hashKeyOf("a-hole"), wantKey: true},
	}
	for _, c := range cases {
		t.Run(c.desc, func(t *testing.T) {
			mu.Lock()
			bounds = nil
			mu.Unlock()
			js := simpleConfig(map[string]string{"a-hole": "http://" + hole, "b-live": live.URL},
				c.cluster+`"LoadBalancingPolicy": "FirstAlphabetical"`, "", "")
			h := newHarness(t, mustParse(t, js), func(o *Options) { o.Dial = dial })
			req, _ := http.NewRequest(c.method, h.front.URL+"/", strings.NewReader(c.body))
			if c.body == "" {
				req.Body = http.NoBody
			}
			if c.cookie != "" {
				req.Header.Set("Cookie", c.cookie)
			}
			// Far longer than the connect timeout plus a retry, far shorter
			// than the kernel's SYN retries (about two minutes).
			client := &http.Client{Timeout: 30 * time.Second}
			resp, err := client.Do(req)
			if err != nil {
				t.Fatalf("request not answered: %v (the dial to the silent destination was not cut)", err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK || string(b) != "ok" {
				t.Fatalf("status %d %q, want 200 from b-live", resp.StatusCode, b)
			}
			if got := hasCookie(resp, ".S"); got != c.wantKey {
				t.Errorf("response carries a new .S key: %v, want %v", got, c.wantKey)
			}
			mu.Lock()
			defer mu.Unlock()
			if len(bounds) != 1 {
				t.Fatalf("%d dials to the silent destination, want 1", len(bounds))
			}
			if bounds[0] < 0 || bounds[0] > upstream.ConnectTimeout {
				t.Errorf("the dial to the silent destination was allowed %v, want at most the connect timeout %v", bounds[0], upstream.ConnectTimeout)
			}
		})
	}
}

func hasCookie(resp *http.Response, name string) bool {
	for _, c := range resp.Cookies() {
		if c.Name == name {
			return true
		}
	}
	return false
}
