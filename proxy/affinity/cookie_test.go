package affinity

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tether-proxy/tether/proxy/config"
)

// TestCookieSettings checks each SessionAffinity.Cookie setting on the
// emitted Set-Cookie header (ASP.NET's attribute spelling and order).
func TestCookieSettings(t *testing.T) {
	yes, no := true, false
	val := refHashCookie("a")
	for _, tc := range []struct {
		desc   string
		cookie config.SessionAffinityCookie
		secure bool // the request came over HTTPS
		want   string
	}{
		{desc: "defaults: Path /, HttpOnly, no SameSite, not Secure over HTTP",
			want: "K=" + val + "; path=/; httponly"},
		{desc: "Domain", cookie: config.SessionAffinityCookie{Domain: "example.com"},
			want: "K=" + val + "; domain=example.com; path=/; httponly"},
		{desc: "Path", cookie: config.SessionAffinityCookie{Path: "/app"},
			want: "K=" + val + "; path=/app; httponly"},
		{desc: "Expiration sets Expires to now + Expiration", cookie: config.SessionAffinityCookie{Expiration: config.Duration{Duration: 3 * time.Hour}},
			want: "K=" + val + "; expires=Mon, 30 Nov 2026 15:00:00 GMT; path=/; httponly"},
		{desc: "MaxAge sets Max-Age in seconds", cookie: config.SessionAffinityCookie{MaxAge: config.Duration{Duration: 24 * time.Hour}},
			want: "K=" + val + "; max-age=86400; path=/; httponly"},
		{desc: "HttpOnly false drops the attribute", cookie: config.SessionAffinityCookie{HttpOnly: &no},
			want: "K=" + val + "; path=/"},
		{desc: "HttpOnly true", cookie: config.SessionAffinityCookie{HttpOnly: &yes},
			want: "K=" + val + "; path=/; httponly"},
		{desc: "IsEssential is accepted and changes nothing", cookie: config.SessionAffinityCookie{IsEssential: true},
			want: "K=" + val + "; path=/; httponly"},
		{desc: "SameSite Unspecified omits the attribute", cookie: config.SessionAffinityCookie{SameSite: "Unspecified"},
			want: "K=" + val + "; path=/; httponly"},
		{desc: "SameSite None", cookie: config.SessionAffinityCookie{SameSite: "None"},
			want: "K=" + val + "; path=/; samesite=none; httponly"},
		{desc: "SameSite Lax", cookie: config.SessionAffinityCookie{SameSite: "Lax"},
			want: "K=" + val + "; path=/; samesite=lax; httponly"},
		{desc: "SameSite Strict", cookie: config.SessionAffinityCookie{SameSite: "Strict"},
			want: "K=" + val + "; path=/; samesite=strict; httponly"},
		{desc: "SecurePolicy SameAsRequest over HTTPS sets Secure", secure: true,
			want: "K=" + val + "; path=/; secure; httponly"},
		{desc: "SecurePolicy SameAsRequest over HTTP does not", cookie: config.SessionAffinityCookie{SecurePolicy: "SameAsRequest"},
			want: "K=" + val + "; path=/; httponly"},
		{desc: "SecurePolicy Always sets Secure over HTTP", cookie: config.SessionAffinityCookie{SecurePolicy: "Always"},
			want: "K=" + val + "; path=/; secure; httponly"},
		{desc: "SecurePolicy None never sets Secure", cookie: config.SessionAffinityCookie{SecurePolicy: "None"}, secure: true,
			want: "K=" + val + "; path=/; httponly"},
		{desc: "all together, in ASP.NET's order", secure: true, cookie: config.SessionAffinityCookie{
			Domain: "mydomain.my", Path: "/some", HttpOnly: &no, MaxAge: config.Duration{Duration: time.Hour},
			SameSite: "Lax", SecurePolicy: "Always", IsEssential: true},
			// YARP's own test expectation for the same settings.
			want: "K=" + val + "; max-age=3600; domain=mydomain.my; path=/some; secure; samesite=lax"},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			c := cluster("c", dest("a"))
			cfg := enabled("HashCookie", "K")
			cfg.Cookie = tc.cookie
			p, err := New("c", cfg, c, Options{Now: func() time.Time { return t0 }})
			if err != nil {
				t.Fatal(err)
			}
			resp := &http.Response{Header: http.Header{}}
			p.Affinitize(resp, c.Destination("a"), Decision{Attach: true}, tc.secure)
			if got := strings.Join(resp.Header["Set-Cookie"], "\n"); got != tc.want {
				t.Fatalf("Set-Cookie\n got %s\nwant %s", got, tc.want)
			}
			// What we emit must read back through net/http as the same cookie.
			hc, err := http.ParseSetCookie(resp.Header.Get("Set-Cookie"))
			if err != nil || hc.Name != "K" || hc.Value != val {
				t.Fatalf("net/http reads %+v, %v", hc, err)
			}
		})
	}
}

func TestCookieEncryptedValueIsCookieSafe(t *testing.T) {
	// Encrypted values are base64url without padding: valid cookie octets,
	// read back unchanged by net/http.
	kr := newFakeKeyring(t)
	c := cluster("c", dest("ä/ö;=,\"x"))
	p := mustNew(t, "c", enabled("Cookie", "K"), c, kr)
	for i := 0; i < 20; i++ {
		resp := &http.Response{Header: http.Header{}}
		p.Affinitize(resp, c.Destinations[0], Decision{Attach: true}, false)
		hc, err := http.ParseSetCookie(resp.Header.Get("Set-Cookie"))
		if err != nil || hc.Quoted || strings.ContainsAny(hc.Value, "+/=;, \"") {
			t.Fatalf("value %q (%v) is not cookie-safe", hc.Value, err)
		}
		r := request("Cookie: " + (&http.Cookie{Name: "K", Value: hc.Value}).String())
		if d := p.Resolve(r, c, t0, nil); d.Outcome != Routed {
			t.Fatalf("outcome %v, want routed", d.Outcome)
		}
	}
}
