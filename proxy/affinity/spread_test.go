package affinity

import (
	"encoding/binary"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/tether-proxy/tether/proxy/upstream"
)

// repeatableSessionIDs makes session ids come from a seeded generator for
// the rest of the test, so measured spreads do not depend on luck.
func repeatableSessionIDs(t *testing.T) {
	old := newSessionID
	rng := rand.New(rand.NewChaCha8([32]byte{'t', 'e', 't', 'h', 'e', 'r'}))
	newSessionID = func(b []byte) { binary.BigEndian.PutUint64(b, rng.Uint64()) }
	t.Cleanup(func() { newSessionID = old })
}

// issueSession starts one new session on d the way the data path does
// (Affinitize of a first response) and returns the request a client then
// sends. Envelopes wrap the backend's own value "s<i>".
func issueSession(t *testing.T, p *Provider, d *upstream.Destination, i int) *http.Request {
	t.Helper()
	resp := &http.Response{Header: http.Header{}}
	inner := "s" + strconv.Itoa(i)
	switch p.policy {
	case envelopeCookie:
		resp.Header.Add("Set-Cookie", p.name+"="+inner+"; path=/")
	case envelopeHeader:
		resp.Header.Set(p.name, inner)
	}
	p.Affinitize(resp, d, Decision{Outcome: NoSession, Attach: true}, false)
	var v string
	if p.policy.inHeader() {
		v = resp.Header.Get(p.name)
	} else {
		line := resp.Header.Get("Set-Cookie")
		v, _, _ = strings.Cut(strings.TrimPrefix(line, p.name+"="), ";")
	}
	if v == "" || v == inner {
		t.Fatalf("session %d: nothing issued (%v)", i, resp.Header)
	}
	return requestWith(p, v)
}

// TestRedistributionSpreadsTheSessionsOfADeadDestination (deterministic
// redistribution): 1,000 sessions of a destination that dies
// land within ±20% of even over the 4 healthy ones, and a second node (its
// own provider and cluster view, the same keyring) picks the same
// replacement for every session. Sealed policies spread by the session id
// in the value; the hash policies, whose value is one per destination, by
// the value plus the client address.
func TestRedistributionSpreadsTheSessionsOfADeadDestination(t *testing.T) {
	repeatableSessionIDs(t)
	const sessions, healthy = 1000, 4
	kr := newFakeKeyring(t)
	for _, pol := range []string{"Cookie", "CustomHeader", "EnvelopeCookie", "EnvelopeHeader", "HashCookie", "ArrCookie"} {
		t.Run(pol, func(t *testing.T) {
			node := func() (*Provider, *upstream.Cluster) {
				var ds []*upstream.Destination
				for i := 0; i <= healthy; i++ {
					ds = append(ds, dest("app-"+strconv.Itoa(i)))
				}
				c := cluster("c", ds...)
				return mustNew(t, "c", enabled(pol, "K"), c, kr), c
			}
			p1, c1 := node()
			p2, c2 := node()
			dead := c1.Destination("app-2")
			reqs := make([]*http.Request, sessions)
			for i := range reqs {
				reqs[i] = issueSession(t, p1, dead, i)
			}
			dead.SetActiveHealth(upstream.Unhealthy)
			c2.Destination("app-2").SetActiveHealth(upstream.Unhealthy)

			got := map[string]int{}
			for i, r := range reqs {
				client := "10.0." + strconv.Itoa(i/250) + "." + strconv.Itoa(i%250)
				d1 := p1.ResolveClient(r, client, c1, t0, nil)
				d2 := p2.ResolveClient(r, client, c2, t0, nil)
				if d1.Outcome != FailedOpen || len(d1.Candidates) != 1 || len(d2.Candidates) != 1 {
					t.Fatalf("session %d: node 1 %v %v, node 2 %v", i, d1.Outcome, ids(d1.Candidates), ids(d2.Candidates))
				}
				if a, b := d1.Candidates[0].ID, d2.Candidates[0].ID; a != b {
					t.Fatalf("session %d: node 1 picks %s, node 2 %s", i, a, b)
				}
				got[d1.Candidates[0].ID]++
			}
			even := sessions / healthy
			for _, d := range c1.Destinations {
				n := got[d.ID]
				if d == dead {
					if n != 0 {
						t.Fatalf("%d sessions stayed on the dead destination", n)
					}
					continue
				}
				if n < even*8/10 || n > even*12/10 {
					t.Errorf("%s took %d of %d sessions, want %d ±20%%: %v", d.ID, n, sessions, even, got)
				}
			}
			t.Logf("%s: %v", pol, got)
		})
	}
}

// TestOldSealedValuesStillWork: values sealed before session ids (the key
// input alone) still route to their group on every node, and when it is
// gone they redistribute by the old input, the hash of the raw value.
func TestOldSealedValuesStillWork(t *testing.T) {
	kr := newFakeKeyring(t)
	for _, pol := range []string{"Cookie", "CustomHeader", "EnvelopeCookie", "EnvelopeHeader"} {
		t.Run(pol, func(t *testing.T) {
			var ds []*upstream.Destination
			for i := range 6 {
				ds = append(ds, dest("app-"+strconv.Itoa(i)))
			}
			c := cluster("c", ds...)
			p := mustNew(t, "c", enabled(pol, "K"), c, kr)
			sealed, err := kr.Seal(p.purpose, []byte("app-3"))
			if err != nil {
				t.Fatal(err)
			}
			v := sealed
			if p.policy.envelope() {
				v += ".backend-value"
			}
			r := requestWith(p, v)
			if d := p.Resolve(r, c, t0, nil); d.Outcome != Routed || len(d.Candidates) != 1 || d.Candidates[0].ID != "app-3" {
				t.Fatalf("old value: %v %v, want routed to app-3", d.Outcome, ids(d.Candidates))
			}
			c.Destination("app-3").SetActiveHealth(upstream.Unhealthy)
			d := p.ResolveClient(r, "192.0.2.7", c, t0, nil)
			if want := refRendezvous(v, c, t0); d.Outcome != FailedOpen || len(d.Candidates) != 1 || d.Candidates[0].ID != want {
				t.Fatalf("old value of a dead destination: %v %v, want failed_open to %s", d.Outcome, ids(d.Candidates), want)
			}
		})
	}
}

// TestSessionValuesCarryTheirID: a new session's sealed value is the
// session magic, an id and the key input; two sessions get two ids, and a
// broken session redistributes by its id, whatever the client address.
func TestSessionValuesCarryTheirID(t *testing.T) {
	kr := newFakeKeyring(t)
	var ds []*upstream.Destination
	for i := range 6 {
		ds = append(ds, dest("app-"+strconv.Itoa(i)))
	}
	c := cluster("c", ds...)
	p := mustNew(t, "c", enabled("CustomHeader", "K"), c, kr)
	sid := func(r *http.Request) uint64 {
		pt, err := kr.Open(p.purpose, r.Header.Get("K"))
		id, in, ok := splitSession(pt)
		if err != nil || !ok || string(in) != "app-1" {
			t.Fatalf("sealed %q (%v), want a session value for app-1", pt, err)
		}
		return id
	}
	r1, r2 := issueSession(t, p, c.Destination("app-1"), 1), issueSession(t, p, c.Destination("app-1"), 2)
	id1, id2 := sid(r1), sid(r2)
	if id1 == id2 {
		t.Fatalf("two sessions share the id %x", id1)
	}
	c.Destination("app-1").SetActiveHealth(upstream.Unhealthy)
	want := refRendezvousSeed(id1, c, t0)
	for _, client := range []string{"192.0.2.1", "198.51.100.2"} {
		if d := p.ResolveClient(r1, client, c, t0, nil); len(d.Candidates) != 1 || d.Candidates[0].ID != want {
			t.Fatalf("client %s: %v, want %s (by the session id)", client, ids(d.Candidates), want)
		}
	}
}

// TestRemoteHost: Resolve's client address is the host of RemoteAddr.
func TestRemoteHost(t *testing.T) {
	for _, tc := range []struct{ desc, addr, want string }{
		{"IPv4 with port", "192.0.2.1:5555", "192.0.2.1"},
		{"IPv6 with port", "[2001:db8::1]:443", "2001:db8::1"},
		{"no port", "192.0.2.1", "192.0.2.1"},
		{"empty", "", ""},
	} {
		r, _ := http.NewRequest(http.MethodGet, "/", nil)
		r.RemoteAddr = tc.addr
		if got := remoteHost(r); got != tc.want {
			t.Errorf("%s: remoteHost(%q) = %q, want %q", tc.desc, tc.addr, got, tc.want)
		}
	}
}

// TestReplacementIsTheRedistributionOfTheFailedDestination: a retry's
// Replacement for a routed session whose destination failed to connect is
// the destination Resolve redistributes the session to once that one is
// unhealthy, on every node, so the retry and later requests agree; it
// attaches the new key.
func TestReplacementIsTheRedistributionOfTheFailedDestination(t *testing.T) {
	repeatableSessionIDs(t)
	kr := newFakeKeyring(t)
	for _, pol := range []string{"Cookie", "EnvelopeHeader", "HashCookie", "ArrCookie"} {
		t.Run(pol, func(t *testing.T) {
			var ds []*upstream.Destination
			for i := range 6 {
				ds = append(ds, dest("app-"+strconv.Itoa(i)))
			}
			c := cluster("c", ds...)
			p := mustNew(t, "c", enabled(pol, "K"), c, kr)
			failed := c.Destination("app-4")
			for i := range 20 {
				r := issueSession(t, p, failed, i)
				client := "198.51.100." + strconv.Itoa(i)
				d := p.ResolveClient(r, client, c, t0, nil)
				if d.Outcome != Routed {
					t.Fatalf("session %d: %v, want routed", i, d.Outcome)
				}
				rep := p.Replacement(c, t0, d, failed, nil)
				failed.SetActiveHealth(upstream.Unhealthy)
				later := p.ResolveClient(r, client, c, t0, nil)
				failed.SetActiveHealth(upstream.Healthy)
				if rep.Outcome != FailedOpen || !rep.Attach || len(rep.Candidates) != 1 || len(later.Candidates) != 1 ||
					rep.Candidates[0] != later.Candidates[0] || rep.Candidates[0] == failed {
					t.Fatalf("session %d: replacement %v %v, later resolution %v", i, rep.Outcome, ids(rep.Candidates), ids(later.Candidates))
				}
			}
		})
	}
	if d := (*Provider)(nil).Replacement(nil, t0, Decision{Outcome: Routed}, nil, nil); d.Outcome != Routed {
		t.Fatalf("nil provider changed the decision: %v", d.Outcome)
	}
	strict := enabled("HashCookie", "K")
	strict.FailurePolicy, strict.FailureStatusCode = "Return503Error", 429
	c := cluster("c", dest("a"), dest("b"))
	p := mustNew(t, "c", strict, c, nil)
	d := p.Resolve(requestWith(p, refHashCookie("a")), c, t0, nil)
	if rep := p.Replacement(c, t0, d, c.Destination("a"), nil); rep.Outcome != FailedClosed || rep.Status != 429 || len(rep.Candidates) != 0 {
		t.Fatalf("Return503Error: replacement %v status %d %v, want failed_closed 429 without candidates", rep.Outcome, rep.Status, ids(rep.Candidates))
	}
}

// FuzzSplitSession: any opened plaintext parses without a panic; a session
// value is the magic, 8 id bytes and the rest, and anything else is a key
// input as it is.
func FuzzSplitSession(f *testing.F) {
	f.Add([]byte("app-1"))
	f.Add([]byte("\x00S12345678app-1"))
	f.Add([]byte("\x00S1234567"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, pt []byte) {
		sid, in, ok := splitSession(pt)
		switch {
		case ok && (len(in) != len(pt)-sessionHeader || binary.BigEndian.Uint64(pt[2:10]) != sid || string(pt[:2]) != sessionMagic):
			t.Fatalf("split %q into %x %q", pt, sid, in)
		case !ok && string(in) != string(pt):
			t.Fatalf("old value %q became %q", pt, in)
		}
	})
}
