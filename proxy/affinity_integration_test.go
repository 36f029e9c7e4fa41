package proxy

// Session affinity (proxy/DESIGN.md, "Session affinity") driven through the
// whole data path: real HTTP through the harness, the real keyring.Ring for
// the sealed policies, and several Proxy instances standing in for the nodes
// of one cluster.

import (
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf16"

	"github.com/cespare/xxhash/v2"

	"github.com/tether-proxy/tether/keyring"
	"github.com/tether-proxy/tether/proxy/upstream"
)

// affClock is a controllable clock for a Ring or a Proxy.
type affClock struct{ ns atomic.Int64 }

func newAffClock(t time.Time) *affClock {
	c := &affClock{}
	c.set(t)
	return c
}

func (c *affClock) now() time.Time      { return time.Unix(0, c.ns.Load()) }
func (c *affClock) set(t time.Time)     { c.ns.Store(t.UnixNano()) }
func (c *affClock) add(d time.Duration) { c.ns.Add(int64(d)) }

// affKey generates a key created at created, activating delay later, valid
// for 90 days after that.
func affKey(t *testing.T, created time.Time, delay time.Duration) keyring.Key {
	t.Helper()
	k, err := keyring.GenerateKey(created, delay, 90*24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// affRing is a real ring holding keys (a node's replica of the keyring);
// now nil is the wall clock.
func affRing(t *testing.T, now func() time.Time, keys ...keyring.Key) *keyring.Ring {
	t.Helper()
	r := keyring.NewRing(keyring.Options{Now: now})
	for _, k := range keys {
		if err := r.Install(k); err != nil {
			t.Fatal(err)
		}
	}
	return r
}

// affBackends starts one backend per id that answers with its id.
func affBackends(t *testing.T, ids ...string) (map[string]string, map[string]*backend) {
	t.Helper()
	addrs, bs := map[string]string{}, map[string]*backend{}
	for _, id := range ids {
		b := newBackend(t, func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, id) })
		addrs[id], bs[id] = b.URL, b
	}
	return addrs, bs
}

// affConfig is a config with one cluster clusterID over dests. cluster is
// spliced into the cluster object and top into the top-level object;
// routes, when set, is the whole Routes object, else one catch-all route
// "r".
func affConfig(clusterID string, dests map[string]string, cluster, routes, top string) string {
	ids := make([]string, 0, len(dests))
	for id := range dests {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	ds := make([]string, 0, len(ids))
	for _, id := range ids {
		ds = append(ds, fmt.Sprintf("%q: {\"Address\": %q}", id, dests[id]))
	}
	if routes == "" {
		routes = fmt.Sprintf(`{ "r": { "ClusterId": %q, "Match": { "Path": "{**catch-all}" } } }`, clusterID)
	}
	if cluster != "" {
		cluster += ","
	}
	if top != "" {
		top += ","
	}
	return fmt.Sprintf(`{ %s
  "ReverseProxy": {
    "Routes": %s,
    "Clusters": { %q: { %s "Destinations": { %s } } }
  }
}`, top, routes, clusterID, cluster, strings.Join(ds, ", "))
}

// affBlock is a SessionAffinity block; extra is spliced in.
func affBlock(policy, name, extra string) string {
	if extra != "" {
		extra = ", " + extra
	}
	return fmt.Sprintf(`"SessionAffinity": {"Enabled": true, "Policy": %q, "AffinityKeyName": %q%s}`, policy, name, extra)
}

// affHarness is a harness whose proxy seals with ring.
func affHarness(t *testing.T, js string, ring *keyring.Ring, mod func(*Options)) *harness {
	t.Helper()
	return newHarness(t, mustParse(t, js), func(o *Options) {
		o.Keyring = ring
		if mod != nil {
			mod(o)
		}
	})
}

// affInHeader reports whether the policy carries its value in a header.
func affInHeader(policy string) bool { return strings.HasSuffix(policy, "Header") }

// affIssuedKeys are the values named name that resp hands to the client: the
// Set-Cookie lines of that cookie, or the header's values.
func affIssuedKeys(t *testing.T, resp *http.Response, policy, name string) []string {
	t.Helper()
	if affInHeader(policy) {
		return resp.Header.Values(name)
	}
	var out []string
	for _, line := range resp.Header.Values("Set-Cookie") {
		c, err := http.ParseSetCookie(line)
		if err != nil {
			t.Fatalf("Set-Cookie %q: %v", line, err)
		}
		if c.Name == name {
			out = append(out, c.Value)
		}
	}
	return out
}

// affIssuedKey is the one key resp carries ("" when none); more than one fails.
func affIssuedKey(t *testing.T, resp *http.Response, policy, name string) string {
	t.Helper()
	ks := affIssuedKeys(t, resp, policy, name)
	switch len(ks) {
	case 0:
		return ""
	case 1:
		return ks[0]
	}
	t.Fatalf("%d affinity keys on one response: %q", len(ks), ks)
	return ""
}

// affCarrying is a request header set that presents value the policy's way.
func affCarrying(policy, name, value string) http.Header {
	if affInHeader(policy) {
		return http.Header{http.CanonicalHeaderKey(name): {value}}
	}
	return http.Header{"Cookie": {name + "=" + value}}
}

// affSessionTo starts sessions on h until one lands on dest and returns its key.
func affSessionTo(t *testing.T, h *harness, policy, name, dest string) string {
	t.Helper()
	for range 50 {
		resp, body := get(t, nil, h.front.URL+"/", nil)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("new session: status %d", resp.StatusCode)
		}
		k := affIssuedKey(t, resp, policy, name)
		if k == "" {
			t.Fatalf("new session on %s carries no %s key", body, name)
		}
		if body == dest {
			return k
		}
	}
	t.Fatalf("no new session reached %s in 50 requests", dest)
	return ""
}

// affOutcomes reads tether_affinity_requests_total for cluster, every outcome.
func affOutcomes(t *testing.T, h *harness, cluster string) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	for _, o := range []string{"no_session", "routed", "failed_open", "failed_closed"} {
		if n := metricValue(t, h, "tether_affinity_requests_total", map[string]string{"cluster": cluster, "outcome": o}); n != 0 {
			out[o] = n
		}
	}
	return out
}

func affSameCounts(a, b map[string]float64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// affSealedKeyID is the id of the key that sealed v (keyring wire format:
// version | id length | id | nonce | ciphertext).
func affSealedKeyID(t *testing.T, v string) string {
	t.Helper()
	raw, err := base64.RawURLEncoding.DecodeString(v)
	if err != nil || len(raw) < 2 || len(raw) < 2+int(raw[1]) {
		t.Fatalf("sealed value %q does not decode: %v", v, err)
	}
	return string(raw[2 : 2+int(raw[1])])
}

// affYarpHashCookie is YARP's HashCookie value of a destination id: XxHash64
// (seed 0) of the UTF-16LE bytes of the upper-cased id, 16 lowercase hex.
func affYarpHashCookie(id string) string {
	var b []byte
	for _, u := range utf16.Encode([]rune(strings.ToUpper(id))) {
		b = append(b, byte(u), byte(u>>8))
	}
	return fmt.Sprintf("%016x", xxhash.Sum64(b))
}

var affBase64URL = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)

// TestAffinitySealedKeyRealKeyringAcrossNodes: Cookie and CustomHeader
// values are base64url sealed by the cluster keyring, hide the destination,
// stick, are sent only once, and open on another node whose keyring
// replica holds the same key.
func TestAffinitySealedKeyRealKeyringAcrossNodes(t *testing.T) {
	ids := []string{"alpha", "bravo", "charlie"}
	addrs, _ := affBackends(t, ids...)
	cases := []struct {
		desc   string
		policy string
		name   string
	}{
		{desc: "Cookie policy: sealed Set-Cookie value", policy: "Cookie", name: ".Tether.Affinity"},
		{desc: "CustomHeader policy: sealed response header", policy: "CustomHeader", name: "X-Tether-Affinity"},
	}
	for _, c := range cases {
		t.Run(c.desc, func(t *testing.T) {
			shared := affKey(t, time.Now().Add(-time.Hour), 0)
			js := affConfig("c", addrs, `"LoadBalancingPolicy": "RoundRobin", `+affBlock(c.policy, c.name, ""), "", "")
			node1 := affHarness(t, js, affRing(t, nil, shared), nil)
			node2 := affHarness(t, js, affRing(t, nil, shared), nil)

			keys := map[string]string{}
			for _, id := range ids {
				k := affSessionTo(t, node1, c.policy, c.name, id)
				if !affBase64URL.MatchString(k) {
					t.Fatalf("key %q for %s is not base64url without padding", k, id)
				}
				raw, err := base64.RawURLEncoding.DecodeString(k)
				if err != nil {
					t.Fatalf("key %q: %v", k, err)
				}
				for _, clear := range []string{id, strings.TrimPrefix(addrs[id], "http://"), "127.0.0.1"} {
					if strings.Contains(k, clear) || strings.Contains(string(raw), clear) {
						t.Errorf("key %q for %s shows %q in clear", k, id, clear)
					}
				}
				if got := affSealedKeyID(t, k); got != shared.ID {
					t.Errorf("key for %s sealed with key %q, want %q", id, got, shared.ID)
				}
				keys[id] = k
			}
			if c.policy == "CustomHeader" {
				resp, _ := get(t, nil, node1.front.URL+"/", nil)
				if sc := resp.Header.Values("Set-Cookie"); len(sc) != 0 {
					t.Errorf("CustomHeader policy sent Set-Cookie %q", sc)
				}
			}

			before := affOutcomes(t, node2, "c")
			for _, node := range []struct {
				name string
				h    *harness
			}{{"issuing node", node1}, {"other node", node2}} {
				for _, id := range ids {
					for range 4 {
						resp, body := get(t, nil, node.h.front.URL+"/", affCarrying(c.policy, c.name, keys[id]))
						if resp.StatusCode != http.StatusOK || body != id {
							t.Fatalf("%s: session of %s answered %d by %q", node.name, id, resp.StatusCode, body)
						}
						if k := affIssuedKey(t, resp, c.policy, c.name); k != "" {
							t.Fatalf("%s: affinitized response carries a key again: %q", node.name, k)
						}
					}
				}
			}
			want := map[string]float64{"routed": before["routed"] + float64(4*len(ids))}
			if got := affOutcomes(t, node2, "c"); !affSameCounts(got, want) {
				t.Errorf("other node's outcomes %v, want %v", got, want)
			}
		})
	}
}

// TestAffinitySealedKeyForeignPurposeFails: a value sealed with the same
// keys but for another cluster, or for another policy with the same name,
// is an affinity failure handled by the failure policy.
func TestAffinitySealedKeyForeignPurposeFails(t *testing.T) {
	addrs, _ := affBackends(t, "alpha", "bravo")
	type side struct{ cluster, policy string }
	cases := []struct {
		desc       string
		issuer     side
		verifier   side
		failure    string
		wantStatus int
		outcome    string
	}{
		{desc: "Cookie value from another cluster, Redistribute: failed_open with a new key",
			issuer: side{"c1", "Cookie"}, verifier: side{"c2", "Cookie"}, failure: "Redistribute",
			wantStatus: http.StatusOK, outcome: "failed_open"},
		{desc: "Cookie value from another cluster, Return503Error: FailureStatusCode",
			issuer: side{"c1", "Cookie"}, verifier: side{"c2", "Cookie"}, failure: "Return503Error",
			wantStatus: http.StatusTeapot, outcome: "failed_closed"},
		{desc: "CustomHeader value from another cluster, Redistribute: failed_open with a new key",
			issuer: side{"c1", "CustomHeader"}, verifier: side{"c2", "CustomHeader"}, failure: "Redistribute",
			wantStatus: http.StatusOK, outcome: "failed_open"},
		{desc: "CustomHeader value from another cluster, Return503Error: FailureStatusCode",
			issuer: side{"c1", "CustomHeader"}, verifier: side{"c2", "CustomHeader"}, failure: "Return503Error",
			wantStatus: http.StatusTeapot, outcome: "failed_closed"},
		{desc: "Cookie value replayed as CustomHeader of the same name, Redistribute: failed_open with a new key",
			issuer: side{"c", "Cookie"}, verifier: side{"c", "CustomHeader"}, failure: "Redistribute",
			wantStatus: http.StatusOK, outcome: "failed_open"},
		{desc: "CustomHeader value replayed as Cookie of the same name, Return503Error: FailureStatusCode",
			issuer: side{"c", "CustomHeader"}, verifier: side{"c", "Cookie"}, failure: "Return503Error",
			wantStatus: http.StatusTeapot, outcome: "failed_closed"},
	}
	const name = "X-Sticky"
	for _, c := range cases {
		t.Run(c.desc, func(t *testing.T) {
			shared := affKey(t, time.Now().Add(-time.Hour), 0)
			extra := fmt.Sprintf(`"FailurePolicy": %q, "FailureStatusCode": 418`, c.failure)
			issuer := affHarness(t, affConfig(c.issuer.cluster, addrs, affBlock(c.issuer.policy, name, extra), "", ""),
				affRing(t, nil, shared), nil)
			verifier := affHarness(t, affConfig(c.verifier.cluster, addrs, affBlock(c.verifier.policy, name, extra), "", ""),
				affRing(t, nil, shared), nil)

			resp, dest := get(t, nil, issuer.front.URL+"/", nil)
			old := affIssuedKey(t, resp, c.issuer.policy, name)
			if old == "" {
				t.Fatal("issuer attached no key")
			}
			// Control: the value is good where it was issued.
			if resp, body := get(t, nil, issuer.front.URL+"/", affCarrying(c.issuer.policy, name, old)); resp.StatusCode != 200 || body != dest {
				t.Fatalf("issuer: own value answered %d by %q, want 200 by %q", resp.StatusCode, body, dest)
			}

			resp, _ = get(t, nil, verifier.front.URL+"/", affCarrying(c.verifier.policy, name, old))
			if resp.StatusCode != c.wantStatus {
				t.Fatalf("status %d, want %d", resp.StatusCode, c.wantStatus)
			}
			nk := affIssuedKey(t, resp, c.verifier.policy, name)
			switch {
			case c.outcome == "failed_open" && (nk == "" || nk == old):
				t.Errorf("redistributed response key %q, want a new key (old %q)", nk, old)
			case c.outcome == "failed_closed" && nk != "":
				t.Errorf("refused response carries key %q", nk)
			}
			if got, want := affOutcomes(t, verifier, c.verifier.cluster), map[string]float64{c.outcome: 1}; !affSameCounts(got, want) {
				t.Errorf("outcomes %v, want %v", got, want)
			}
		})
	}
}

// TestAffinityKeyRotationNeverBreaksSessions: a value sealed with key A
// keeps routing while key B is installed and after B activates; once A is
// revoked the value fails open and the new key is sealed with B.
func TestAffinityKeyRotationNeverBreaksSessions(t *testing.T) {
	addrs, _ := affBackends(t, "alpha", "bravo", "charlie")
	for _, c := range []struct {
		desc   string
		policy string
		name   string
	}{
		{desc: "Cookie", policy: "Cookie", name: ".T"},
		{desc: "CustomHeader", policy: "CustomHeader", name: "X-T"},
	} {
		t.Run(c.desc, func(t *testing.T) {
			t0 := time.Now().UTC()
			clock := newAffClock(t0)
			keyA := affKey(t, t0.Add(-time.Hour), 0)
			keyB := affKey(t, t0, 30*time.Minute) // installed now, active at t0+30m
			ring := affRing(t, clock.now, keyA)
			h := affHarness(t, affConfig("c", addrs, `"LoadBalancingPolicy": "RoundRobin", `+affBlock(c.policy, c.name, ""), "", ""), ring, nil)

			old := affSessionTo(t, h, c.policy, c.name, "bravo")
			if got := affSealedKeyID(t, old); got != keyA.ID {
				t.Fatalf("session sealed with %q, want key A %q", got, keyA.ID)
			}
			stillRoutes := func(stage string) {
				t.Helper()
				resp, body := get(t, nil, h.front.URL+"/", affCarrying(c.policy, c.name, old))
				if resp.StatusCode != 200 || body != "bravo" {
					t.Fatalf("%s: old session answered %d by %q, want bravo", stage, resp.StatusCode, body)
				}
				if k := affIssuedKey(t, resp, c.policy, c.name); k != "" {
					t.Fatalf("%s: old session got a new key %q", stage, k)
				}
			}

			if err := ring.Install(keyB); err != nil {
				t.Fatal(err)
			}
			stillRoutes("key B installed, not active")
			clock.set(t0.Add(time.Hour))
			if id := ring.ActiveKeyID(clock.now()); id != keyB.ID {
				t.Fatalf("active key %q after activation time, want key B %q", id, keyB.ID)
			}
			stillRoutes("key B active")
			resp, _ := get(t, nil, h.front.URL+"/", nil)
			if k := affIssuedKey(t, resp, c.policy, c.name); k == "" || affSealedKeyID(t, k) != keyB.ID {
				t.Fatalf("new session key %q, want one sealed with key B %q", k, keyB.ID)
			}

			before := affOutcomes(t, h, "c")
			if err := ring.Revoke(keyA.ID); err != nil {
				t.Fatal(err)
			}
			resp, _ = get(t, nil, h.front.URL+"/", affCarrying(c.policy, c.name, old))
			if resp.StatusCode != 200 {
				t.Fatalf("after revoking A: status %d, want 200 (Redistribute)", resp.StatusCode)
			}
			nk := affIssuedKey(t, resp, c.policy, c.name)
			if nk == "" || affSealedKeyID(t, nk) != keyB.ID {
				t.Fatalf("after revoking A: new key %q, want one sealed with key B %q", nk, keyB.ID)
			}
			if got := affOutcomes(t, h, "c")["failed_open"]; got != before["failed_open"]+1 {
				t.Errorf("failed_open %v, want %v", got, before["failed_open"]+1)
			}
		})
	}
}

// TestAffinityOutcomesCounted: each resolution outcome is counted in
// tether_affinity_requests_total{cluster,outcome}, once.
func TestAffinityOutcomesCounted(t *testing.T) {
	addrs, _ := affBackends(t, "alpha", "bravo")
	const name = ".T"
	valid := func(t *testing.T, h *harness) (string, string) {
		t.Helper()
		resp, body := get(t, nil, h.front.URL+"/", nil)
		k := affIssuedKey(t, resp, "Cookie", name)
		if k == "" {
			t.Fatal("no key attached")
		}
		return k, body
	}
	tampered := func(t *testing.T, h *harness) string {
		k, _ := valid(t, h)
		b := []byte(k)
		i := len(b) / 2
		if b[i] == 'A' {
			b[i] = 'B'
		} else {
			b[i] = 'A'
		}
		return string(b)
	}
	destGone := func(t *testing.T, h *harness) string {
		k, dest := valid(t, h)
		h.p.Cluster("c").Destination(dest).SetActiveHealth(upstream.Unhealthy)
		return k
	}
	cases := []struct {
		desc       string
		failure    string
		key        func(*testing.T, *harness) string
		wantStatus int
		want       map[string]float64
	}{
		{desc: "no key: no_session", failure: "Redistribute",
			key:        func(*testing.T, *harness) string { return "" },
			wantStatus: 200, want: map[string]float64{"no_session": 1}},
		{desc: "valid key: routed", failure: "Redistribute",
			key:        func(t *testing.T, h *harness) string { k, _ := valid(t, h); return k },
			wantStatus: 200, want: map[string]float64{"no_session": 1, "routed": 1}},
		{desc: "tampered key with Redistribute: failed_open", failure: "Redistribute", key: tampered,
			wantStatus: 200, want: map[string]float64{"no_session": 1, "failed_open": 1}},
		{desc: "key of an unhealthy destination with Redistribute: failed_open", failure: "Redistribute", key: destGone,
			wantStatus: 200, want: map[string]float64{"no_session": 1, "failed_open": 1}},
		{desc: "tampered key with Return503Error: failed_closed", failure: "Return503Error", key: tampered,
			wantStatus: 503, want: map[string]float64{"no_session": 1, "failed_closed": 1}},
		{desc: "key of an unhealthy destination with Return503Error: failed_closed", failure: "Return503Error", key: destGone,
			wantStatus: 503, want: map[string]float64{"no_session": 1, "failed_closed": 1}},
	}
	for _, c := range cases {
		t.Run(c.desc, func(t *testing.T) {
			h := affHarness(t, affConfig("c", addrs, affBlock("Cookie", name, fmt.Sprintf(`"FailurePolicy": %q`, c.failure)), "", ""),
				affRing(t, nil, affKey(t, time.Now().Add(-time.Hour), 0)), nil)
			var hdr http.Header
			if k := c.key(t, h); k != "" {
				hdr = affCarrying("Cookie", name, k)
			}
			if resp, _ := get(t, nil, h.front.URL+"/", hdr); resp.StatusCode != c.wantStatus {
				t.Fatalf("status %d, want %d", resp.StatusCode, c.wantStatus)
			}
			if got := affOutcomes(t, h, "c"); !affSameCounts(got, c.want) {
				t.Errorf("tether_affinity_requests_total %v, want %v", got, c.want)
			}
		})
	}
}

// TestAffinityRedistributionDeterministicAcrossNodes: two nodes with the
// same config send the same broken session to the same replacement and
// attach the same new key, whatever their load balancer would pick.
func TestAffinityRedistributionDeterministicAcrossNodes(t *testing.T) {
	ids := []string{"d1", "d2", "d3", "d4", "d5"}
	addrs, _ := affBackends(t, ids...)
	// Random: without rendezvous hashing, the nodes would disagree.
	js := affConfig("c", addrs, `"LoadBalancingPolicy": "Random", `+affBlock("HashCookie", ".T", ""), "", "")
	nodes := []*harness{newHarness(t, mustParse(t, js), nil), newHarness(t, mustParse(t, js), nil)}

	// The proxy's HashCookie values are YARP's, so old keys can be made here.
	resp, body := get(t, nil, nodes[0].front.URL+"/", nil)
	if k := affIssuedKey(t, resp, "HashCookie", ".T"); k != affYarpHashCookie(body) {
		t.Fatalf("HashCookie of %s is %q, want YARP's %q", body, k, affYarpHashCookie(body))
	}

	cases := []struct {
		desc string
		gone string // destination marked unhealthy on both nodes ("" none)
		old  string
	}{
		{desc: "session on d1, d1 unhealthy", gone: "d1", old: affYarpHashCookie("d1")},
		{desc: "session on d2, d2 unhealthy", gone: "d2", old: affYarpHashCookie("d2")},
		{desc: "session on d3, d3 unhealthy", gone: "d3", old: affYarpHashCookie("d3")},
		{desc: "session on d4, d4 unhealthy", gone: "d4", old: affYarpHashCookie("d4")},
		{desc: "session on d5, d5 unhealthy", gone: "d5", old: affYarpHashCookie("d5")},
		{desc: "session on a removed destination", old: affYarpHashCookie("removed-1")},
		{desc: "session on another removed destination", old: affYarpHashCookie("removed-2")},
		{desc: "undecodable value", old: "not-a-hash"},
	}
	for _, c := range cases {
		t.Run(c.desc, func(t *testing.T) {
			if c.gone != "" {
				for _, n := range nodes {
					d := n.p.Cluster("c").Destination(c.gone)
					d.SetActiveHealth(upstream.Unhealthy)
					t.Cleanup(func() { d.SetActiveHealth(upstream.Healthy) })
				}
			}
			var firstDest, firstKey string
			for i, n := range nodes {
				for try := range 3 {
					resp, body := get(t, nil, n.front.URL+"/", affCarrying("HashCookie", ".T", c.old))
					nk := affIssuedKey(t, resp, "HashCookie", ".T")
					if resp.StatusCode != 200 || nk == "" {
						t.Fatalf("node %d: status %d, new key %q; want 200 with a new key", i, resp.StatusCode, nk)
					}
					if body == c.gone {
						t.Fatalf("node %d: redistributed to the unhealthy %s", i, body)
					}
					if nk != affYarpHashCookie(body) {
						t.Fatalf("node %d: new key %q is not %s's key", i, nk, body)
					}
					if firstDest == "" {
						firstDest, firstKey = body, nk
					} else if body != firstDest || nk != firstKey {
						t.Fatalf("node %d try %d: replacement %s key %q, want %s key %q as on node 0",
							i, try, body, nk, firstDest, firstKey)
					}
				}
			}
		})
	}
}

// TestAffinityDrainingThroughSetDraining: a draining destination takes no
// new sessions, keeps its sessions until the drain deadline, and they are
// redistributed after it.
func TestAffinityDrainingThroughSetDraining(t *testing.T) {
	addrs, bs := affBackends(t, "alpha", "bravo", "charlie")
	const name = ".T"
	clock := newAffClock(time.Now())
	h := affHarness(t, affConfig("c", addrs,
		`"LoadBalancingPolicy": "RoundRobin", "DrainTimeout": "00:01:00", `+affBlock("Cookie", name, ""), "", ""),
		affRing(t, nil, affKey(t, time.Now().Add(-time.Hour), 0)), func(o *Options) { o.Now = clock.now })

	sess := affSessionTo(t, h, "Cookie", name, "alpha")
	deadline, err := h.p.SetDraining("c", "alpha", true)
	if err != nil {
		t.Fatal(err)
	}
	if want := clock.now().Add(time.Minute); !deadline.Equal(want) {
		t.Fatalf("drain deadline %v, want now+DrainTimeout %v", deadline, want)
	}

	t.Run("no new sessions on a draining destination", func(t *testing.T) {
		hits := bs["alpha"].hitCount()
		for range 30 {
			resp, body := get(t, nil, h.front.URL+"/", nil)
			if resp.StatusCode != 200 || body == "alpha" {
				t.Fatalf("new session answered %d by %q", resp.StatusCode, body)
			}
			if affIssuedKey(t, resp, "Cookie", name) == "" {
				t.Fatal("new session got no key")
			}
		}
		if n := bs["alpha"].hitCount(); n != hits {
			t.Errorf("draining alpha got %d new requests", n-hits)
		}
	})
	t.Run("existing session stays until the deadline", func(t *testing.T) {
		clock.add(59 * time.Second)
		for range 5 {
			resp, body := get(t, nil, h.front.URL+"/", affCarrying("Cookie", name, sess))
			if resp.StatusCode != 200 || body != "alpha" {
				t.Fatalf("session answered %d by %q before the deadline, want alpha", resp.StatusCode, body)
			}
			if k := affIssuedKey(t, resp, "Cookie", name); k != "" {
				t.Fatalf("session got a new key %q before the deadline", k)
			}
		}
	})
	t.Run("after the deadline the session is redistributed", func(t *testing.T) {
		clock.set(deadline.Add(time.Second))
		before := affOutcomes(t, h, "c")["failed_open"]
		resp, body := get(t, nil, h.front.URL+"/", affCarrying("Cookie", name, sess))
		nk := affIssuedKey(t, resp, "Cookie", name)
		if resp.StatusCode != 200 || body == "alpha" || nk == "" {
			t.Fatalf("after the deadline: %d by %q with key %q; want another destination and a new key", resp.StatusCode, body, nk)
		}
		if got := affOutcomes(t, h, "c")["failed_open"]; got != before+1 {
			t.Errorf("failed_open %v, want %v", got, before+1)
		}
		if resp, again := get(t, nil, h.front.URL+"/", affCarrying("Cookie", name, nk)); resp.StatusCode != 200 || again != body {
			t.Errorf("new key answered %d by %q, want %s", resp.StatusCode, again, body)
		}
	})
	t.Run("undo: new sessions reach the destination again", func(t *testing.T) {
		if _, err := h.p.SetDraining("c", "alpha", false); err != nil {
			t.Fatal(err)
		}
		affSessionTo(t, h, "Cookie", name, "alpha")
	})
}

// TestAffinitySecurePolicyThroughProxy: SameAsRequest follows the client's
// scheme as established after TrustedProxies; Always and None ignore it.
func TestAffinitySecurePolicyThroughProxy(t *testing.T) {
	addrs, _ := affBackends(t, "alpha")
	const trusted = `"TrustedProxies": ["127.0.0.1"]`
	cases := []struct {
		desc   string
		policy string
		top    string
		xfp    string
		secure bool
	}{
		{desc: "SameAsRequest: untrusted peer claiming https gets no Secure", policy: "SameAsRequest", xfp: "https"},
		{desc: "SameAsRequest: trusted peer forwarding https gets Secure", policy: "SameAsRequest", top: trusted, xfp: "https", secure: true},
		{desc: "SameAsRequest: trusted peer forwarding http gets no Secure", policy: "SameAsRequest", top: trusted, xfp: "http"},
		{desc: "SameAsRequest: plain HTTP gets no Secure", policy: "SameAsRequest", top: trusted},
		{desc: "Always: plain HTTP gets Secure", policy: "Always", secure: true},
		{desc: "None: trusted peer forwarding https gets no Secure", policy: "None", top: trusted, xfp: "https"},
	}
	for _, c := range cases {
		t.Run(c.desc, func(t *testing.T) {
			block := affBlock("Cookie", ".T", fmt.Sprintf(`"Cookie": {"SecurePolicy": %q}`, c.policy))
			h := affHarness(t, affConfig("c", addrs, block, "", c.top), affRing(t, nil, affKey(t, time.Now().Add(-time.Hour), 0)), nil)
			hdr := http.Header{}
			if c.xfp != "" {
				hdr.Set("X-Forwarded-Proto", c.xfp)
			}
			resp, _ := get(t, nil, h.front.URL+"/", hdr)
			lines := resp.Header.Values("Set-Cookie")
			if len(lines) != 1 {
				t.Fatalf("Set-Cookie %q, want one line", lines)
			}
			ck, err := http.ParseSetCookie(lines[0])
			if err != nil {
				t.Fatal(err)
			}
			if ck.Secure != c.secure {
				t.Errorf("Secure = %v, want %v (%q)", ck.Secure, c.secure, lines[0])
			}
		})
	}
}

// TestAffinityEnvelopeThroughProxy: EnvelopeCookie and EnvelopeHeader wrap
// the backend's own session value on the way out and give the backend back
// exactly its value on the way in; nothing is added otherwise.
func TestAffinityEnvelopeThroughProxy(t *testing.T) {
	ids := []string{"alpha", "bravo", "charlie"}
	cases := []struct {
		desc   string
		policy string
		name   string
	}{
		{desc: "EnvelopeCookie wraps the backend's JSESSIONID", policy: "EnvelopeCookie", name: "JSESSIONID"},
		{desc: "EnvelopeHeader wraps the backend's X-Session", policy: "EnvelopeHeader", name: "X-Session"},
	}
	for _, c := range cases {
		t.Run(c.desc, func(t *testing.T) {
			addrs, bs := map[string]string{}, map[string]*backend{}
			for _, id := range ids {
				b := newBackend(t, func(w http.ResponseWriter, r *http.Request) {
					// The backend starts a session when the client has none,
					// except on /plain.
					if r.URL.Path != "/plain" {
						if c.policy == "EnvelopeCookie" {
							if _, err := r.Cookie("JSESSIONID"); err != nil {
								w.Header().Add("Set-Cookie", "JSESSIONID=abc123; Path=/; HttpOnly")
							}
						} else if r.Header.Get("X-Session") == "" {
							w.Header().Set("X-Session", "abc123")
						}
					}
					_, _ = io.WriteString(w, id)
				})
				addrs[id], bs[id] = b.URL, b
			}
			h := affHarness(t, affConfig("c", addrs, `"LoadBalancingPolicy": "RoundRobin", `+affBlock(c.policy, c.name, ""), "", ""),
				affRing(t, nil, affKey(t, time.Now().Add(-time.Hour), 0)), nil)

			// Nothing is added when the backend sets no session value.
			for _, hdr := range []http.Header{nil, {"Cookie": {"theme=dark"}}} {
				resp, _ := get(t, nil, h.front.URL+"/plain", hdr)
				if sc := resp.Header.Values("Set-Cookie"); len(sc) != 0 {
					t.Errorf("/plain: Set-Cookie %q added", sc)
				}
				if v := resp.Header.Values("X-Session"); len(v) != 0 {
					t.Errorf("/plain: X-Session %q added", v)
				}
			}

			resp, dest := get(t, nil, h.front.URL+"/", nil)
			var wrapped string
			if c.policy == "EnvelopeCookie" {
				lines := resp.Header.Values("Set-Cookie")
				if len(lines) != 1 {
					t.Fatalf("Set-Cookie %q, want only the backend's line", lines)
				}
				v, rest, _ := strings.Cut(strings.TrimPrefix(lines[0], "JSESSIONID="), ";")
				if !strings.HasPrefix(lines[0], "JSESSIONID=") || rest != " Path=/; HttpOnly" {
					t.Fatalf("Set-Cookie %q, want JSESSIONID=<envelope>; Path=/; HttpOnly", lines[0])
				}
				wrapped = v
			} else {
				if sc := resp.Header.Values("Set-Cookie"); len(sc) != 0 {
					t.Errorf("EnvelopeHeader added Set-Cookie %q", sc)
				}
				vs := resp.Header.Values("X-Session")
				if len(vs) != 1 {
					t.Fatalf("X-Session %q, want one value", vs)
				}
				wrapped = vs[0]
			}
			sealed, inner, ok := strings.Cut(wrapped, ".")
			if wrapped == "abc123" || !ok || inner != "abc123" || !affBase64URL.MatchString(sealed) || strings.Contains(sealed, dest) {
				t.Fatalf("client got %q, want <sealed destination>.abc123", wrapped)
			}

			before := affOutcomes(t, h, "c")
			for range 5 {
				hdr := http.Header{"Cookie": {"theme=dark; JSESSIONID=" + wrapped}}
				if c.policy == "EnvelopeHeader" {
					hdr = http.Header{"Cookie": {"theme=dark"}, "X-Session": {wrapped}}
				}
				resp, body := get(t, nil, h.front.URL+"/", hdr)
				if resp.StatusCode != 200 || body != dest {
					t.Fatalf("session answered %d by %q, want %s", resp.StatusCode, body, dest)
				}
				if sc := resp.Header.Values("Set-Cookie"); len(sc) != 0 {
					t.Errorf("affinitized response added Set-Cookie %q", sc)
				}
				if v := resp.Header.Values("X-Session"); len(v) != 0 {
					t.Errorf("affinitized response added X-Session %q", v)
				}
				got := bs[dest].lastRequest().Header
				wantCookie, wantSession := []string{"theme=dark; JSESSIONID=abc123"}, []string(nil)
				if c.policy == "EnvelopeHeader" {
					wantCookie, wantSession = []string{"theme=dark"}, []string{"abc123"}
				}
				if !slices.Equal(got["Cookie"], wantCookie) || !slices.Equal(got["X-Session"], wantSession) {
					t.Fatalf("backend got Cookie %q X-Session %q, want %q and %q", got["Cookie"], got["X-Session"], wantCookie, wantSession)
				}
			}
			if got := affOutcomes(t, h, "c")["routed"]; got != before["routed"]+5 {
				t.Errorf("routed %v, want %v", got, before["routed"]+5)
			}

			// Failures: tether strips only its own authenticated envelope, also
			// after a redistribution; anything else is forwarded verbatim.
			tampered := strings.Replace(wrapped, sealed[:4], "AAAA", 1)
			if sealed[:4] == "AAAA" {
				tampered = strings.Replace(wrapped, sealed[:4], "BBBB", 1)
			}
			failures := []struct {
				desc, value, backendSees string
			}{
				{desc: "envelope of an unhealthy destination is still unwrapped", value: wrapped, backendSees: "abc123"},
				{desc: "tampered envelope is forwarded as sent", value: tampered, backendSees: tampered},
			}
			d := h.p.Cluster("c").Destination(dest)
			d.SetActiveHealth(upstream.Unhealthy)
			defer d.SetActiveHealth(upstream.Healthy)
			for _, f := range failures {
				before := affOutcomes(t, h, "c")["failed_open"]
				hdr := http.Header{"Cookie": {"theme=dark; JSESSIONID=" + f.value}}
				if c.policy == "EnvelopeHeader" {
					hdr = http.Header{"X-Session": {f.value}}
				}
				resp, body := get(t, nil, h.front.URL+"/", hdr)
				if resp.StatusCode != 200 || body == dest || bs[body] == nil {
					t.Fatalf("%s: answered %d by %q, want another destination than %s", f.desc, resp.StatusCode, body, dest)
				}
				got := bs[body].lastRequest().Header
				var seen string
				if c.policy == "EnvelopeHeader" {
					seen = got.Get("X-Session")
				} else {
					seen = strings.TrimPrefix(strings.Join(got["Cookie"], "; "), "theme=dark; JSESSIONID=")
				}
				if seen != f.backendSees {
					t.Errorf("%s: backend saw %q, want %q", f.desc, seen, f.backendSees)
				}
				if n := affOutcomes(t, h, "c")["failed_open"]; n != before+1 {
					t.Errorf("%s: failed_open %v, want %v", f.desc, n, before+1)
				}
			}
		})
	}
}

// TestAffinitySessionsSurviveReload: a reload (Proxy.Update) rebuilds the
// affinity providers; live sessions keep their destination and drain state
// carries over.
func TestAffinitySessionsSurviveReload(t *testing.T) {
	addrs, _ := affBackends(t, "alpha", "bravo", "charlie")
	const name = ".T"
	block := `"LoadBalancingPolicy": "RoundRobin", ` + affBlock("Cookie", name, "")
	two := map[string]string{"alpha": addrs["alpha"], "bravo": addrs["bravo"]}
	h := affHarness(t, affConfig("c", two, block, "", ""), affRing(t, nil, affKey(t, time.Now().Add(-time.Hour), 0)), nil)
	sess := affSessionTo(t, h, "Cookie", name, "bravo")
	if _, err := h.p.SetDraining("c", "bravo", true); err != nil {
		t.Fatal(err)
	}
	if err := h.p.Update(mustParse(t, affConfig("c", addrs, block, "", ""))); err != nil {
		t.Fatal(err)
	}
	for range 4 {
		resp, body := get(t, nil, h.front.URL+"/", affCarrying("Cookie", name, sess))
		if resp.StatusCode != 200 || body != "bravo" || affIssuedKey(t, resp, "Cookie", name) != "" {
			t.Fatalf("after reload the session answered %d by %q (new key %q), want bravo and no key",
				resp.StatusCode, body, affIssuedKey(t, resp, "Cookie", name))
		}
	}
	for range 6 {
		if _, body := get(t, nil, h.front.URL+"/", nil); body == "bravo" {
			t.Fatal("after reload the draining bravo took a new session")
		}
	}
}

// TestAffinityRouteOverrideFullBlock: a route's own SessionAffinity block
// replaces the cluster's: each route issues and honours its own key kind.
func TestAffinityRouteOverrideFullBlock(t *testing.T) {
	addrs, _ := affBackends(t, "alpha", "bravo", "charlie")
	routes := `{
      "a": { "ClusterId": "c", "Match": { "Path": "/a/{**rest}" } },
      "b": { "ClusterId": "c", "Match": { "Path": "/b/{**rest}" }, ` + affBlock("CustomHeader", "X-Route-B", "") + ` }
    }`
	h := affHarness(t, affConfig("c", addrs, `"LoadBalancingPolicy": "RoundRobin", `+affBlock("HashCookie", ".T", ""), routes, ""),
		affRing(t, nil, affKey(t, time.Now().Add(-time.Hour), 0)), nil)
	hex16 := regexp.MustCompile(`^[0-9a-f]{16}$`)
	cases := []struct {
		desc         string
		path         string
		policy, name string
		format       *regexp.Regexp
		other        http.Header // the other route's key kind: ignored here
	}{
		{desc: "route a uses the cluster's HashCookie", path: "/a/x", policy: "HashCookie", name: ".T", format: hex16,
			other: http.Header{"X-Route-B": {"whatever"}}},
		{desc: "route b's override uses CustomHeader X-Route-B", path: "/b/x", policy: "CustomHeader", name: "X-Route-B", format: affBase64URL,
			other: http.Header{"Cookie": {".T=" + affYarpHashCookie("alpha")}}},
	}
	for _, c := range cases {
		t.Run(c.desc, func(t *testing.T) {
			resp, dest := get(t, nil, h.front.URL+c.path, nil)
			k := affIssuedKey(t, resp, c.policy, c.name)
			if !c.format.MatchString(k) {
				t.Fatalf("key %q does not have %s's format", k, c.policy)
			}
			otherKinds := len(resp.Header.Values("X-Route-B")) + len(resp.Header.Values("Set-Cookie")) - 1
			if otherKinds != 0 {
				t.Errorf("response carries another key kind too: %v", resp.Header)
			}
			for range 4 {
				resp, body := get(t, nil, h.front.URL+c.path, affCarrying(c.policy, c.name, k))
				if body != dest || affIssuedKey(t, resp, c.policy, c.name) != "" {
					t.Fatalf("session of %s went to %q (key again: %q)", dest, body, affIssuedKey(t, resp, c.policy, c.name))
				}
			}
			// The other route's key is no key here: a new session starts.
			resp, _ = get(t, nil, h.front.URL+c.path, c.other)
			if affIssuedKey(t, resp, c.policy, c.name) == "" {
				t.Errorf("with only the other route's key, no new %s key was attached", c.name)
			}
		})
	}
}

// TestAffinityParallelSessionAcrossNodes: the parallel requests of one
// session, spread over two nodes, all reach one destination: while it is
// available, and after it failed (deterministic redistribution).
func TestAffinityParallelSessionAcrossNodes(t *testing.T) {
	ids := []string{"alpha", "bravo", "charlie", "delta"}
	addrs, _ := affBackends(t, ids...)
	shared := affKey(t, time.Now().Add(-time.Hour), 0)
	const name = ".T"
	js := affConfig("c", addrs, `"LoadBalancingPolicy": "Random", `+affBlock("Cookie", name, ""), "", "")
	nodes := []*harness{
		affHarness(t, js, affRing(t, nil, shared), nil),
		affHarness(t, js, affRing(t, nil, shared), nil),
	}
	sess := affSessionTo(t, nodes[0], "Cookie", name, "charlie")

	// burst sends the session's cookie from 8 goroutines, alternating nodes,
	// and returns the set of destinations that answered.
	burst := func(t *testing.T) map[string]int {
		t.Helper()
		type result struct {
			body string
			err  error
		}
		results := make(chan result, 8*5)
		for g := range 8 {
			go func() {
				for i := range 5 {
					n := nodes[(g+i)%2]
					req, _ := http.NewRequest(http.MethodGet, n.front.URL+"/", nil)
					req.Header.Set("Cookie", name+"="+sess)
					resp, err := http.DefaultClient.Do(req)
					if err != nil {
						results <- result{err: err}
						continue
					}
					b, err := io.ReadAll(resp.Body)
					resp.Body.Close()
					if err == nil && resp.StatusCode != 200 {
						err = fmt.Errorf("status %d", resp.StatusCode)
					}
					results <- result{body: string(b), err: err}
				}
			}()
		}
		seen := map[string]int{}
		for range 8 * 5 {
			r := <-results
			if r.err != nil {
				t.Fatal(r.err)
			}
			seen[r.body]++
		}
		return seen
	}

	t.Run("routed session", func(t *testing.T) {
		if seen := burst(t); len(seen) != 1 || seen["charlie"] == 0 {
			t.Errorf("parallel requests reached %v, want only charlie", seen)
		}
	})
	t.Run("redistributed session", func(t *testing.T) {
		for _, n := range nodes {
			d := n.p.Cluster("c").Destination("charlie")
			d.SetActiveHealth(upstream.Unhealthy)
			t.Cleanup(func() { d.SetActiveHealth(upstream.Healthy) })
		}
		if seen := burst(t); len(seen) != 1 || seen["charlie"] != 0 {
			t.Errorf("parallel requests reached %v, want one replacement for charlie", seen)
		}
	})
}

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
