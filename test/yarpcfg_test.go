package test

import (
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tether-proxy/tether/test/testutil"
)

// A config with a misspelt key outside ReverseProxy and an application
// section: a warning and an info line by default; with --strict (or
// TETHER_STRICT) the typo is an error. (Inside ReverseProxy such a typo is
// an error even without --strict: TestConfigValidateSaysWhatTheFileDoes.)
const typoConfig = `{
  "ConnectionStrings": { "Db": "Server=db" },
  "Listeners": [ { "Address": "127.0.0.1:0" } ],
  "Limits": { "KeepAlvieTimeout": "00:01:00" },
  "ReverseProxy": {
    "Routes": { "all": { "ClusterId": "app", "Match": { "Path": "{**catch-all}" } } },
    "Clusters": { "app": { "Destinations": { "d1": { "Address": "http://127.0.0.1:9/" } } } }
  }
}`

func TestConfigValidateStrict(t *testing.T) {
	path := filepath.Join(t.TempDir(), "typo.json")
	testutil.WriteFile(t, path, typoConfig)
	const typo = "Limits.KeepAlvieTimeout: unknown key; did you mean KeepAliveTimeout?"
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

func TestAgentStrictRefusesUnknownKeys(t *testing.T) {
	path := filepath.Join(t.TempDir(), "typo.json")
	testutil.WriteFile(t, path, typoConfig)
	p := start(t, nil, "agent", "--strict", "--config", path, "--node-id", "e2e", "--data-dir", t.TempDir(), "--admin-addr", "127.0.0.1:0")
	if code := p.Wait(30 * time.Second); code == 0 {
		t.Fatal("agent --strict started with an unknown key")
	}
	if !strings.Contains(p.Stderr.String(), "KeepAlvieTimeout: unknown key") {
		t.Fatalf("stderr does not name the key:\n%s", p.Stderr.String())
	}
}

// A YARP gateway's listeners come from Kestrel.Endpoints, or from
// ASPNETCORE_URLS: the agent serves on them.
func TestAgentListensOnKestrelEndpointsAndASPNETCOREURLS(t *testing.T) {
	b := testutil.NewBackend(t, "b1")
	rp := `"ReverseProxy": {
    "Routes": { "all": { "ClusterId": "app", "Match": { "Path": "{**catch-all}" } } },
    "Clusters": { "app": { "Destinations": { "b1": { "Address": "` + b.URL() + `/" } } } } }`
	for _, c := range []struct {
		desc, config string
		env          []string
	}{
		{"Kestrel.Endpoints", `{ "Kestrel": { "Endpoints": { "Http": { "Url": "http://127.0.0.1:0" } } }, ` + rp + ` }`, nil},
		{"ASPNETCORE_URLS", `{ ` + rp + ` }`, []string{"ASPNETCORE_URLS=http://127.0.0.1:0"}},
	} {
		t.Run(c.desc, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "appsettings.json")
			testutil.WriteFile(t, path, c.config)
			a := startAgent(t, path, c.env)
			status, _, body := testutil.Get(t, http.DefaultClient, a.proxyURL+"/hello", nil)
			if status != 200 || body != "b1 /hello" {
				t.Fatalf("%d %q", status, body)
			}
		})
	}
}

// TestASPNETBoilerplateLoadsWithoutAWarning: every appsettings.json has
// Logging and AllowedHosts "*"; the agent logs no warning for them at
// start or on a reload. AllowedHosts naming hosts is a warning: tether
// serves every host.
func TestASPNETBoilerplateLoadsWithoutAWarning(t *testing.T) {
	const appsettings = `{
  "Logging": { "LogLevel": { "Default": "Information", "Microsoft.AspNetCore": "Warning" } },
  "AllowedHosts": "*",
  "Listeners": [ { "Address": "127.0.0.1:0" } ],
  "ReverseProxy": {
    "Routes": { "all": { "ClusterId": "app", "Match": { "Path": "{**catch-all}" } } },
    "Clusters": { "app": { "Destinations": { "d1": { "Address": "http://127.0.0.1:9/" } } } }
  }
}`
	path := filepath.Join(t.TempDir(), "appsettings.json")
	testutil.WriteFile(t, path, appsettings)
	a := startAgent(t, path, nil, "--no-access-log")
	a.Signal(syscall.SIGHUP)
	a.WaitLogLine("config reloaded", 30*time.Second)
	a.Signal(syscall.SIGTERM)
	a.Wait(30 * time.Second)
	for _, m := range logRecords(t, "agent", a.proc) {
		if msg, _ := m["msg"].(string); m["level"] == "WARN" && (strings.Contains(msg, "Logging") || strings.Contains(msg, "AllowedHosts")) {
			t.Errorf("warned about ASP.NET's boilerplate: %v", m)
		}
	}

	hosts := filepath.Join(t.TempDir(), "hosts.json")
	testutil.WriteFile(t, hosts, strings.Replace(appsettings, `"AllowedHosts": "*"`, `"AllowedHosts": "example.com"`, 1))
	out, err := exec.Command(tetherBin, "config", "validate", hosts).CombinedOutput()
	if err != nil || !strings.Contains(string(out), `warning: AllowedHosts: "example.com" is not enforced by tether`) {
		t.Fatalf("validate with AllowedHosts naming a host: %v\n%s", err, out)
	}
}

// Kestrel's minimum data rates load as Kestrel writes them, without the
// "not implemented" warning; a negative or malformed one is refused
// naming its field.
func TestConfigValidateMinDataRates(t *testing.T) {
	const rp = `"ReverseProxy": {
    "Routes": { "all": { "ClusterId": "app", "Match": { "Path": "{**catch-all}" } } },
    "Clusters": { "app": { "Destinations": { "d1": { "Address": "http://127.0.0.1:9/" } } } }
  }`
	for _, c := range []struct {
		desc, limits string
		ok           bool
		want         string
	}{
		{"Kestrel's form", `"Kestrel": { "Limits": { "MinRequestBodyDataRate": { "BytesPerSecond": 100, "GracePeriod": "00:00:10" }, "MinResponseDataRate": null } }`, true, ""},
		{"a negative rate", `"Kestrel": { "Limits": { "MinRequestBodyDataRate": { "BytesPerSecond": -1, "GracePeriod": "00:00:10" } } }`, false,
			"Kestrel.Limits.MinRequestBodyDataRate.BytesPerSecond: must not be negative"},
		{"a rate that is no number", `"Limits": { "MinResponseDataRate": { "BytesPerSecond": "fast" } }`, false,
			"Limits.MinResponseDataRate.BytesPerSecond: want a number"},
		{"a grace period under Kestrel's heartbeat", `"Limits": { "MinResponseDataRate": { "BytesPerSecond": 240, "GracePeriod": "00:00:00.5" } }`, false,
			"Limits.MinResponseDataRate.GracePeriod: must be more than 1 second"},
	} {
		t.Run(c.desc, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "appsettings.json")
			testutil.WriteFile(t, path, "{"+c.limits+", "+rp+"}")
			out, err := exec.Command(tetherBin, "config", "validate", path).CombinedOutput()
			if (err == nil) != c.ok || !strings.Contains(string(out), c.want) {
				t.Fatalf("exit error %v, want ok=%v and %q:\n%s", err, c.ok, c.want, out)
			}
			if strings.Contains(string(out), "DataRate: accepted but not implemented") {
				t.Fatalf("the rates are said not to be implemented:\n%s", out)
			}
		})
	}
}
