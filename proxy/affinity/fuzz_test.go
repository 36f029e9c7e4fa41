package affinity

import (
	"net/http"
	"strings"
	"testing"

	"github.com/tether-proxy/tether/proxy/upstream"
)

// fuzzPolicy fuzzes one decoder with hostile request values: tampered,
// truncated, oversized, duplicated, foreign. Every input must end in a
// defined outcome (never a panic); for cookie policies the input is a whole
// Cookie header line, for header policies the header value.
func fuzzPolicy(f *testing.F, pol string) {
	kr := newFakeKeyring(f)
	c := cluster("c", dest("a"), dest("b", "AffinityKey", "g"), dest("c", "AffinityKey", "g"), dest("ü-节点"))
	p := mustNew(f, "c", enabled(pol, "K"), c, kr)
	other := mustNew(f, "c2", enabled(pol, "K"), cluster("c2", dest("a")), kr)
	valid := issueValue(f, p, c.Destination("b"))
	foreign := issueValue(f, other, other.cluster.Destination("a"))
	tampered := []byte(valid)
	tampered[len(tampered)/2] ^= 0x01
	line := func(v string) string {
		if p.policy.inHeader() {
			return v
		}
		return "x=1; K=" + v + "; y=2"
	}
	for _, s := range []string{
		line(valid), line(strings.ToUpper(valid)), line(strings.ToLower(valid)),
		line(string(tampered)), line(valid[:len(valid)/2]), line(valid[1:]),
		line(foreign), line(valid + "." + valid), line(`"` + valid + `"`),
		line(strings.Repeat("A", MaxKeyLength+1)), line(valid + strings.Repeat("x", MaxKeyLength)),
		line(""), line("."), line(".x"), line(`""`), line(`"`), line("ä.ö"), line("\x00\xff"),
		"K=" + valid + "; K=zz", "K=zz; K=" + valid, "K", "=;;=", ";", "K==", "K=" + valid + ";",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		r := &http.Request{Header: http.Header{}}
		if p.policy.inHeader() {
			r.Header["K"] = []string{in}
		} else {
			r.Header["Cookie"] = []string{in}
		}
		d := p.Resolve(r, c, t0, nil)
		switch d.Outcome {
		case NoSession, FailedOpen:
			if !d.Attach || d.Status != 0 {
				t.Fatalf("%v decision %+v", d.Outcome, d)
			}
		case Routed:
			if d.Attach || d.Status != 0 || len(d.Candidates) == 0 {
				t.Fatalf("routed decision %+v", d)
			}
			g := d.Candidates[0].AffinityKey
			for _, x := range d.Candidates {
				if x.AffinityKey != g {
					t.Fatalf("routed to several groups: %v", ids(d.Candidates))
				}
			}
		default:
			t.Fatalf("outcome %v with Redistribute", d.Outcome)
		}
		if len(d.Candidates) > 0 {
			out := r.Clone(r.Context())
			p.RewriteRequest(r, out, d.Candidates[0], d)
			if !p.policy.envelope() && !equalHeader(out.Header, r.Header) {
				t.Fatalf("non-envelope policy rewrote the request: %v", out.Header)
			}
			if p.policy.envelope() && !strings.Contains(in, ".") && !equalHeader(out.Header, r.Header) {
				t.Fatalf("a value that is no envelope was changed: %q -> %v", in, out.Header)
			}
		}
		if p.policy.envelope() {
			envelopeRoundTrip(t, p, c, in)
		}
	})
}

// envelopeRoundTrip: any backend value that survives the header syntax is
// wrapped on the way out and comes back to the backend byte for byte.
func envelopeRoundTrip(t *testing.T, p *Provider, c *upstream.Cluster, v string) {
	if v != trimOWS(v) || strings.ContainsAny(v, ";\r\n\x00") || len(v) > 1024 {
		return
	}
	if u, _ := unquote(v); u == "" {
		return
	}
	resp := &http.Response{Header: http.Header{}}
	if p.policy == envelopeHeader {
		resp.Header["K"] = []string{v}
	} else {
		resp.Header["Set-Cookie"] = []string{"K=" + v + "; Path=/"}
	}
	p.Affinitize(resp, c.Destination("a"), Decision{}, false)
	r := &http.Request{Header: http.Header{}}
	if p.policy == envelopeHeader {
		r.Header["K"] = resp.Header["K"]
	} else {
		sc := resp.Header["Set-Cookie"][0]
		r.Header["Cookie"] = []string{"z=0; " + sc[:strings.IndexByte(sc, ';')]}
	}
	d := p.Resolve(r, c, t0, nil)
	if d.Outcome != Routed || d.Candidates[0].ID != "a" {
		t.Fatalf("wrapped %q: outcome %v to %v", v, d.Outcome, ids(d.Candidates))
	}
	out := r.Clone(r.Context())
	p.RewriteRequest(r, out, d.Candidates[0], d)
	want := "z=0; K=" + v
	got := strings.Join(out.Header["Cookie"], "")
	if p.policy == envelopeHeader {
		want, got = v, strings.Join(out.Header["K"], "")
	}
	if got != want {
		t.Fatalf("backend value %q came back as %q", want, got)
	}
}

func equalHeader(a, b http.Header) bool {
	if len(a) != len(b) {
		return false
	}
	for k, av := range a {
		bv := b[k]
		if len(av) != len(bv) {
			return false
		}
		for i := range av {
			if av[i] != bv[i] {
				return false
			}
		}
	}
	return true
}

func FuzzResolveHashCookie(f *testing.F)     { fuzzPolicy(f, "HashCookie") }
func FuzzResolveArrCookie(f *testing.F)      { fuzzPolicy(f, "ArrCookie") }
func FuzzResolveCookie(f *testing.F)         { fuzzPolicy(f, "Cookie") }
func FuzzResolveCustomHeader(f *testing.F)   { fuzzPolicy(f, "CustomHeader") }
func FuzzResolveEnvelopeCookie(f *testing.F) { fuzzPolicy(f, "EnvelopeCookie") }
func FuzzResolveEnvelopeHeader(f *testing.F) { fuzzPolicy(f, "EnvelopeHeader") }
