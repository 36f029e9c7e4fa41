package test

import (
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A config with a misspelt key outside ReverseProxy and an application
// section: a warning and an info line by default; with --strict (or
// TETHER_STRICT) the typo is an error.
const typoConfig = `{
  "ConnectionStrings": { "Db": "Server=db" },
  "Listeners": [ { "Address": "127.0.0.1:0", "Adress": "x" } ],
  "ReverseProxy": {
    "Routes": { "all": { "ClusterId": "app", "Match": { "Path": "{**catch-all}" } } },
    "Clusters": { "app": { "Destinations": { "d1": { "Address": "http://127.0.0.1:9/" } } } }
  }
}`

func TestConfigValidateStrict(t *testing.T) {
	path := filepath.Join(t.TempDir(), "typo.json")
	writeFile(t, path, typoConfig)
	const typo = "Listeners[0].Adress: unknown key; did you mean Address?"
	const info = "info: ConnectionStrings: not a tether, YARP or ASP.NET section"
	for _, c := range []struct {
		desc string
		args []string
		env  []string
		ok   bool
	}{
		{"default: a warning", []string{"config", "validate", path}, nil, true},
		{"--strict: an error", []string{"config", "validate", "--strict", path}, nil, false},
		{"TETHER_STRICT: an error", []string{"config", "validate", path}, []string{"TETHER_STRICT=true"}, false},
	} {
		t.Run(c.desc, func(t *testing.T) {
			cmd := exec.Command(tetherBin, c.args...)
			cmd.Env = append(cmd.Environ(), c.env...)
			out, err := cmd.CombinedOutput()
			if (err == nil) != c.ok {
				t.Fatalf("exit error %v, want ok=%v:\n%s", err, c.ok, out)
			}
			if !strings.Contains(string(out), typo) || !strings.Contains(string(out), info) {
				t.Fatalf("output lacks %q or %q:\n%s", typo, info, out)
			}
		})
	}
}

// TestConfigValidateRefusesATypoInsideReverseProxy: inside ReverseProxy a
// key within a typo's distance of a known one is an error without --strict,
// since ignoring it would silently turn its feature off.
func TestConfigValidateRefusesATypoInsideReverseProxy(t *testing.T) {
	path := filepath.Join(t.TempDir(), "typo.json")
	writeFile(t, path, strings.Replace(typoConfig, `"Match": { "Path": "{**catch-all}" } }`, `"Match": { "Path": "{**catch-all}" }, "Ordre": 1 }`, 1))
	out, err := exec.Command(tetherBin, "config", "validate", path).CombinedOutput()
	if err == nil {
		t.Fatalf("config validate accepted a typo inside ReverseProxy:\n%s", out)
	}
	if !strings.Contains(string(out), "ReverseProxy.Routes.all.Ordre: unknown key; did you mean Order?") {
		t.Fatalf("output does not name the typo:\n%s", out)
	}
}

func TestAgentStrictRefusesUnknownKeys(t *testing.T) {
	path := filepath.Join(t.TempDir(), "typo.json")
	writeFile(t, path, typoConfig)
	p := start(t, nil, "agent", "--strict", "--config", path, "--node-id", "e2e", "--data-dir", t.TempDir(), "--admin-addr", "127.0.0.1:0")
	if code := p.wait(30 * time.Second); code == 0 {
		t.Fatal("agent --strict started with an unknown key")
	}
	if !strings.Contains(p.stderr.String(), "Adress: unknown key") {
		t.Fatalf("stderr does not name the key:\n%s", p.stderr.String())
	}
}

// A YARP gateway's listeners come from Kestrel.Endpoints, or from
// ASPNETCORE_URLS: the agent serves on them.
func TestAgentListensOnKestrelEndpointsAndASPNETCOREURLS(t *testing.T) {
	b := newBackend(t, "b1")
	rp := `"ReverseProxy": {
    "Routes": { "all": { "ClusterId": "app", "Match": { "Path": "{**catch-all}" } } },
    "Clusters": { "app": { "Destinations": { "b1": { "Address": "` + b.srv.URL + `/" } } } } }`
	for _, c := range []struct {
		desc, config string
		env          []string
	}{
		{"Kestrel.Endpoints", `{ "Kestrel": { "Endpoints": { "Http": { "Url": "http://127.0.0.1:0" } } }, ` + rp + ` }`, nil},
		{"ASPNETCORE_URLS", `{ ` + rp + ` }`, []string{"ASPNETCORE_URLS=http://127.0.0.1:0"}},
	} {
		t.Run(c.desc, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "appsettings.json")
			writeFile(t, path, c.config)
			a := startAgent(t, path, c.env)
			status, _, body := get(t, http.DefaultClient, a.proxyURL+"/hello", nil)
			if status != 200 || body != "b1 /hello" {
				t.Fatalf("%d %q", status, body)
			}
		})
	}
}
