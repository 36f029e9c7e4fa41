package test

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tether-proxy/tether/test/testutil"
)

func configFor(routes string, backends ...*testutil.Backend) string {
	var dests []string
	for _, b := range backends {
		dests = append(dests, fmt.Sprintf(`"%s": { "Address": "%s/" }`, b.Name, b.URL()))
	}
	return fmt.Sprintf(`{
  // comments and trailing commas are fine, as in appsettings.json
  "Listeners": [ { "Address": "127.0.0.1:0" } ],
  "Limits": { "ShutdownTimeout": "00:00:20" },
  "ReverseProxy": {
    "Routes": { %s },
    "Clusters": {
      "app": {
        "LoadBalancingPolicy": "RoundRobin",
        "SessionAffinity": { "Enabled": "true", "Policy": "HashCookie", "AffinityKeyName": ".Tether.Affinity" },
        "Destinations": { %s },
      },
    },
  },
}`, routes, strings.Join(dests, ",\n"))
}

const catchAll = `"all": { "ClusterId": "app", "Match": { "Path": "{**catch-all}" } }`

func TestAgentProxiesWithAffinityAndForwardedHeaders(t *testing.T) {
	b1, b2, b3 := testutil.NewBackend(t, "b1"), testutil.NewBackend(t, "b2"), testutil.NewBackend(t, "b3")
	cfg := filepath.Join(t.TempDir(), "tether.json")
	testutil.WriteFile(t, cfg, configFor(catchAll, b1, b2, b3))
	a := startAgent(t, cfg, nil)

	jar, _ := cookiejar.New(nil)
	client := &http.Client{Jar: jar}
	status, hdr, body := testutil.Get(t, client, a.proxyURL+"/hello", map[string]string{"X-Forwarded-For": "6.6.6.6"})
	if status != 200 {
		t.Fatalf("status %d body %q", status, body)
	}
	first := hdr.Get("X-Demo-Backend")
	if !strings.Contains(hdr.Get("Set-Cookie"), ".Tether.Affinity=") {
		t.Fatalf("first response has no affinity cookie: %v", hdr)
	}
	for i := 0; i < 10; i++ {
		_, h, _ := testutil.Get(t, client, a.proxyURL+"/hello", nil)
		if got := h.Get("X-Demo-Backend"); got != first {
			t.Fatalf("request %d went to %s, session is on %s", i, got, first)
		}
		if h.Get("Set-Cookie") != "" {
			t.Fatalf("affinity cookie sent again on request %d", i)
		}
	}
	var seen http.Header
	for _, b := range []*testutil.Backend{b1, b2, b3} {
		if b.Name == first {
			seen = b.LastHeader()
		}
	}
	if xff := seen.Get("X-Forwarded-For"); xff != "127.0.0.1" {
		t.Errorf("X-Forwarded-For = %q, want the client address only (spoofed value replaced)", xff)
	}
	if !regexp.MustCompile(`^[0-9a-f]{32}$`).MatchString(seen.Get("X-Tether-Trace-Id")) {
		t.Errorf("X-Tether-Trace-Id = %q", seen.Get("X-Tether-Trace-Id"))
	}
	for _, h := range []string{"X-Forwarded-Proto", "X-Forwarded-Host", "X-Forwarded-Port", "X-Original-Host", "X-Original-URL"} {
		if seen.Get(h) == "" {
			t.Errorf("backend did not get %s", h)
		}
	}
	// One JSON access-log line per request, carrying the trace id.
	testutil.Eventually(t, 10*time.Second, "access log line", func() bool {
		return strings.Contains(a.Stdout.String(), seen.Get("X-Tether-Trace-Id"))
	})
}

func TestAgentAdminEndpointsAndToken(t *testing.T) {
	b1 := testutil.NewBackend(t, "b1")
	dir := t.TempDir()
	cfg := filepath.Join(dir, "tether.json")
	testutil.WriteFile(t, cfg, configFor(catchAll, b1))
	tokenFile := filepath.Join(dir, "token")
	testutil.WriteFile(t, tokenFile, "s3cret\n")
	a := startAgent(t, cfg, nil, "--admin-token-file", tokenFile)
	c := &http.Client{}

	if s, _, _ := testutil.Get(t, c, a.adminURL+"/healthz", nil); s != 200 {
		t.Errorf("/healthz = %d", s)
	}
	if s, _, body := testutil.Get(t, c, a.adminURL+"/readyz", nil); s != 200 {
		t.Errorf("/readyz = %d %s", s, body)
	}
	if s, _, _ := testutil.Get(t, c, a.adminURL+"/v1/status", nil); s != 401 {
		t.Errorf("/v1/status without token = %d, want 401", s)
	}
	auth := map[string]string{"Authorization": "Bearer s3cret"}
	s, _, body := testutil.Get(t, c, a.adminURL+"/v1/status", auth)
	if s != 200 || !strings.Contains(body, `"node_id": "e2e"`) {
		t.Errorf("/v1/status = %d %s", s, body)
	}
	testutil.Get(t, c, a.proxyURL+"/x", nil)
	s, _, body = testutil.Get(t, c, a.adminURL+"/metrics", auth)
	if s != 200 || !strings.Contains(body, "tether_requests_total") || !strings.Contains(body, "tether_affinity_requests_total") {
		t.Errorf("/metrics = %d, missing tether_ metrics", s)
	}

	// The client commands read the token from the environment.
	out, err := exec.Command(tetherBin, "status", "--admin", a.adminURL).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "401") {
		t.Errorf("tether status without token: err=%v out=%s", err, out)
	}
	cmd := exec.Command(tetherBin, "keyring", "list", "--admin", a.adminURL)
	cmd.Env = append(os.Environ(), "TETHER_ADMIN_TOKEN=s3cret")
	out, err = cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "active") {
		t.Errorf("tether keyring list: err=%v out=%s", err, out)
	}
	cmd = exec.Command(tetherBin, "drain", "app", "b1", "--json")
	cmd.Env = append(os.Environ(), "TETHER_ADMIN_TOKEN=s3cret", "TETHER_ADMIN="+a.adminURL)
	out, err = cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), `"draining": true`) {
		t.Errorf("tether drain: err=%v out=%s", err, out)
	}
}

func TestAgentReloadsOnSIGHUPAndFileChangeKeepingOldOnError(t *testing.T) {
	b1, b2 := testutil.NewBackend(t, "b1"), testutil.NewBackend(t, "b2")
	cfg := filepath.Join(t.TempDir(), "tether.json")
	testutil.WriteFile(t, cfg, configFor(`"a": { "ClusterId": "app", "Match": { "Path": "/a/{**rest}" } }`, b1))
	a := startAgent(t, cfg, nil)
	c := &http.Client{}
	if s, _, _ := testutil.Get(t, c, a.proxyURL+"/b/x", nil); s != 404 {
		t.Fatalf("/b before reload = %d, want 404", s)
	}

	// A file change reloads by itself.
	testutil.WriteFile(t, cfg, configFor(`"a": { "ClusterId": "app", "Match": { "Path": "/a/{**rest}" } },
	  "b": { "ClusterId": "app", "Match": { "Path": "/b/{**rest}" } }`, b1))
	testutil.Eventually(t, 15*time.Second, "route /b after file change", func() bool {
		s, _, _ := testutil.Get(t, c, a.proxyURL+"/b/x", nil)
		return s == 200
	})

	// An invalid config is refused and the running one kept.
	testutil.WriteFile(t, cfg, `{ "ReverseProxy": { "Routes": { "a": { "ClusterId": "missing" } }, "Clusterz": {} } }`)
	a.Signal(syscall.SIGHUP)
	testutil.Eventually(t, 15*time.Second, "rejected reload logged", func() bool {
		return a.LogLine("config reload rejected; keeping the running configuration") != nil
	})
	if s, _, _ := testutil.Get(t, c, a.proxyURL+"/b/x", nil); s != 200 {
		t.Fatalf("after a rejected reload /b = %d, want the old config kept", s)
	}

	// SIGHUP applies a valid change (destination swapped to b2).
	testutil.WriteFile(t, cfg, configFor(catchAll, b2))
	a.Signal(syscall.SIGHUP)
	testutil.Eventually(t, 15*time.Second, "new destination after SIGHUP", func() bool {
		_, h, _ := testutil.Get(t, c, a.proxyURL+"/z", nil)
		return h.Get("X-Demo-Backend") == "b2"
	})
}

// TestAgentGracefulShutdownFinishesInFlight: SIGTERM stops accepting, the
// in-flight request completes (also when a SIGHUP follows), exit code 0.
func TestAgentGracefulShutdownFinishesInFlight(t *testing.T) {
	b1 := testutil.NewBackend(t, "b1")
	cfg := filepath.Join(t.TempDir(), "tether.json")
	testutil.WriteFile(t, cfg, configFor(catchAll, b1))
	a := startAgent(t, cfg, nil)

	type result struct {
		status int
		body   string
		err    error
	}
	res := make(chan result, 1)
	go func() {
		resp, err := http.Get(a.proxyURL + "/slow?sleep=1500ms")
		if err != nil {
			res <- result{err: err}
			return
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		res <- result{status: resp.StatusCode, body: string(b), err: err}
	}()
	// Wait until the request is in flight at the backend.
	testutil.Eventually(t, 10*time.Second, "request in flight", func() bool { return b1.LastHeader() != nil })
	a.Signal(syscall.SIGTERM)
	// A config tool's SIGHUP during the stop must not cut it short.
	a.Signal(syscall.SIGHUP)
	// New connections are refused while the in-flight request finishes.
	addr := strings.TrimPrefix(a.proxyURL, "http://")
	testutil.Eventually(t, 10*time.Second, "listener closed", func() bool {
		conn, err := net.DialTimeout("tcp", addr, time.Second)
		if err != nil {
			return true
		}
		conn.Close()
		return false
	})
	r := <-res
	if r.err != nil || r.status != 200 || r.body != "b1 /slow" {
		t.Fatalf("in-flight request: status %d err %v", r.status, r.err)
	}
	if code := a.Wait(30 * time.Second); code != 0 {
		t.Fatalf("exit code %d", code)
	}
}

func TestAgentReadsFlagsFromEnvironment(t *testing.T) {
	b1 := testutil.NewBackend(t, "b1")
	cfg := filepath.Join(t.TempDir(), "tether.json")
	testutil.WriteFile(t, cfg, configFor(catchAll, b1))
	p := start(t, []string{"TETHER_CONFIG=" + cfg, "TETHER_NODE_ID=from-env", "TETHER_DATA_DIR=" + t.TempDir(), "TETHER_ADMIN_ADDR=127.0.0.1:0"}, "agent")
	testutil.Eventually(t, 60*time.Second, "node started", func() bool { return p.LogLine("node started") != nil })
	if node := p.LogLine("node started")["node"]; node != "from-env" {
		t.Fatalf("node id = %v, want from-env", node)
	}
	p.Signal(syscall.SIGINT)
	if code := p.Wait(30 * time.Second); code != 0 {
		t.Fatalf("exit code %d", code)
	}
}

func TestAgentRefusesBadConfigAtStart(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "bad.json")
	testutil.WriteFile(t, cfg, `{ "ReverseProxy": { "Clusters": { "c1": { "SessionAffinity": { "Enabled": true }, "Destinations": { "d1": { "Address": "http://127.0.0.1:1/" } } } } } }`)
	p := start(t, nil, "agent", "--config", cfg, "--data-dir", t.TempDir(), "--admin-addr", "127.0.0.1:0")
	if code := p.Wait(60 * time.Second); code == 0 {
		t.Fatal("agent started with a bad config")
	}
	if !strings.Contains(p.Stderr.String(), "ReverseProxy.Clusters.c1.SessionAffinity.AffinityKeyName") {
		t.Fatalf("error does not name the JSON path:\n%s", p.Stderr.String())
	}
}

func TestConfigValidateListsEveryErrorWithPath(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.json")
	testutil.WriteFile(t, bad, `{
	  "ReverseProxy": {
	    "Routes": { "r1": { "ClusterId": "nope", "Match": { "Path": "/{a" } } },
	    "Clusters": { "c1": {
	      "LoadBalancingPolicy": "Fastest",
	      "SessionAffinity": { "Enabled": true },
	      "Destinations": { "d1": { "Adress": "http://x/" } } } }
	  }
	}`)
	out, err := exec.Command(tetherBin, "config", "validate", bad).CombinedOutput()
	if err == nil {
		t.Fatalf("validate accepted a bad config:\n%s", out)
	}
	for _, want := range []string{
		"ReverseProxy.Routes.r1.ClusterId",
		"ReverseProxy.Routes.r1.Match.Path", // the compiler's, listed with the rest
		"ReverseProxy.Clusters.c1.LoadBalancingPolicy",
		"ReverseProxy.Clusters.c1.SessionAffinity.AffinityKeyName: required when Enabled",
		"ReverseProxy.Clusters.c1.Destinations.d1.Adress",
	} {
		if !strings.Contains(string(out), want) {
			t.Errorf("validate output lacks %q:\n%s", want, out)
		}
	}
	good := filepath.Join(dir, "good.yaml")
	testutil.WriteFile(t, good, "ReverseProxy:\n  Routes:\n    all: { ClusterId: app, Match: { Path: '{**catch-all}' } }\n  Clusters:\n    app:\n      Destinations:\n        d1: { Address: 'http://127.0.0.1:9/' }\n")
	if out, err := exec.Command(tetherBin, "config", "validate", good).CombinedOutput(); err != nil {
		t.Fatalf("validate refused a good YAML config: %v\n%s", err, out)
	}
}

func TestClientCommandHonoursTimeout(t *testing.T) {
	release := make(chan struct{})
	admin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer admin.Close()
	defer close(release)
	out, err := exec.Command(tetherBin, "status", "--admin", admin.URL, "--timeout", "300ms").CombinedOutput()
	if err == nil {
		t.Fatalf("status against a hanging admin API succeeded: %s", out)
	}
	if lines := strings.Split(strings.TrimSpace(string(out)), "\n"); len(lines) != 1 || !strings.Contains(lines[0], "deadline") && !strings.Contains(lines[0], "Timeout") {
		t.Fatalf("want a one-line timeout error, got %q", out)
	}
}
