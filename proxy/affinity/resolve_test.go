package affinity

import (
	"encoding/binary"
	"errors"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/cespare/xxhash/v2"

	"github.com/tether-proxy/tether/proxy/config"
	"github.com/tether-proxy/tether/proxy/upstream"
)

// refRendezvous is the expected redistribution target computed apart from
// the code under test: among key inputs with a destination that accepts new
// sessions, the highest XxHash64(BE64(XxHash64(old)) + input) wins (ties:
// smaller input). That is the seed of sealed values without a session id.
func refRendezvous(old string, c *upstream.Cluster, now time.Time) string {
	return refRendezvousSeed(xxhash.Sum64String(old), c, now)
}

// refHashSeed is the seed of the hash policies: XxHash64 of the raw value,
// a NUL and the client address.
func refHashSeed(raw, client string) uint64 { return xxhash.Sum64String(raw + "\x00" + client) }

// refRendezvousSeed: the highest XxHash64(BE64(seed) + input) wins.
func refRendezvousSeed(seed uint64, c *upstream.Cluster, now time.Time) string {
	best, bestScore := "", uint64(0)
	for _, d := range c.Destinations {
		if !d.AcceptsNew(now) {
			continue
		}
		var digest [8]byte
		binary.BigEndian.PutUint64(digest[:], seed)
		s := xxhash.Sum64(append(digest[:], d.AffinityKey...))
		if best == "" || s > bestScore || s == bestScore && d.AffinityKey < best {
			best, bestScore = d.AffinityKey, s
		}
	}
	return best
}

// TestResolutionRules checks the resolution rules (proxy/DESIGN.md,
// "Session affinity"), one case per rule.
func TestResolutionRules(t *testing.T) {
	type tc struct {
		desc    string
		failure string
		status  int
		cookie  string // the request's Cookie header, "" for none
		setup   func(c *upstream.Cluster)
		outcome Outcome
		cands   []string // nil: computed by refRendezvous
		attach  bool
		wantSt  int
	}
	key := refHashCookie
	cases := []tc{
		{desc: "rule 1: no key, every destination that accepts new sessions, key attached",
			setup: func(c *upstream.Cluster) {
				c.Destination("d").SetActiveHealth(upstream.Unhealthy)
				c.Destination("e").SetDraining(t0.Add(time.Hour))
			},
			outcome: NoSession, cands: []string{"a1", "a2", "b", "c"}, attach: true},
		{desc: "rule 1: an empty cookie value is no key", cookie: ".Aff=",
			outcome: NoSession, cands: []string{"a1", "a2", "b", "c", "d", "e"}, attach: true},
		{desc: "rule 2: valid key, its whole group, not attached again", cookie: ".Aff=" + key("grp-a"),
			outcome: Routed, cands: []string{"a1", "a2"}},
		{desc: "rule 2: valid key, only the group members still serving existing sessions", cookie: ".Aff=" + key("grp-a"),
			setup:   func(c *upstream.Cluster) { c.Destination("a1").MarkPassiveFailure(t0.Add(time.Minute)) },
			outcome: Routed, cands: []string{"a2"}},
		{desc: "rule 3: undecodable key, Redistribute: deterministic new destination, attached", cookie: ".Aff=not-hex!",
			outcome: FailedOpen, attach: true},
		{desc: "rule 3: unknown key (destination removed), Redistribute", cookie: ".Aff=" + key("gone"),
			outcome: FailedOpen, attach: true},
		{desc: "rule 3: group without an available destination, Redistribute", cookie: ".Aff=" + key("b"),
			setup:   func(c *upstream.Cluster) { c.Destination("b").SetActiveHealth(upstream.Unhealthy) },
			outcome: FailedOpen, attach: true},
		{desc: "rule 3: oversized key is a failure before any decoding", cookie: ".Aff=" + strings.Repeat("a", MaxKeyLength+1),
			outcome: FailedOpen, attach: true},
		{desc: "rule 3: Redistribute with no destination left: empty candidates (503)", cookie: ".Aff=" + key("gone"),
			setup: func(c *upstream.Cluster) {
				for _, d := range c.Destinations {
					d.SetActiveHealth(upstream.Unhealthy)
				}
			},
			outcome: FailedOpen, cands: []string{}, attach: true},
		{desc: "rule 3: Return503Error answers 503", failure: "Return503Error", cookie: ".Aff=" + key("gone"),
			outcome: FailedClosed, cands: []string{}, wantSt: 503},
		{desc: "rule 3: Return503Error answers FailureStatusCode", failure: "Return503Error", status: 429, cookie: ".Aff=zz",
			outcome: FailedClosed, cands: []string{}, wantSt: 429},
	}
	for _, tc := range cases {
		t.Run(tc.desc, func(t *testing.T) {
			c := cluster("c", dest("a1", "AffinityKey", "grp-a"), dest("a2", "AffinityKey", "grp-a"),
				dest("b"), dest("c"), dest("d"), dest("e"))
			if tc.setup != nil {
				tc.setup(c)
			}
			cfg := enabled("", ".Aff")
			cfg.FailurePolicy, cfg.FailureStatusCode = tc.failure, tc.status
			p := mustNew(t, "c", cfg, c, nil)
			r := request()
			if tc.cookie != "" {
				r = request("Cookie: other=1; " + tc.cookie + "; last=2")
			}
			d := p.Resolve(r, c, t0, make([]*upstream.Destination, 0, 8))
			want := tc.cands
			if want == nil {
				var raw string
				if i := strings.IndexByte(tc.cookie, '='); i >= 0 {
					raw = tc.cookie[i+1:]
				}
				g := refRendezvousSeed(refHashSeed(raw, ""), c, t0)
				for _, x := range c.Destinations {
					if x.AffinityKey == g && x.AcceptsNew(t0) {
						want = append(want, x.ID)
					}
				}
			}
			if d.Outcome != tc.outcome || d.Attach != tc.attach || d.Status != tc.wantSt || !reflect.DeepEqual(ids(d.Candidates), want) {
				t.Fatalf("got outcome=%v attach=%v status=%d candidates=%v; want outcome=%v attach=%v status=%d candidates=%v",
					d.Outcome, d.Attach, d.Status, ids(d.Candidates), tc.outcome, tc.attach, tc.wantSt, want)
			}
		})
	}
}

// TestOutcomeStats checks the Outcome (tether_affinity_requests_total's
// outcome label) for each case, per policy family.
func TestOutcomeStats(t *testing.T) {
	kr := newFakeKeyring(t)
	for _, pol := range []string{"HashCookie", "ArrCookie", "Cookie", "CustomHeader", "EnvelopeCookie", "EnvelopeHeader"} {
		for _, tc := range []struct {
			desc    string
			failure string
			value   func(valid string) string
			down    bool
			want    Outcome
			label   string
		}{
			{desc: "no key counts no_session", value: func(string) string { return "" }, want: NoSession, label: "no_session"},
			{desc: "valid key counts routed", value: func(v string) string { return v }, want: Routed, label: "routed"},
			{desc: "invalid key with Redistribute counts failed_open", value: func(v string) string { return "x" + v }, want: FailedOpen, label: "failed_open"},
			{desc: "unavailable destination with Redistribute counts failed_open", value: func(v string) string { return v }, down: true, want: FailedOpen, label: "failed_open"},
			{desc: "invalid key with Return503Error counts failed_closed", failure: "Return503Error", value: func(v string) string { return "x" + v }, want: FailedClosed, label: "failed_closed"},
		} {
			t.Run(pol+"/"+tc.desc, func(t *testing.T) {
				c := cluster("c", dest("a"), dest("b"))
				cfg := enabled(pol, "K")
				cfg.FailurePolicy = tc.failure
				p := mustNew(t, "c", cfg, c, kr)
				valid := issueValue(t, p, c.Destination("a"))
				if tc.down {
					c.Destination("a").SetActiveHealth(upstream.Unhealthy)
				}
				r := request()
				if v := tc.value(valid); v != "" {
					r = requestWith(p, v)
				}
				d := p.Resolve(r, c, t0, nil)
				if d.Outcome != tc.want || d.Outcome.String() != tc.label {
					t.Fatalf("outcome %v (%s), want %v (%s)", d.Outcome, d.Outcome, tc.want, tc.label)
				}
			})
		}
	}
}

// issueValue is the value a client holds after dest answered a new session
// of p (for envelopes: the wrapped backend value "sess-1").
func issueValue(t testing.TB, p *Provider, dest *upstream.Destination) string {
	t.Helper()
	resp := &http.Response{Header: http.Header{}}
	switch p.policy {
	case envelopeCookie:
		resp.Header.Add("Set-Cookie", p.name+"=sess-1; Path=/")
	case envelopeHeader:
		resp.Header.Set(p.name, "sess-1")
	}
	p.Affinitize(resp, dest, Decision{Outcome: NoSession, Attach: true}, false)
	if p.policy.inHeader() {
		return resp.Header.Get(p.name)
	}
	return setCookieValue(t, resp.Header, p.name)
}

// requestWith is a request carrying v the way p reads it.
func requestWith(p *Provider, v string) *http.Request {
	if p.policy.inHeader() {
		return request(p.name + ": " + v)
	}
	return request("Cookie: " + p.name + "=" + v)
}

func TestRedistributionIsDeterministicAcrossNodes(t *testing.T) {
	// Two nodes (two providers over their own cluster views) see the same
	// broken key: both must pick the same replacement, the one rendezvous
	// hashing names.
	mk := func() (*Provider, *upstream.Cluster) {
		var ds []*upstream.Destination
		for _, id := range []string{"n1", "n2", "n3", "n4", "n5", "n6", "n7", "n8"} {
			ds = append(ds, dest(id))
		}
		c := cluster("c", ds...)
		c.Destination("n3").SetActiveHealth(upstream.Unhealthy)
		return mustNew(t, "c", enabled("HashCookie", "K"), c, nil), c
	}
	p1, c1 := mk()
	p2, c2 := mk()
	picked := map[string]bool{}
	for i := 0; i < 64; i++ {
		old := refHashCookie("gone-" + string(rune('a'+i%26)) + strings.Repeat("x", i/26))
		d1 := p1.Resolve(request("Cookie: K="+old), c1, t0, nil)
		d2 := p2.Resolve(request("Cookie: K="+old), c2, t0, nil)
		want := refRendezvousSeed(refHashSeed(old, ""), c1, t0)
		if d1.Outcome != FailedOpen || len(d1.Candidates) != 1 || d1.Candidates[0].ID != want ||
			len(d2.Candidates) != 1 || d2.Candidates[0].ID != want {
			t.Fatalf("old key %s: node1 %v node2 %v, want [%s]", old, ids(d1.Candidates), ids(d2.Candidates), want)
		}
		picked[want] = true
	}
	if len(picked) < 4 {
		t.Fatalf("redistribution spread over only %d destinations: %v", len(picked), picked)
	}
	if picked["n3"] {
		t.Fatal("redistributed to an unhealthy destination")
	}
}

func TestGroupsShareOneKey(t *testing.T) {
	// Metadata.AffinityKey: destinations with the same value form a group
	// that shares one key; the key attached for any member selects them all.
	for _, pol := range []string{"HashCookie", "ArrCookie", "Cookie", "CustomHeader"} {
		t.Run(pol, func(t *testing.T) {
			kr := newFakeKeyring(t)
			c := cluster("c", dest("x1", "AffinityKey", "rack-1"), dest("x2", "AffinityKey", "rack-1"), dest("y"))
			p := mustNew(t, "c", enabled(pol, "K"), c, kr)
			v := issueValue(t, p, c.Destination("x2"))
			d := p.Resolve(requestWith(p, v), c, t0, nil)
			if d.Outcome != Routed || !reflect.DeepEqual(ids(d.Candidates), []string{"x1", "x2"}) {
				t.Fatalf("outcome %v candidates %v, want routed [x1 x2]", d.Outcome, ids(d.Candidates))
			}
			if !p.policy.sealed() && v != hashKey(p.policy, "rack-1") {
				t.Fatalf("group key %q is not the hash of the AffinityKey", v)
			}
		})
	}
}

func TestKeyAttachedOnlyOnFirstResponseAndAfterRedistribution(t *testing.T) {
	c := cluster("c", dest("a"), dest("b"))
	p := mustNew(t, "c", enabled("HashCookie", "K"), c, nil)
	for _, tc := range []struct {
		desc   string
		cookie string
		want   bool
	}{
		{"first response of a session carries the key", "", true},
		{"an affinitized response does not carry it again", "K=" + refHashCookie("a"), false},
		{"a redistributed response carries the new key", "K=" + refHashCookie("gone"), true},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			r := request()
			if tc.cookie != "" {
				r = request("Cookie: " + tc.cookie)
			}
			d := p.Resolve(r, c, t0, nil)
			resp := &http.Response{Header: http.Header{}}
			p.Affinitize(resp, d.Candidates[0], d, false)
			if got := len(resp.Header["Set-Cookie"]) == 1; got != tc.want {
				t.Fatalf("Set-Cookie %q, want present=%v", resp.Header["Set-Cookie"], tc.want)
			}
			if tc.want && setCookieValue(t, resp.Header, "K") != refHashCookie(d.Candidates[0].ID) {
				t.Fatalf("attached key %q is not the chosen destination's", resp.Header["Set-Cookie"])
			}
		})
	}
}

func TestCustomHeaderAttachesResponseHeader(t *testing.T) {
	kr := newFakeKeyring(t)
	c := cluster("c", dest("a"))
	p := mustNew(t, "c", enabled("CustomHeader", "x-affinity"), c, kr)
	resp := &http.Response{Header: http.Header{}}
	p.Affinitize(resp, c.Destination("a"), Decision{Attach: true}, false)
	v := resp.Header.Get("X-Affinity")
	if v == "" || len(resp.Header["Set-Cookie"]) != 0 {
		t.Fatalf("headers %v: want X-Affinity and no cookie", resp.Header)
	}
	if d := p.Resolve(request("X-Affinity: "+v), c, t0, nil); d.Outcome != Routed {
		t.Fatalf("outcome %v, want routed", d.Outcome)
	}
}

func TestKeyringSealFailureAttachesNothing(t *testing.T) {
	kr := funcKeyring{
		seal: func(_, _ []byte) (string, error) { return "", errors.New("no active key") },
		open: func(_ []byte, _ string) ([]byte, error) { return nil, errors.New("no key") },
	}
	c := cluster("c", dest("a"))
	p := mustNew(t, "c", enabled("Cookie", "K"), c, kr)
	resp := &http.Response{Header: http.Header{}}
	p.Affinitize(resp, c.Destination("a"), Decision{Attach: true}, false)
	if len(resp.Header) != 0 {
		t.Fatalf("headers %v, want none", resp.Header)
	}
}

func TestDuplicateCookiesFirstWins(t *testing.T) {
	c := cluster("c", dest("a"), dest("b"))
	p := mustNew(t, "c", enabled("HashCookie", "K"), c, nil)
	for _, tc := range []struct {
		desc  string
		lines []string
		want  string
	}{
		{"first of two in one header line", []string{"Cookie: K=" + refHashCookie("b") + "; K=" + refHashCookie("a")}, "b"},
		{"first of two header lines", []string{"Cookie: x=1; K=" + refHashCookie("a"), "Cookie: K=" + refHashCookie("b")}, "a"},
		{"quoted value as net/http accepts it", []string{`Cookie: K="` + refHashCookie("b") + `"`}, "b"},
		{"uppercase hex of a HashCookie still matches", []string{"Cookie: K=" + strings.ToUpper(refHashCookie("a"))}, "a"},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			d := p.Resolve(request(tc.lines...), c, t0, nil)
			if d.Outcome != Routed || len(d.Candidates) != 1 || d.Candidates[0].ID != tc.want {
				t.Fatalf("outcome %v candidates %v, want routed [%s]", d.Outcome, ids(d.Candidates), tc.want)
			}
		})
	}
}

func TestNewDisabledReturnsNil(t *testing.T) {
	// The per-route override {"Enabled": false} disables affinity: New
	// returns nil, and a nil Provider resolves like no affinity at all.
	c := cluster("c", dest("a"), dest("b"))
	p, err := New("c", config.SessionAffinity{Enabled: false, Policy: "bogus"}, c, Options{})
	if p != nil || err != nil {
		t.Fatalf("New = %v, %v; want nil, nil", p, err)
	}
	d := p.Resolve(request("Cookie: K=whatever"), c, t0, nil)
	if d.Outcome != NoSession || len(d.Candidates) != 2 || d.Attach {
		t.Fatalf("nil provider decision %+v", d)
	}
	resp := &http.Response{Header: http.Header{}}
	p.Affinitize(resp, c.Destination("a"), Decision{Attach: true}, true)
	p.RewriteRequest(request(), request(), c.Destination("a"), d)
	if len(resp.Header) != 0 {
		t.Fatalf("nil provider changed the response: %v", resp.Header)
	}
}

func TestNewRejectsBadConfigNamingTheField(t *testing.T) {
	for _, tc := range []struct {
		desc string
		cfg  config.SessionAffinity
		kr   Keyring
		want []string
	}{
		{"AffinityKeyName is required when Enabled", config.SessionAffinity{Enabled: true}, nil,
			[]string{"SessionAffinity.AffinityKeyName: required when Enabled"}},
		{"unknown Policy", config.SessionAffinity{Enabled: true, Policy: "Sticky", AffinityKeyName: "K"}, nil,
			[]string{"SessionAffinity.Policy: unknown policy \"Sticky\""}},
		{"encrypted policies need a keyring", config.SessionAffinity{Enabled: true, Policy: "Cookie", AffinityKeyName: "K"}, nil,
			[]string{"SessionAffinity.Policy: policy Cookie needs the cluster keyring"}},
		{"unknown FailurePolicy", config.SessionAffinity{Enabled: true, FailurePolicy: "Retry", AffinityKeyName: "K"}, nil,
			[]string{"SessionAffinity.FailurePolicy: unknown failure policy \"Retry\""}},
		{"FailureStatusCode must be a status", config.SessionAffinity{Enabled: true, FailureStatusCode: 1000, AffinityKeyName: "K"}, nil,
			[]string{"SessionAffinity.FailureStatusCode: 1000"}},
		{"AffinityKeyName must be a token", config.SessionAffinity{Enabled: true, AffinityKeyName: "a b;"}, nil,
			[]string{"SessionAffinity.AffinityKeyName: \"a b;\" is not a valid cookie name"}},
		{"cookie settings are checked, every error listed", config.SessionAffinity{Enabled: true, AffinityKeyName: "K",
			Cookie: config.SessionAffinityCookie{Domain: "a;b", Path: "/\n", SameSite: "Loose", SecurePolicy: "Sometimes",
				MaxAge: config.Duration{Duration: -time.Second}, Expiration: config.Duration{Duration: -time.Second}}}, nil,
			[]string{"SessionAffinity.Cookie.Domain:", "SessionAffinity.Cookie.Path:", "SessionAffinity.Cookie.SameSite:",
				"SessionAffinity.Cookie.SecurePolicy:", "SessionAffinity.Cookie.MaxAge:", "SessionAffinity.Cookie.Expiration:"}},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			p, err := New("c", tc.cfg, cluster("c", dest("a")), Options{Keyring: tc.kr})
			if err == nil || p != nil {
				t.Fatalf("New = %v, %v; want an error", p, err)
			}
			var fe config.Errors
			if !errors.As(err, &fe) || len(fe) != len(tc.want) {
				t.Fatalf("error %v: want %d field errors", err, len(tc.want))
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Fatalf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

func TestResolveAllocatesNothingForHashPolicies(t *testing.T) {
	for _, pol := range []string{"HashCookie", "ArrCookie"} {
		t.Run(pol, func(t *testing.T) {
			c := cluster("c", dest("a"), dest("b"), dest("c"))
			p := mustNew(t, "c", enabled(pol, "K"), c, nil)
			buf := make([]*upstream.Destination, 0, 8)
			for _, tc := range []struct{ desc, cookie string }{
				{"routed", "K=" + hashKey(p.policy, "b")},
				{"failed open", "K=" + hashKey(p.policy, "gone")},
				{"no session", "other=1"},
			} {
				r := request("Cookie: x=1; " + tc.cookie)
				if n := testing.AllocsPerRun(100, func() { p.Resolve(r, c, t0, buf[:0]) }); n != 0 {
					t.Fatalf("%s: %v allocs per Resolve, want 0", tc.desc, n)
				}
			}
		})
	}
}

func TestResolveOnAnotherClusterSnapshotStillMatches(t *testing.T) {
	// The data path builds a Provider per cluster snapshot; should it pass
	// another snapshot, lookup must follow that snapshot, not the old table.
	old := cluster("c", dest("a"), dest("b"))
	p := mustNew(t, "c", enabled("HashCookie", "K"), old, nil)
	next := cluster("c", dest("a"), dest("b"), dest("new"))
	d := p.Resolve(request("Cookie: K="+refHashCookie("new")), next, t0, nil)
	if d.Outcome != Routed || len(d.Candidates) != 1 || d.Candidates[0] != next.Destination("new") {
		t.Fatalf("outcome %v candidates %v, want routed [new]", d.Outcome, ids(d.Candidates))
	}
}
