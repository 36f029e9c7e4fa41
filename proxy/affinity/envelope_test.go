package affinity

import (
	"net/http"
	"reflect"
	"strings"
	"testing"

	"github.com/tether-proxy/tether/proxy/upstream"
)

// proxyOnce plays the data path for one request: resolve, pick the first
// candidate (or want, when given), rewrite the outgoing request; it returns
// the decision, the chosen destination and the outgoing request.
func proxyOnce(t *testing.T, p *Provider, c *upstream.Cluster, in *http.Request) (Decision, *upstream.Destination, *http.Request) {
	t.Helper()
	d := p.Resolve(in, c, t0, nil)
	if len(d.Candidates) == 0 {
		return d, nil, nil
	}
	out := in.Clone(in.Context())
	p.RewriteRequest(in, out, d.Candidates[0], d)
	return d, d.Candidates[0], out
}

func TestEnvelopeCookieRoundTrip(t *testing.T) {
	kr := newFakeKeyring(t)
	c := cluster("c", dest("a"), dest("b"))
	p := mustNew(t, "c", enabled("EnvelopeCookie", "JSESSIONID"), c, kr)

	for _, tc := range []struct {
		desc    string
		backend string // the backend's own Set-Cookie line
		value   string // its value as the backend must see it back
	}{
		{"plain value, other attributes kept", "JSESSIONID=8D1F0C; Path=/app; HttpOnly; Secure; SameSite=Lax", "8D1F0C"},
		{"value with dots (Tomcat jvmRoute) kept verbatim", "JSESSIONID=8D1F0C.worker1; Path=/", "8D1F0C.worker1"},
		{"quoted value", `JSESSIONID="q.v"; Path=/`, `"q.v"`},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			// First request: no session; the backend sets its cookie.
			d, b, _ := proxyOnce(t, p, c, request("Cookie: other=1"))
			if d.Outcome != NoSession {
				t.Fatalf("first request outcome %v", d.Outcome)
			}
			resp := &http.Response{Header: http.Header{}}
			resp.Header.Add("Set-Cookie", "theme=dark; Path=/")
			resp.Header.Add("Set-Cookie", tc.backend)
			p.Affinitize(resp, b, d, false)
			lines := resp.Header["Set-Cookie"]
			if len(lines) != 2 || lines[0] != "theme=dark; Path=/" {
				t.Fatalf("Set-Cookie lines %q: another cookie changed or one was added", lines)
			}
			wrapped := lines[1]
			attrs := tc.backend[strings.IndexByte(tc.backend, ';'):]
			if !strings.HasSuffix(wrapped, attrs) {
				t.Fatalf("wrapped %q lost the attributes %q", wrapped, attrs)
			}
			hc, err := http.ParseSetCookie(wrapped)
			if err != nil {
				t.Fatal(err)
			}
			inner := strings.Trim(tc.value, `"`)
			if sealed, rest, ok := strings.Cut(hc.Value, "."); !ok || rest != inner || strings.ContainsAny(sealed, "+/=") {
				t.Fatalf("wrapped value %q is not <sealed>.<%s>", hc.Value, inner)
			}

			// Next request carries the envelope among other cookies: it routes
			// to b, and b sees exactly its own value, every other byte unchanged.
			envelope := wrapped[len("JSESSIONID="):strings.IndexByte(wrapped, ';')]
			in := request("Cookie: a=1; JSESSIONID=" + envelope + "; z=2")
			d, got, out := proxyOnce(t, p, c, in)
			if d.Outcome != Routed || got != b {
				t.Fatalf("outcome %v to %v, want routed to %s", d.Outcome, got, b.ID)
			}
			if want := []string{"a=1; JSESSIONID=" + tc.value + "; z=2"}; !reflect.DeepEqual(out.Header["Cookie"], want) {
				t.Fatalf("backend sees Cookie %q, want %q", out.Header["Cookie"], want)
			}
			if in.Header.Get("Cookie") != "a=1; JSESSIONID="+envelope+"; z=2" {
				t.Fatal("RewriteRequest changed the client's request")
			}
		})
	}
}

func TestEnvelopeHeaderRoundTrip(t *testing.T) {
	kr := newFakeKeyring(t)
	c := cluster("c", dest("a"), dest("b"))
	p := mustNew(t, "c", enabled("EnvelopeHeader", "session-id"), c, kr)
	resp := &http.Response{Header: http.Header{}}
	resp.Header.Set("Session-Id", "abc.def")
	resp.Header.Set("X-Other", "1")
	p.Affinitize(resp, c.Destination("b"), Decision{}, false)
	w := resp.Header.Get("Session-Id")
	if !strings.HasSuffix(w, ".abc.def") || resp.Header.Get("X-Other") != "1" || len(resp.Header) != 2 {
		t.Fatalf("response headers %v", resp.Header)
	}
	d, got, out := proxyOnce(t, p, c, request("Session-Id: "+w, "X-Other: 1"))
	if d.Outcome != Routed || got.ID != "b" {
		t.Fatalf("outcome %v to %v, want routed to b", d.Outcome, got)
	}
	if out.Header.Get("Session-Id") != "abc.def" || out.Header.Get("X-Other") != "1" {
		t.Fatalf("backend sees %v", out.Header)
	}
}

func TestEnvelopeAddsNothingWhenBackendSetsNothing(t *testing.T) {
	kr := newFakeKeyring(t)
	c := cluster("c", dest("a"))
	for _, pol := range []string{"EnvelopeCookie", "EnvelopeHeader"} {
		t.Run(pol, func(t *testing.T) {
			p := mustNew(t, "c", enabled(pol, "Sess"), c, kr)
			for _, tc := range []struct {
				desc string
				hdr  http.Header
			}{
				{"no session value in the response", http.Header{"Set-Cookie": {"other=1"}, "X-Y": {"z"}}},
				{"backend clears its session (empty value)", http.Header{"Set-Cookie": {"Sess=; Max-Age=0"}, "Sess": {""}}},
			} {
				t.Run(tc.desc, func(t *testing.T) {
					before := tc.hdr.Clone()
					resp := &http.Response{Header: tc.hdr}
					// Attach is irrelevant for envelopes: even a new session adds nothing.
					p.Affinitize(resp, c.Destination("a"), Decision{Outcome: NoSession, Attach: true}, true)
					if !reflect.DeepEqual(resp.Header, before) {
						t.Fatalf("headers %v, want unchanged %v", resp.Header, before)
					}
				})
			}
		})
	}
}

func TestEnvelopeWrapsWheneverBackendSetsValue(t *testing.T) {
	// Also on an affinitized response (Attach false): the backend may have
	// rotated its session id.
	kr := newFakeKeyring(t)
	c := cluster("c", dest("a"))
	p := mustNew(t, "c", enabled("EnvelopeCookie", "SID"), c, kr)
	resp := &http.Response{Header: http.Header{"Set-Cookie": {"SID=new1; Path=/"}}}
	p.Affinitize(resp, c.Destination("a"), Decision{Outcome: Routed}, false)
	if v := resp.Header.Get("Set-Cookie"); !strings.HasSuffix(v, ".new1; Path=/") || strings.HasPrefix(v, "SID=new1") {
		t.Fatalf("Set-Cookie %q not wrapped", v)
	}
}

// TestEnvelopeForeignValues: a value that is not a tether envelope of this
// cluster (a raw backend value, e.g. from before envelopes were enabled; a
// tampered or foreign envelope) is an affinity failure, and with
// Redistribute it reaches the backend exactly as the client sent it: tether
// only ever strips what it authenticates as its own wrapping.
func TestEnvelopeForeignValues(t *testing.T) {
	kr := newFakeKeyring(t)
	c := cluster("c", dest("a"), dest("b"))
	p := mustNew(t, "c", enabled("EnvelopeCookie", "SID"), c, kr)
	other := mustNew(t, "c2", enabled("EnvelopeCookie", "SID"), cluster("c2", dest("a"), dest("b")), kr)
	foreign := issueValue(t, other, other.cluster.Destination("a"))
	valid := issueValue(t, p, c.Destination("a"))
	tampered := []byte(valid)
	tampered[3] ^= 1
	for _, tc := range []struct {
		desc, value string
	}{
		{"raw backend value without a dot", "8D1F0C"},
		{"raw backend value with a dot", "8D1F0C.worker1"},
		{"tampered envelope", string(tampered)},
		{"envelope of another cluster", foreign},
		{"truncated envelope", valid[:10]},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			line := "x=1; SID=" + tc.value + "; y=2"
			d, _, out := proxyOnce(t, p, c, request("Cookie: "+line))
			if d.Outcome != FailedOpen || !d.Attach {
				t.Fatalf("outcome %v attach %v, want failed_open, attach", d.Outcome, d.Attach)
			}
			if got := out.Header["Cookie"]; !reflect.DeepEqual(got, []string{line}) {
				t.Fatalf("backend sees %q, want %q", got, line)
			}
		})
	}
	t.Run("Return503Error refuses it", func(t *testing.T) {
		cfg := enabled("EnvelopeCookie", "SID")
		cfg.FailurePolicy = "Return503Error"
		p := mustNew(t, "c", cfg, c, kr)
		if d := p.Resolve(request("Cookie: SID=8D1F0C"), c, t0, nil); d.Outcome != FailedClosed || d.Status != 503 {
			t.Fatalf("decision %+v", d)
		}
	})
}

func TestEnvelopeRedistributedSessionStillUnwrapped(t *testing.T) {
	// A valid envelope whose destination is gone is redistributed, and the
	// backend value is still unwrapped (a shared session store can pick it up).
	kr := newFakeKeyring(t)
	c := cluster("c", dest("a"), dest("b"))
	p := mustNew(t, "c", enabled("EnvelopeCookie", "SID"), c, kr)
	v := issueValue(t, p, c.Destination("a"))
	c.Destination("a").SetActiveHealth(upstream.Unhealthy)
	d, got, out := proxyOnce(t, p, c, request("Cookie: SID="+v+"; SID=other"))
	if d.Outcome != FailedOpen || got.ID != "b" {
		t.Fatalf("outcome %v to %v", d.Outcome, got)
	}
	if want := []string{"SID=sess-1; SID=other"}; !reflect.DeepEqual(out.Header["Cookie"], want) {
		t.Fatalf("backend sees %q, want %q", out.Header["Cookie"], want)
	}
}
