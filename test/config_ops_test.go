package test

import (
	"errors"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tether-proxy/tether/test/testutil"
)

// TestConfigValidateSaysWhatTheFileDoes: errors exit non-zero, warnings
// are printed with exit 0, and a file with no routes says it serves
// nothing.
func TestConfigValidateSaysWhatTheFileDoes(t *testing.T) {
	dir := t.TempDir()
	route := `"Routes": {"all": {"ClusterId": "app", "Match": {"Path": "{**catch-all}"}}}`
	dests := `"Destinations": {"d1": {"Address": "http://127.0.0.1:9/"}}`
	for _, tc := range []struct {
		desc, file string
		exit       int
		want       []string
	}{
		{"a typo inside ReverseProxy is an error", `{"ReverseProxy": {` + route + `, "Clusters": {"app": {"SessionAfinity": {"Enabled": true, "AffinityKeyName": "k"}, ` + dests + `}}}}`, 1,
			[]string{"ReverseProxy.Clusters.app.SessionAfinity: unknown key; did you mean SessionAffinity?", "is not valid"}},
		{"a key far from any known one is a warning", `{"ReverseProxy": {` + route + `, "Clusters": {"app": {"SessionStickiness": {}, ` + dests + `}}}}`, 0,
			[]string{"warning: ReverseProxy.Clusters.app.SessionStickiness: unknown key", "is valid: 1 route, 1 cluster"}},
		{"an empty file serves nothing", `{}`, 0, []string{"is valid but serves nothing"}},
		{"WafPolicy named with a string", `{"ReverseProxy": {"Routes": {"all": {"ClusterId": "app", "WafPolicy": "Disabled", "Match": {"Path": "{**catch-all}"}}}, "Clusters": {"app": {` + dests + `}}}}`, 0,
			[]string{"is valid: 1 route,"}},
		{"a Secure-only cookie on plain HTTP warns", `{"Listeners": [{"Address": ":8080"}], "ReverseProxy": {` + route + `, "Clusters": {"app": {"SessionAffinity": {"Enabled": true, "Policy": "Cookie", "AffinityKeyName": "k", "Cookie": {"SecurePolicy": "Always"}}, ` + dests + `}}}}`, 0,
			[]string{"warning: ReverseProxy.Clusters.app.SessionAffinity.Cookie.SecurePolicy: Always, but route all is served only by plain HTTP listeners (Listeners[0] :8080)"}},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			f := filepath.Join(dir, strings.ReplaceAll(tc.desc, " ", "-")+".json")
			testutil.WriteFile(t, f, tc.file)
			out, err := exec.Command(tetherBin, "config", "validate", f).CombinedOutput()
			code := 0
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				code = ee.ExitCode()
			}
			if code != tc.exit {
				t.Fatalf("exit %d, want %d:\n%s", code, tc.exit, out)
			}
			for _, w := range tc.want {
				if !strings.Contains(string(out), w) {
					t.Errorf("output lacks %q:\n%s", w, out)
				}
			}
		})
	}
}

// TestAgentWarnsAboutAReadableSecret: `openssl rand -hex 32 > file`
// creates a 0644 file; the agent says so at start.
func TestAgentWarnsAboutAReadableSecret(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "tether.json")
	testutil.WriteFile(t, cfg, configFor(catchAll, testutil.NewBackend(t, "b1")))
	for _, tc := range []struct {
		desc string
		mode os.FileMode
		warn bool
	}{
		{"0644 warns", 0o644, true},
		{"0600 is quiet", 0o600, false},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			secret := filepath.Join(t.TempDir(), "secret")
			testutil.WriteFile(t, secret, "an-e2e-cluster-secret-0123456789abcdef")
			if err := os.Chmod(secret, tc.mode); err != nil {
				t.Fatal(err)
			}
			a := startAgent(t, cfg, nil, "--cluster-secret-file", secret, "--raft-addr", testutil.FreeAddr(t), "--gossip-addr", testutil.FreeAddr(t), "--no-access-log")
			line := a.LogLine("secret file is readable by group or others: chmod 600 it")
			if (line != nil) != tc.warn {
				t.Fatalf("warning %v, want %v:\n%s", line, tc.warn, a.Stderr.String())
			}
			if tc.warn && (line["file"] != secret || line["level"] != "WARN") {
				t.Fatalf("warning %v", line)
			}
			a.Signal(syscall.SIGTERM)
			a.Wait(30 * time.Second)
		})
	}
}

// TestAgentListenFlagReplacesTheFilesListeners: two nodes on one host
// share a config file; --listen (or TETHER_LISTEN) gives each its port.
func TestAgentListenFlagReplacesTheFilesListeners(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "tether.json")
	testutil.WriteFile(t, cfg, strings.Replace(configFor(catchAll, testutil.NewBackend(t, "b1")), `"127.0.0.1:0"`, `"127.0.0.1:1"`, 1)) // a port no node can bind
	a1 := startAgent(t, cfg, nil, "--listen", testutil.FreeAddr(t), "--no-access-log")
	a2 := startAgent(t, cfg, []string{"TETHER_LISTEN=" + testutil.FreeAddr(t)}, "--no-access-log")
	for _, a := range []*agent{a1, a2} {
		if st, _, body := testutil.Get(t, http.DefaultClient, a.proxyURL+"/x", nil); st != 200 || body != "b1 /x" {
			t.Fatalf("GET %s: %d %q", a.proxyURL, st, body)
		}
	}
}

// TestConfigFileMistakesNameTheFile: a missing file or a JSON syntax
// error is told in the operator's words, naming the file (and the flag),
// the line and column, with no parser's name.
func TestConfigFileMistakesNameTheFile(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.json")
	testutil.WriteFile(t, bad, "{\n  \"ReverseProxy\": {\n    \"Routes\": { \"a\": }\n  }\n}\n")
	comma := filepath.Join(dir, "comma.json")
	testutil.WriteFile(t, comma, "{\n  \"Urls\": \"http://127.0.0.1:1\"\n  \"ReverseProxy\": {}\n}\n")
	badYAML := filepath.Join(dir, "bad.yaml")
	testutil.WriteFile(t, badYAML, "Urls: [\n")
	missing := filepath.Join(dir, "nosuch.json")
	for _, tc := range []struct {
		desc string
		args []string
		want []string
	}{
		{"validate of a missing file", []string{"config", "validate", missing}, []string{missing + ": no such file"}},
		{"agent with a missing --config", []string{"agent", "--config", missing, "--admin-addr", "127.0.0.1:0", "--data-dir", dir},
			[]string{"--config " + missing + ": no such file"}},
		{"a value missing", []string{"config", "validate", bad}, []string{bad + ":3:22: invalid JSON: a value is missing before '}'"}},
		{"a comma missing", []string{"config", "validate", comma}, []string{comma + ":3:3: invalid JSON: a ',' or '}' is missing before '\"'"}},
		{"agent with a JSON error", []string{"agent", "--config", bad, "--admin-addr", "127.0.0.1:0", "--data-dir", dir},
			[]string{bad + ":3:22: invalid JSON"}},
		{"YAML", []string{"config", "validate", badYAML}, []string{badYAML + ":1: invalid YAML: did not find expected node content"}},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			code, out := run(t, nil, tc.args...)
			if code == 0 {
				t.Fatalf("exit 0:\n%s", out)
			}
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("output lacks %q:\n%s", w, out)
				}
			}
			for _, leak := range []string{"hujson", "yaml: ", "$: ", "open "} {
				if strings.Contains(out, leak) {
					t.Errorf("output has %q:\n%s", leak, out)
				}
			}
			if strings.Contains(out, "no such file") && strings.Contains(out, "is not valid") {
				t.Errorf("a missing file is called invalid:\n%s", out)
			}
		})
	}
}
