package proxy

import (
	"encoding/base64"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tether-proxy/tether/keyring/dataprotection"
	"github.com/tether-proxy/tether/proxy/config"
)

// The key ring and certificate ASP.NET made (keyring/dataprotection/
// testdata/README.md): one AES-256-CBC key encrypted to the certificate.
const dpRingDir = "../keyring/dataprotection/testdata/aspnet-cert-ring"

func dpCertPFX(t *testing.T) string {
	t.Helper()
	b64, err := os.ReadFile("../keyring/dataprotection/testdata/aspnet-cert.pfx.b64")
	if err != nil {
		t.Fatal(err)
	}
	der, err := base64.StdEncoding.DecodeString(strings.Join(strings.Fields(string(b64)), ""))
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "dp.pfx")
	if err := os.WriteFile(p, der, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// dpYarpApp is the YARP fleet's view of the same ring.
func dpYarpApp(t *testing.T, pfx, disc string) *dataprotection.Application {
	t.Helper()
	cert, err := dataprotection.LoadCertificate(pfx, "", "password")
	if err != nil {
		t.Fatal(err)
	}
	r, err := dataprotection.Open(dpRingDir, dataprotection.Options{Certificates: []*dataprotection.Certificate{cert}})
	if err != nil {
		t.Fatal(err)
	}
	return r.Application(disc)
}

func dpSection(pfx string, issue bool) string {
	return fmt.Sprintf(`"DataProtection": { "KeyRingPath": %q, "ApplicationDiscriminator": "/app", "Certificate": { "Path": %q, "Password": "password" }, "IssueYarpValues": %v }`,
		dpRingDir, pfx, issue)
}

// TestLiveYarpSessionsCarryOver: live YARP sessions carry over through the
// data path:
// a session cookie a YARP node issued reaches its destination through
// tether, and with IssueYarpValues a new session's cookie opens in YARP.
func TestLiveYarpSessionsCarryOver(t *testing.T) {
	const name = ".Yarp.Affinity"
	pfx := dpCertPFX(t)
	yarp := dpYarpApp(t, pfx, "/app")
	const cookiePurpose = "Yarp.ReverseProxy.SessionAffinity.CookieSessionAffinityPolicy"
	addrs, _ := affBackends(t, "alpha", "bravo", "charlie")
	h := affHarness(t, affConfig("c", addrs, `"LoadBalancingPolicy": "RoundRobin", `+affBlock("Cookie", name, ""), "", dpSection(pfx, true)),
		affRing(t, nil, affKey(t, time.Now().Add(-time.Hour), 0)), nil)

	t.Run("a YARP-issued cookie routes to its destination", func(t *testing.T) {
		b, err := yarp.Protect(cookiePurpose, []byte("bravo"))
		if err != nil {
			t.Fatal(err)
		}
		v := url.QueryEscape(strings.TrimRight(base64.StdEncoding.EncodeToString(b), "="))
		for range 5 {
			resp, body := get(t, nil, h.front.URL+"/", affCarrying("Cookie", name, v))
			if resp.StatusCode != 200 || body != "bravo" {
				t.Fatalf("answered %d by %q, want bravo", resp.StatusCode, body)
			}
			if k := affIssuedKey(t, resp, "Cookie", name); k != "" {
				t.Fatalf("an affinitized request got a new key %q", k)
			}
		}
	})
	t.Run("a new session's cookie opens in YARP", func(t *testing.T) {
		resp, body := get(t, nil, h.front.URL+"/", nil)
		v := affIssuedKey(t, resp, "Cookie", name)
		if resp.StatusCode != 200 || v == "" {
			t.Fatalf("answered %d with key %q", resp.StatusCode, v)
		}
		raw, err := url.QueryUnescape(v) // ASP.NET's Request.Cookies
		if err != nil {
			t.Fatal(err)
		}
		if pad := 3 - (len(raw)+3)%4; pad > 0 {
			raw += strings.Repeat("=", pad)
		}
		b, err := base64.StdEncoding.DecodeString(raw)
		if err != nil {
			t.Fatalf("not YARP's base64: %q: %v", v, err)
		}
		id, err := yarp.Unprotect(cookiePurpose, b)
		if err != nil || string(id) != body {
			t.Fatalf("YARP opens %q as %q (%v), want %q", v, id, err, body)
		}
	})
}

func TestDataProtectionConfigErrors(t *testing.T) {
	pfx := dpCertPFX(t)
	addrs := map[string]string{"a": "http://127.0.0.1:1"}
	cookie := `"LoadBalancingPolicy": "RoundRobin", ` + affBlock("Cookie", ".A", "")
	cases := []struct {
		desc, section, cluster string
		path, msg              string // expected error; "" for none
		warn                   string
	}{
		{"valid section", dpSection(pfx, false), cookie, "", "", ""},
		{"KeyRingPath required", `"DataProtection": {"ApplicationDiscriminator": "/app"}`, cookie,
			"DataProtection.KeyRingPath", "required", ""},
		{"ApplicationDiscriminator required", fmt.Sprintf(`"DataProtection": {"KeyRingPath": %q}`, dpRingDir), cookie,
			"DataProtection.ApplicationDiscriminator", "required", ""},
		{"a directory without keys", fmt.Sprintf(`"DataProtection": {"KeyRingPath": %q, "ApplicationDiscriminator": "/app"}`, t.TempDir()), cookie,
			"DataProtection.KeyRingPath", "no Data Protection key", ""},
		{"keys encrypted to a certificate that is not configured", fmt.Sprintf(`"DataProtection": {"KeyRingPath": %q, "ApplicationDiscriminator": "/app"}`, dpRingDir), cookie,
			"DataProtection.KeyRingPath", "configure DataProtection.Certificate", ""},
		{"wrong PFX password", fmt.Sprintf(`"DataProtection": {"KeyRingPath": %q, "ApplicationDiscriminator": "/app", "Certificate": {"Path": %q, "Password": "nope"}}`, dpRingDir, pfx), cookie,
			"DataProtection.Certificate", "", ""},
		{"Password with a PEM key", fmt.Sprintf(`"DataProtection": {"KeyRingPath": %q, "ApplicationDiscriminator": "/app", "Certificate": {"Path": %q, "KeyPath": %q, "Password": "x"}}`, dpRingDir, pfx, pfx), cookie,
			"DataProtection.Certificate.Password", "applies to a .pfx", ""},
		{"no policy reads it: a warning", dpSection(pfx, false), `"LoadBalancingPolicy": "RoundRobin", ` + affBlock("HashCookie", ".A", ""),
			"", "", "has no effect"},
	}
	for _, c := range cases {
		t.Run(c.desc, func(t *testing.T) {
			_, warns, err := config.Parse([]byte(affConfig("c", addrs, c.cluster, "", c.section)), "json")
			if c.path == "" {
				if err != nil {
					t.Fatalf("error %v", err)
				}
			} else {
				if err == nil || !strings.Contains(err.Error(), c.path) || !strings.Contains(err.Error(), c.msg) {
					t.Fatalf("error %v, want %s: ...%s", err, c.path, c.msg)
				}
			}
			if c.warn != "" && !strings.Contains(strings.Join(warns, "\n"), c.warn) {
				t.Fatalf("warnings %q, want %q", warns, c.warn)
			}
		})
	}
}

// TestDataProtectionRingKeptAcrossReloads: an unchanged section keeps the
// opened ring (it refreshes itself); another discriminator, directory or
// certificate opens a new one. Certificates (rotation) decrypt like
// Certificate.
func TestDataProtectionRingKeptAcrossReloads(t *testing.T) {
	pfx := dpCertPFX(t)
	addrs := map[string]string{"a": "http://127.0.0.1:1"}
	cookie := `"LoadBalancingPolicy": "RoundRobin", ` + affBlock("Cookie", ".A", "")
	js := func(section string) string { return affConfig("c", addrs, cookie, "", section) }
	h := affHarness(t, js(dpSection(pfx, false)), affRing(t, nil, affKey(t, time.Now().Add(-time.Hour), 0)), nil)
	first := h.p.dp.Application()
	if first == nil {
		t.Fatal("no ring opened")
	}
	if err := h.p.Update(mustParse(t, js(dpSection(pfx, true)))); err != nil {
		t.Fatal(err)
	}
	if h.p.dp.Application() != first {
		t.Fatal("an unchanged key ring section reopened the ring")
	}
	rotated := fmt.Sprintf(`"DataProtection": { "KeyRingPath": %q, "ApplicationDiscriminator": "/app2",
		"Certificates": [ { "Path": %q, "Password": "password" } ] }`, dpRingDir, pfx)
	if err := h.p.Update(mustParse(t, js(rotated))); err != nil {
		t.Fatal(err)
	}
	if h.p.dp.Application() == first {
		t.Fatal("another discriminator kept the old ring")
	}
	if k := h.p.dp.Application().Ring().DefaultKey(); k == nil || !k.Usable() {
		t.Fatal("Certificates did not decrypt the key")
	}
}
