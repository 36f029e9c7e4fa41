package affinity

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tether-proxy/tether/keyring/dataprotection"
	"github.com/tether-proxy/tether/proxy/upstream"
)

const (
	yarpCookiePurpose = "Yarp.ReverseProxy.SessionAffinity.CookieSessionAffinityPolicy"
	yarpHeaderPurpose = "Yarp.ReverseProxy.SessionAffinity.CustomHeaderSessionAffinityPolicy"
	yarpApp           = "/app/"
)

// yarpRing is a YARP fleet's key ring directory with one AES-256-CBC +
// HMACSHA256 key active from activation until an hour after.
func yarpRing(t *testing.T, activation time.Time) *dataprotection.Ring {
	t.Helper()
	dir := t.TempDir()
	master := bytes.Repeat([]byte{0x5a}, 64)
	xml := fmt.Sprintf(`<?xml version="1.0" encoding="utf-8"?>
<key id="8a2b3c4d-0000-4000-8000-000000000001" version="1">
  <creationDate>%[1]s</creationDate>
  <activationDate>%[1]s</activationDate>
  <expirationDate>%[2]s</expirationDate>
  <descriptor deserializerType="Microsoft.AspNetCore.DataProtection.AuthenticatedEncryption.ConfigurationModel.AuthenticatedEncryptorDescriptorDeserializer, Microsoft.AspNetCore.DataProtection, Version=8.0.0.0, Culture=neutral, PublicKeyToken=adb9793829ddae60">
    <descriptor>
      <encryption algorithm="AES_256_CBC" />
      <validation algorithm="HMACSHA256" />
      <masterKey p4:requiresEncryption="true" xmlns:p4="http://schemas.asp.net/2015/03/dataProtection">
        <value>%[3]s</value>
      </masterKey>
    </descriptor>
  </descriptor>
</key>`, activation.Format(time.RFC3339), activation.Add(time.Hour).Format(time.RFC3339), base64.StdEncoding.EncodeToString(master))
	if err := os.WriteFile(filepath.Join(dir, "key-1.xml"), []byte(xml), 0o600); err != nil {
		t.Fatal(err)
	}
	r, err := dataprotection.Open(dir, dataprotection.Options{Now: func() time.Time { return t0 }})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// yarpIssued is a value as YARP issues it for destination id: Protect of
// the UTF-8 id, standard base64 with '=' trimmed (BaseEncryptedSession
// AffinityPolicy.Protect); in a cookie, escaped by ASP.NET's
// Response.Cookies.Append (Uri.EscapeDataString).
func yarpIssued(t *testing.T, app *dataprotection.Application, purpose, id string, cookie bool) string {
	t.Helper()
	b, err := app.Protect(purpose, []byte(id))
	if err != nil {
		t.Fatal(err)
	}
	v := strings.TrimRight(base64.StdEncoding.EncodeToString(b), "=")
	if cookie {
		v = url.QueryEscape(v) // for base64 the same as Uri.EscapeDataString
	}
	return v
}

// yarpOpens is what a YARP node makes of a value: Request.Cookies
// unescapes, then Unprotect under YARP's purpose.
func yarpOpens(app *dataprotection.Application, purpose, v string, cookie bool) (string, error) {
	if cookie {
		u, err := url.QueryUnescape(v)
		if err != nil {
			return "", err
		}
		v = u
	}
	if pad := 3 - (len(v)+3)%4; pad > 0 {
		v += strings.Repeat("=", pad)
	}
	b, err := base64.StdEncoding.DecodeString(v)
	if err != nil {
		return "", err
	}
	pt, err := app.Unprotect(purpose, b)
	return string(pt), err
}

func yarpCluster() *upstream.Cluster {
	return cluster("c", dest("dest-A"), dest("dest-B"), dest("dest-C"))
}

// TestYarpValuesCarryOver checks live YARP sessions carrying over
// (docs/YARP.md) against the affinity engine: YARP's Cookie and CustomHeader
// values open in tether, tether's own keep opening, and values for another
// purpose or application do not.
func TestYarpValuesCarryOver(t *testing.T) {
	ring := yarpRing(t, t0.Add(-time.Minute))
	app := ring.Application(yarpApp)
	own := newFakeKeyring(t)
	ownCookie, _ := own.Seal(purposeOf(encCookie, "c", ".Yarp.Affinity"), []byte("dest-C"))
	cases := []struct {
		desc    string
		policy  string
		header  string // request header line
		outcome Outcome
		want    []string
	}{
		{"Cookie: a value YARP issued routes to its destination", "Cookie",
			"Cookie: .Yarp.Affinity=" + yarpIssued(t, app, yarpCookiePurpose, "dest-B", true), Routed, []string{"dest-B"}},
		{"Cookie: unescaped base64 (as some clients send it) still opens", "Cookie",
			"Cookie: .Yarp.Affinity=" + yarpIssued(t, app, yarpCookiePurpose, "dest-A", false), Routed, []string{"dest-A"}},
		{"Cookie: tether's own values keep working", "Cookie",
			"Cookie: .Yarp.Affinity=" + ownCookie, Routed, []string{"dest-C"}},
		{"CustomHeader: a value YARP issued routes to its destination", "CustomHeader",
			"X-Yarp-Affinity: " + yarpIssued(t, app, yarpHeaderPurpose, "dest-C", false), Routed, []string{"dest-C"}},
		{"Cookie: a CustomHeader value is bound to the other purpose and fails", "Cookie",
			"Cookie: .Yarp.Affinity=" + yarpIssued(t, app, yarpHeaderPurpose, "dest-B", true), FailedOpen, nil},
		{"Cookie: a value of another application (discriminator) fails", "Cookie",
			"Cookie: .Yarp.Affinity=" + yarpIssued(t, ring.Application("/other/"), yarpCookiePurpose, "dest-B", true), FailedOpen, nil},
		{"Cookie: a YARP value for a destination tether does not have fails", "Cookie",
			"Cookie: .Yarp.Affinity=" + yarpIssued(t, app, yarpCookiePurpose, "dest-Z", true), FailedOpen, nil},
	}
	for _, c := range cases {
		t.Run(c.desc, func(t *testing.T) {
			name := ".Yarp.Affinity"
			if c.policy == "CustomHeader" {
				name = "X-Yarp-Affinity"
			}
			cl := yarpCluster()
			p, err := New("c", enabled(c.policy, name), cl, Options{Keyring: own, Now: func() time.Time { return t0 }, Yarp: Yarp{Protection: app}})
			if err != nil {
				t.Fatal(err)
			}
			d := p.Resolve(request(c.header), cl, t0, nil)
			if d.Outcome != c.outcome {
				t.Fatalf("outcome %v, want %v", d.Outcome, c.outcome)
			}
			if c.want != nil && strings.Join(ids(d.Candidates), ",") != strings.Join(c.want, ",") {
				t.Fatalf("candidates %v, want %v", ids(d.Candidates), c.want)
			}
		})
	}
}

// TestYarpValuesIssuedOnlyWhenConfigured: with Issue, the attached value is
// one a YARP node opens (after ASP.NET's cookie unescaping); without it,
// tether's own. Either way tether opens what it attached.
func TestYarpValuesIssuedOnlyWhenConfigured(t *testing.T) {
	ring := yarpRing(t, t0.Add(-time.Minute))
	app := ring.Application(yarpApp)
	for _, policy := range []string{"Cookie", "CustomHeader"} {
		for _, issue := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s issue=%v", policy, issue), func(t *testing.T) {
				name, purpose, cookie := ".Yarp.Affinity", yarpCookiePurpose, true
				if policy == "CustomHeader" {
					name, purpose, cookie = "X-Yarp-Affinity", yarpHeaderPurpose, false
				}
				cl := yarpCluster()
				p, err := New("c", enabled(policy, name), cl, Options{Keyring: newFakeKeyring(t), Now: func() time.Time { return t0 },
					Yarp: Yarp{Protection: app, Issue: issue}})
				if err != nil {
					t.Fatal(err)
				}
				d := p.Resolve(request(), cl, t0, nil)
				resp := &http.Response{Header: http.Header{}}
				p.Affinitize(resp, cl.Destination("dest-B"), d, true)
				var v, back string
				if cookie {
					sc := resp.Header.Get("Set-Cookie")
					v, _, _ = strings.Cut(strings.TrimPrefix(sc, name+"="), ";")
					back = "Cookie: " + name + "=" + v
				} else {
					v = resp.Header.Get(name)
					back = name + ": " + v
				}
				if v == "" {
					t.Fatalf("no value attached: %v", resp.Header)
				}
				got, err := yarpOpens(app, purpose, v, cookie)
				if issue && (err != nil || got != "dest-B") {
					t.Fatalf("YARP opens %q as %q, %v; want dest-B", v, got, err)
				}
				if !issue && err == nil {
					t.Fatalf("issued a YARP value %q without IssueYarpValues", v)
				}
				if d := p.Resolve(request(back), cl, t0, nil); d.Outcome != Routed || ids(d.Candidates)[0] != "dest-B" {
					t.Fatalf("tether does not open its own attached value: %v %v", d.Outcome, ids(d.Candidates))
				}
			})
		}
	}
}

// TestYarpIssueFallsBackToTetherValuesWithoutActiveKey: a ring whose only
// key is not active yet cannot protect; tether then attaches its own value
// rather than none, so tether nodes stay sticky.
func TestYarpIssueFallsBackToTetherValuesWithoutActiveKey(t *testing.T) {
	ring := yarpRing(t, t0.Add(time.Hour))
	app := ring.Application(yarpApp)
	cl := yarpCluster()
	own := newFakeKeyring(t)
	p, err := New("c", enabled("Cookie", ".Yarp.Affinity"), cl, Options{Keyring: own, Now: func() time.Time { return t0 }, Yarp: Yarp{Protection: app, Issue: true}})
	if err != nil {
		t.Fatal(err)
	}
	resp := &http.Response{Header: http.Header{}}
	p.Affinitize(resp, cl.Destination("dest-A"), Decision{Attach: true}, false)
	v, _, _ := strings.Cut(strings.TrimPrefix(resp.Header.Get("Set-Cookie"), ".Yarp.Affinity="), ";")
	if strings.HasPrefix(v, yarpPrefix) || v == "" {
		t.Fatalf("value %q, want tether's own", v)
	}
	pt, err := own.Open(purposeOf(encCookie, "c", ".Yarp.Affinity"), v)
	if _, in, sid := splitSession(pt); err != nil || !sid || string(in) != "dest-A" {
		t.Fatalf("own keyring: %q %v, want a session value for dest-A", pt, err)
	}
}

// TestYarpDoesNotChangeOtherPolicies: hash and envelope policies never
// consult Data Protection.
func TestYarpDoesNotChangeOtherPolicies(t *testing.T) {
	ring := yarpRing(t, t0.Add(-time.Minute))
	for _, pol := range []string{"HashCookie", "ArrCookie", "EnvelopeCookie", "EnvelopeHeader"} {
		p, err := New("c", enabled(pol, "X-Aff"), yarpCluster(), Options{Keyring: newFakeKeyring(t), Yarp: Yarp{Protection: ring.Application(yarpApp), Issue: true}})
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := p.keyring.(*yarpKeyring); ok {
			t.Errorf("%s wraps the keyring with Data Protection", pol)
		}
	}
}

// FuzzYarpCookieValue: hostile Cookie-policy values with Data Protection
// on (percent escapes, base64 of both alphabets, tampered YARP payloads)
// end in a defined outcome, never a panic, and only a genuine value routes.
func FuzzYarpCookieValue(f *testing.F) {
	dir := f.TempDir()
	master := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{1}, 64))
	key := `<key id="8a2b3c4d-0000-4000-8000-000000000001" version="1"><creationDate>2026-01-01T00:00:00Z</creationDate><activationDate>2026-01-01T00:00:00Z</activationDate><expirationDate>2027-01-01T00:00:00Z</expirationDate><descriptor deserializerType="AuthenticatedEncryptorDescriptorDeserializer"><descriptor><encryption algorithm="AES_256_CBC"/><validation algorithm="HMACSHA256"/><masterKey><value>` + master + `</value></masterKey></descriptor></descriptor></key>`
	if err := os.WriteFile(filepath.Join(dir, "key.xml"), []byte(key), 0o600); err != nil {
		f.Fatal(err)
	}
	ring, err := dataprotection.Open(dir, dataprotection.Options{Now: func() time.Time { return t0 }})
	if err != nil {
		f.Fatal(err)
	}
	app := ring.Application(yarpApp)
	cl := yarpCluster()
	p, err := New("c", enabled("Cookie", "K"), cl, Options{Keyring: newFakeKeyring(f), Yarp: Yarp{Protection: app}})
	if err != nil {
		f.Fatal(err)
	}
	b, _ := app.Protect(yarpCookiePurpose, []byte("dest-A"))
	valid := strings.TrimRight(base64.StdEncoding.EncodeToString(b), "=")
	for _, s := range []string{valid, url.QueryEscape(valid), valid + "==", valid[:len(valid)/2], yarpPrefix, yarpPrefix + "%", yarpPrefix + "%zz",
		strings.ReplaceAll(valid, "/", "_"), `"` + valid + `"`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		d := p.Resolve(request("Cookie: K="+v), cl, t0, nil)
		if d.Outcome == Routed && (len(d.Candidates) != 1 || d.Candidates[0].ID != "dest-A") {
			t.Fatalf("routed %v", ids(d.Candidates))
		}
	})
}
