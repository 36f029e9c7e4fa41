package test

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tether-proxy/tether/test/testutil"
)

// TestClientOutputReadsAsText: tables print times to the second, name the
// cluster on every destination row with its affinity outcomes in words,
// count in the singular when there is one, suggest the nearest cluster for
// a typo, and --help says what the cluster secret protects.
func TestClientOutputReadsAsText(t *testing.T) {
	dir := t.TempDir()
	cfg, secret := filepath.Join(dir, "tether.json"), filepath.Join(dir, "secret")
	testutil.WriteFile(t, cfg, `{"Listeners": [{"Address": "127.0.0.1:0"}], "ReverseProxy": {
	  "Routes": {"all": {"ClusterId": "cluster1", "Match": {"Path": "{**catch-all}"}}},
	  "Clusters": {"cluster1": {
	    "SessionAffinity": {"Enabled": true, "Policy": "Cookie", "AffinityKeyName": ".T"},
	    "Destinations": {"d1": {"Address": "`+testutil.NewBackend(t, "d1").URL()+`"}}}}}}`)
	testutil.WriteFile(t, secret, "an-e2e-cluster-secret-0123456789abcdef")
	os.Chmod(secret, 0o600)
	gossip := testutil.FreeAddr(t)
	a := startAgent(t, cfg, nil, "--cluster-secret-file", secret, "--raft-addr", testutil.FreeAddr(t), "--gossip-addr", gossip, "--no-access-log")
	defer func() { a.Signal(syscall.SIGTERM); a.Wait(30 * time.Second) }()
	admin := []string{"--admin", a.adminURL}

	t.Run("an unknown cluster suggests the nearest", func(t *testing.T) {
		code, out := run(t, nil, append([]string{"destinations", "clustr1"}, admin...)...)
		if code == 0 || !strings.Contains(out, `there is no cluster "clustr1"; did you mean cluster1?`) {
			t.Fatalf("exit %d:\n%s", code, out)
		}
		f := filepath.Join(t.TempDir(), "typo.json")
		testutil.WriteFile(t, f, `{"ReverseProxy": {"Routes": {"all": {"ClusterId": "clustr1", "Match": {"Path": "/"}}},
		  "Clusters": {"cluster1": {"Destinations": {"d1": {"Address": "http://127.0.0.1:9/"}}}}}}`)
		if code, out := run(t, nil, "config", "validate", f); code == 0 || !strings.Contains(out, `ReverseProxy.Routes.all.ClusterId: no cluster named "clustr1"; did you mean cluster1?`) {
			t.Fatalf("validate: exit %d:\n%s", code, out)
		}
	})
	t.Run("one route, one cluster", func(t *testing.T) {
		if code, out := run(t, nil, "config", "validate", cfg); code != 0 || !strings.Contains(out, "is valid: 1 route, 1 cluster\n") {
			t.Fatalf("exit %d:\n%s", code, out)
		}
	})
	t.Run("times print to the second", func(t *testing.T) {
		if code, out := run(t, nil, append([]string{"keyring", "rotate"}, admin...)...); code != 0 {
			t.Fatalf("rotate: %s", out)
		}
		code, out := run(t, nil, append([]string{"keyring", "list"}, admin...)...)
		if code != 0 || regexp.MustCompile(`:\d\d\.\d`).MatchString(out) || !regexp.MustCompile(`\d{4}-\d\d-\d\d \d\d:\d\d:\d\dZ`).MatchString(out) {
			t.Fatalf("keyring list: exit %d, want times to the second:\n%s", code, out)
		}
	})
	t.Run("destinations of one cluster show the cluster and affinity in words", func(t *testing.T) {
		testutil.Get(t, http.DefaultClient, a.proxyURL+"/", nil)
		code, out := run(t, nil, append([]string{"destinations", "cluster1"}, admin...)...)
		if code != 0 {
			t.Fatalf("exit %d:\n%s", code, out)
		}
		if strings.Contains(out, "{") {
			t.Errorf("JSON in the table:\n%s", out)
		}
		if !strings.Contains(out, "1 without a session") {
			t.Errorf("affinity does not read as words:\n%s", out)
		}
		var row string
		for _, l := range strings.Split(out, "\n") {
			if f := strings.Fields(l); len(f) > 2 && f[1] == "d1" {
				row = l
			}
		}
		if !strings.HasPrefix(row, "cluster1 ") {
			t.Errorf("the row of d1 does not name its cluster:\n%s", out)
		}
	})
	t.Run("the cluster secret's help says what it protects", func(t *testing.T) {
		_, out := run(t, nil, "agent", "--help")
		var line string
		for _, l := range strings.Split(out, "\n") {
			if strings.Contains(l, "--cluster-secret-file") {
				line = l
			}
		}
		for _, w := range []string{"gossip", "Raft", "at rest"} {
			if !strings.Contains(line, w) {
				t.Errorf("--cluster-secret-file help lacks %q: %s", w, line)
			}
		}
	})
	t.Run("an --admin that is no admin API says what --admin takes", func(t *testing.T) {
		for _, tc := range []struct{ admin, want string }{
			{"http://" + testutil.FreeAddr(t), "nothing listens there (connection refused): is the agent running"},
			{"http://" + gossip, "it does not answer HTTP (a gossip or Raft port?)"},
			{a.proxyURL, "is it a proxy port?"},
		} {
			code, out := run(t, nil, "status", "--admin", tc.admin)
			if code == 0 || !strings.Contains(out, tc.want) || !strings.Contains(out, "--admin-addr") || strings.Contains(out, "dial tcp") {
				t.Errorf("status --admin %s: exit %d, want %q:\n%s", tc.admin, code, tc.want, out)
			}
		}
	})
	t.Run("JSON stays JSON", func(t *testing.T) {
		code, out := run(t, nil, append([]string{"keyring", "list", "--json"}, admin...)...)
		var v map[string]any
		if code != 0 || json.Unmarshal([]byte(out), &v) != nil {
			t.Fatalf("keyring list --json: exit %d:\n%s", code, out)
		}
	})
}
