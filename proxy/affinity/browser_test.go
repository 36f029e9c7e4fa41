package affinity_test

import (
	"net/http"
	"net/url"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/tether-proxy/tether/keyring"
	"github.com/tether-proxy/tether/proxy/affinity"
	"github.com/tether-proxy/tether/proxy/config"
	"github.com/tether-proxy/tether/proxy/upstream"
)

// TestCookieRulesBrowsersAccept: the attributes an affinity cookie must
// carry for browsers to keep it are sent whatever the config says.
func TestCookieRulesBrowsersAccept(t *testing.T) {
	cases := []struct {
		desc    string
		name    string
		cookie  config.SessionAffinityCookie
		https   bool
		want    []string // attributes the Set-Cookie line must have
		notWant []string // and must not
	}{
		{desc: "__Host- forces Secure, Path=/ and no Domain", name: "__Host-aff",
			cookie: config.SessionAffinityCookie{Domain: "example.com", Path: "/app", SecurePolicy: "None"},
			want:   []string{"; path=/", "; secure"}, notWant: []string{"domain=", "path=/app"}},
		{desc: "__Host- matches case-insensitively", name: "__HOST-aff",
			cookie: config.SessionAffinityCookie{Domain: "example.com", SecurePolicy: "SameAsRequest"},
			want:   []string{"; secure"}, notWant: []string{"domain="}},
		{desc: "__Secure- forces Secure, also on plain HTTP", name: "__Secure-aff",
			cookie: config.SessionAffinityCookie{Domain: "example.com", Path: "/app", SecurePolicy: "None"},
			want:   []string{"; secure", "; domain=example.com", "; path=/app"}},
		{desc: "SameSite=None with SecurePolicy None gets Secure on HTTPS", name: "aff",
			cookie: config.SessionAffinityCookie{SameSite: "None", SecurePolicy: "None"}, https: true,
			want: []string{"; secure", "; samesite=none"}},
		{desc: "SameSite=None with SecurePolicy None stays without Secure on HTTP", name: "aff",
			cookie: config.SessionAffinityCookie{SameSite: "None", SecurePolicy: "None"},
			want:   []string{"; samesite=none"}, notWant: []string{"secure"}},
		{desc: "an ordinary name keeps SecurePolicy None", name: "aff",
			cookie: config.SessionAffinityCookie{SameSite: "Lax", SecurePolicy: "None"}, https: true,
			notWant: []string{"secure"}},
	}
	d := upstream.NewDestination("d1", &url.URL{Scheme: "http", Host: "127.0.0.1:1"}, nil, "", nil)
	c := upstream.NewCluster("c", []*upstream.Destination{d})
	for _, tc := range cases {
		t.Run(tc.desc, func(t *testing.T) {
			p, err := affinity.New("c", config.SessionAffinity{Enabled: true, Policy: "HashCookie", AffinityKeyName: tc.name, Cookie: tc.cookie}, c, affinity.Options{})
			if err != nil {
				t.Fatal(err)
			}
			resp := &http.Response{Header: http.Header{}}
			p.Affinitize(resp, d, affinity.Decision{Attach: true}, tc.https)
			line := resp.Header.Get("Set-Cookie")
			if !strings.HasPrefix(line, tc.name+"=") {
				t.Fatalf("Set-Cookie %q", line)
			}
			for _, w := range tc.want {
				if !strings.Contains(line, w) {
					t.Errorf("Set-Cookie %q lacks %q", line, w)
				}
			}
			for _, w := range tc.notWant {
				if strings.Contains(line, w) {
					t.Errorf("Set-Cookie %q has %q", line, w)
				}
			}
		})
	}
}

// TestUnopenableEnvelopeReachesBackendAsNothing: an envelope whose key is
// revoked or unknown is left out of the outgoing request; values that are
// not tether's go through as sent.
func TestUnopenableEnvelopeReachesBackendAsNothing(t *testing.T) {
	now := time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	newRing := func() (*keyring.Ring, keyring.Key) {
		r := keyring.NewRing(keyring.Options{Now: clock})
		k, err := keyring.GenerateKey(now, 0, 90*24*time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		if err := r.Install(k); err != nil {
			t.Fatal(err)
		}
		return r, k
	}
	d := upstream.NewDestination("d1", &url.URL{Scheme: "http", Host: "127.0.0.1:1"}, nil, "", nil)
	c := upstream.NewCluster("c", []*upstream.Destination{d})
	provider := func(ring *keyring.Ring, policy string) *affinity.Provider {
		p, err := affinity.New("c", config.SessionAffinity{Enabled: true, Policy: policy, AffinityKeyName: "JSESSIONID"}, c,
			affinity.Options{Keyring: ring, Now: clock})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	// wrap has p wrap the backend's value "abc" and returns the envelope.
	wrap := func(p *affinity.Provider, policy string) string {
		resp := &http.Response{Header: http.Header{}}
		if policy == "EnvelopeHeader" {
			resp.Header.Set("Jsessionid", "abc")
		} else {
			resp.Header.Set("Set-Cookie", "JSESSIONID=abc; Path=/")
		}
		p.Affinitize(resp, d, affinity.Decision{}, false)
		if policy == "EnvelopeHeader" {
			return resp.Header.Get("Jsessionid")
		}
		v := strings.TrimPrefix(resp.Header.Get("Set-Cookie"), "JSESSIONID=")
		return v[:strings.IndexByte(v, ';')]
	}

	ring, key := newRing()
	cookies, headers := provider(ring, "EnvelopeCookie"), provider(ring, "EnvelopeHeader")
	revokedCookie, revokedHeader := wrap(cookies, "EnvelopeCookie"), wrap(headers, "EnvelopeHeader")
	other, _ := newRing()
	unknownCookie := wrap(provider(other, "EnvelopeCookie"), "EnvelopeCookie")
	next, err := keyring.GenerateKey(now, 0, 90*24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if err := ring.Install(next); err != nil {
		t.Fatal(err)
	}
	if err := ring.Revoke(key.ID); err != nil {
		t.Fatal(err)
	}
	fresh := wrap(cookies, "EnvelopeCookie") // sealed with the new key
	tampered := fresh[:len(fresh)-10] + "AAAAAA" + fresh[len(fresh)-4:]

	cases := []struct {
		desc   string
		p      *affinity.Provider
		header string   // header name sent
		sent   []string // its values
		want   []string // what the backend gets; nil: no such header
	}{
		{"revoked envelope among other cookies is left out", cookies, "Cookie",
			[]string{"a=1; JSESSIONID=" + revokedCookie + "; z=2"}, []string{"a=1; z=2"}},
		{"revoked envelope first in the line", cookies, "Cookie",
			[]string{"JSESSIONID=" + revokedCookie + "; z=2"}, []string{"z=2"}},
		{"revoked envelope last in the line", cookies, "Cookie",
			[]string{"a=1;JSESSIONID=" + revokedCookie}, []string{"a=1"}},
		{"a line of only the revoked envelope goes, the other line stays", cookies, "Cookie",
			[]string{"JSESSIONID=" + revokedCookie, "b=2"}, []string{"b=2"}},
		{"the only cookie: no Cookie header at all", cookies, "Cookie",
			[]string{"JSESSIONID=" + revokedCookie}, nil},
		{"envelope of an unknown key is left out", cookies, "Cookie",
			[]string{"a=1; JSESSIONID=" + unknownCookie}, []string{"a=1"}},
		{"revoked envelope header is left out", headers, "Jsessionid",
			[]string{revokedHeader}, nil},
		{"a raw backend value goes through as sent", cookies, "Cookie",
			[]string{"a=1; JSESSIONID=raw.value"}, []string{"a=1; JSESSIONID=raw.value"}},
		{"a tampered envelope goes through as sent", cookies, "Cookie",
			[]string{"JSESSIONID=" + tampered}, []string{"JSESSIONID=" + tampered}},
	}
	for _, tc := range cases {
		t.Run(tc.desc, func(t *testing.T) {
			in, _ := http.NewRequest(http.MethodGet, "http://example.test/", nil)
			in.Header[tc.header] = tc.sent
			dec := tc.p.Resolve(in, c, now, nil)
			if dec.Outcome != affinity.FailedOpen {
				t.Fatalf("outcome %v, want failed_open", dec.Outcome)
			}
			out := in.Clone(in.Context())
			tc.p.RewriteRequest(in, out, d, dec)
			if got := out.Header[tc.header]; !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("backend gets %s %q, want %q", tc.header, got, tc.want)
			}
			if !reflect.DeepEqual(in.Header[tc.header], tc.sent) {
				t.Fatal("the client's request changed")
			}
		})
	}
}
