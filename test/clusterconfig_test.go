package test

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tether-proxy/tether/test/testutil"
)

// pushedConfig is a file to push: the route "all" to cluster app (base,
// as the nodes' own file has it) and a route "new" for /new/... to a
// cluster of its own with backend nb.
func pushedConfig(base, nb *testutil.Backend, extra string) string {
	return fmt.Sprintf(`{
  // comments, as in appsettings.json
  "ReverseProxy": {
    "Routes": {
      "all": { "ClusterId": "app", "Match": { "Path": "{**catch-all}" } },
      "new": { "ClusterId": "fresh", "Match": { "Path": "/new/{**rest}" } }%s
    },
    "Clusters": {
      "app": { "Destinations": { "%s": { "Address": "%s/" } } },
      "fresh": { "Destinations": { "%s": { "Address": "%s/" } } },
    },
  },
}`, extra, base.Name, base.URL(), nb.Name, nb.URL())
}

// configVersionOf is the version a node says it applied (-1: no answer).
func configVersionOf(t *testing.T, a *clusterAgent) float64 {
	st, m := adminJSON(t, "GET", a.adminURL+"/v1/status")
	if st != 200 {
		return -1
	}
	v, _ := m["config_version"].(float64)
	return v
}

// backendOf is the backend a GET of path through the node's proxy reached ("" if none).
func backendOf(a *clusterAgent, path string) string {
	resp, err := http.Get(a.proxyURL + path)
	if err != nil {
		return ""
	}
	resp.Body.Close()
	return resp.Header.Get("X-Demo-Backend")
}

// servesEverywhere waits until every node applied version and its proxy
// sends path to backend.
func servesEverywhere(t *testing.T, nodes []*clusterAgent, version float64, path, backend string) {
	t.Helper()
	for _, a := range nodes {
		testutil.Eventually(t, 20*time.Second, fmt.Sprintf("%s to apply version %v and send %s to %s", a.id, version, path, backend), func() bool {
			return configVersionOf(t, a) == version && backendOf(a, path) == backend
		})
	}
}

// diffLine says whether a unified diff has a line starting with op that holds s.
func diffLine(diff string, op byte, s string) bool {
	for _, l := range strings.Split(diff, "\n") {
		if len(l) > 0 && l[0] == op && strings.Contains(l, s) {
			return true
		}
	}
	return false
}

func writeConfig(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	testutil.WriteFile(t, p, content)
	return p
}

// TestConfigPushReachesEveryNode: three nodes; pushes through a follower
// reach every node's data path; an invalid push and a stale one exit 1
// with every error at its path or the version that came first, and change
// nothing; of concurrent pushes with the same --if-version exactly one
// wins; history, show, diff and rollback through the built binary.
func TestConfigPushReachesEveryNode(t *testing.T) {
	base, nb1, nb2 := testutil.NewBackend(t, "base"), testutil.NewBackend(t, "nb1"), testutil.NewBackend(t, "nb2")
	e := newClusterEnv(t, configFor(catchAll, base))
	nodes := e.form(3)
	var follower *clusterAgent
	testutil.Eventually(t, 30*time.Second, "a leader", func() bool { return leaderOf(t, nodes[0]) != "" })
	for _, a := range nodes {
		if a.id != leaderOf(t, a) {
			follower = a
			break
		}
	}
	// Before any push every node serves its own file.
	for _, a := range nodes {
		if got := backendOf(a, "/new/x"); got != "base" || configVersionOf(t, a) != 0 {
			t.Fatalf("%s before a push: /new/x reached %q, config_version %v", a.id, got, configVersionOf(t, a))
		}
	}

	v1 := writeConfig(t, "v1.json", pushedConfig(base, nb1, ""))
	code, out := run(t, nil, "config", "push", v1, "--admin", follower.adminURL)
	if code != 0 || !strings.HasPrefix(out, "pushed version 1 (") {
		t.Fatalf("push through follower %s: exit %d:\n%s", follower.id, code, out)
	}
	servesEverywhere(t, nodes, 1, "/new/x", "nb1")

	// Invalid: every error with its path, exit 1, nothing changes.
	bad := writeConfig(t, "bad.json", `{"Kestrel": {"Endpoints": {}}, "ReverseProxy": {"Routes": {"r": {"ClusterId": "nope", "Match": {"Path": "/r"}}}}}`)
	code, out = run(t, nil, "config", "push", bad, "--admin", nodes[0].adminURL)
	if code != 1 || strings.Contains(out, "Kestrel") || !strings.Contains(out, "ReverseProxy.Routes.r.ClusterId") || !strings.Contains(out, "is not valid") {
		t.Fatalf("invalid push: exit %d, want 1 naming ReverseProxy.Routes.r.ClusterId alone (Kestrel is left out, not wrong):\n%s", code, out)
	}

	v2 := writeConfig(t, "v2.json", pushedConfig(base, nb2, ""))
	code, out = run(t, nil, "config", "push", v2, "--if-version", "1", "--admin", nodes[2].adminURL)
	if code != 0 || !strings.HasPrefix(out, "pushed version 2 (") {
		t.Fatalf("push --if-version 1: exit %d:\n%s", code, out)
	}
	servesEverywhere(t, nodes, 2, "/new/x", "nb2")
	// Stale: exit 1 naming the current version.
	code, out = run(t, nil, "config", "push", v1, "--if-version", "1", "--admin", follower.adminURL)
	if code != 1 || !strings.Contains(out, "at version 2, not 1") {
		t.Fatalf("stale push: exit %d, want 1 naming version 2:\n%s", code, out)
	}

	// Concurrent pushes based on version 2, one through each node and two
	// more: exactly one wins.
	type result struct {
		code int
		out  string
	}
	results := make([]result, 5)
	var wg sync.WaitGroup
	for i := range results {
		f := writeConfig(t, fmt.Sprintf("c%d.json", i), pushedConfig(base, nb1, fmt.Sprintf(`, "c%d": { "ClusterId": "fresh", "Match": { "Path": "/c%d" } }`, i, i)))
		wg.Go(func() {
			out, err := exec.Command(tetherBin, "config", "push", f, "--if-version", "2", "--admin", nodes[i%3].adminURL).CombinedOutput()
			results[i] = result{0, string(out)}
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				results[i].code = ee.ExitCode()
			} else if err != nil {
				results[i].code = -1
			}
		})
	}
	wg.Wait()
	winner := -1
	for i, r := range results {
		switch {
		case r.code == 0 && winner < 0 && strings.HasPrefix(r.out, "pushed version 3 ("):
			winner = i
		case r.code == 1 && strings.Contains(r.out, "at version 3, not 2"):
		default:
			t.Errorf("concurrent push %d: exit %d:\n%s", i, r.code, r.out)
		}
	}
	if winner < 0 {
		t.Fatalf("no concurrent push won: %v", results)
	}
	servesEverywhere(t, nodes, 3, fmt.Sprintf("/c%d", winner), "nb1")
	for i := range results {
		if i != winner && backendOf(nodes[0], fmt.Sprintf("/c%d", i)) != "base" {
			t.Errorf("the losing push %d's route is served", i)
		}
	}

	// History, show and diff as an operator reads them.
	code, out = run(t, nil, "config", "history", "--admin", nodes[1].adminURL)
	if code != 0 || !strings.Contains(out, "VERSION") || strings.Count(out, "\n") != 4 {
		t.Fatalf("history: exit %d:\n%s", code, out)
	}
	code, out = run(t, nil, "config", "show", "--version", "1", "--admin", nodes[1].adminURL)
	if code != 0 || !strings.Contains(out, nb1.URL()) || strings.Contains(out, nb2.URL()) {
		t.Fatalf("show --version 1: exit %d:\n%s", code, out)
	}
	code, out = run(t, nil, "config", "diff", "1", "2", "--admin", nodes[1].adminURL)
	if code != 0 || !diffLine(out, '-', nb1.URL()) || !diffLine(out, '+', nb2.URL()) || !strings.HasPrefix(out, "--- version 1 (") {
		t.Fatalf("diff 1 2: exit %d:\n%s", code, out)
	}

	// Rollback: version 1's content as version 4, everywhere.
	code, out = run(t, nil, "config", "rollback", "2", "--admin", follower.adminURL)
	if code != 0 || !strings.HasPrefix(out, "rolled back to version 2 as version 4") {
		t.Fatalf("rollback 2: exit %d:\n%s", code, out)
	}
	servesEverywhere(t, nodes, 4, "/new/x", "nb2")
	for _, a := range nodes {
		if got := backendOf(a, fmt.Sprintf("/c%d", winner)); got != "base" {
			t.Errorf("%s after the rollback: /c%d reached %q, want base (the route is gone)", a.id, winner, got)
		}
	}
	code, out = run(t, nil, "config", "diff", "2", "4", "--admin", follower.adminURL)
	if code != 0 || out != "2 and 4 are the same\n" {
		t.Fatalf("diff 2 4 (a rollback to 2): exit %d, want no difference:\n%s", code, out)
	}

	// What show prints pushes back as it is: the safe edit.
	shown, err := exec.Command(tetherBin, "config", "show", "--admin", nodes[0].adminURL).Output()
	if err != nil {
		t.Fatalf("show: %v", err)
	}
	edited := writeConfig(t, "edited.json", strings.Replace(string(shown), nb2.URL(), nb1.URL(), 1))
	code, out = run(t, nil, "config", "push", edited, "--if-version", "4", "--admin", nodes[0].adminURL)
	if code != 0 || !strings.HasPrefix(out, "pushed version 5 (") {
		t.Fatalf("push of show's output, edited: exit %d:\n%s", code, out)
	}
	servesEverywhere(t, nodes, 5, "/new/x", "nb1")

	// tether members: every member's version, as its gossip says.
	testutil.Eventually(t, 20*time.Second, "tether members to show version 5 on every member", func() bool {
		code, out := run(t, nil, "members", "--json", "--admin", follower.adminURL)
		var m struct {
			Members []struct {
				ConfigVersion float64 `json:"config_version"`
			}
		}
		if code != 0 || json.Unmarshal([]byte(out), &m) != nil || len(m.Members) != 3 {
			return false
		}
		for _, r := range m.Members {
			if r.ConfigVersion != 5 {
				return false
			}
		}
		return true
	})
	if code, out := run(t, nil, "members", "--admin", follower.adminURL); code != 0 || !strings.Contains(out, "CONFIG_VERSION  CONFIG_ERROR") {
		t.Fatalf("tether members: exit %d, want CONFIG_VERSION and CONFIG_ERROR columns:\n%s", code, out)
	}
}

// TestConfigRestartedNodeServesTheClusterVersion: a node restarted with its
// data serves the cluster's version from its first request, not its own
// file, which it says differs; a minority (two of three nodes killed)
// cannot push, and the survivor keeps serving its last version.
func TestConfigRestartedNodeServesTheClusterVersion(t *testing.T) {
	base, nb := testutil.NewBackend(t, "base"), testutil.NewBackend(t, "nb")
	e := newClusterEnv(t, configFor(catchAll, base))
	nodes := e.form(3)
	f := writeConfig(t, "v1.json", pushedConfig(base, nb, ""))
	if code, out := run(t, nil, "config", "push", f, "--admin", nodes[0].adminURL); code != 0 {
		t.Fatalf("push: exit %d:\n%s", code, out)
	}
	servesEverywhere(t, nodes, 1, "/new/x", "nb")

	old := nodes[1]
	old.proc.Signal(syscall.SIGTERM)
	if code := old.proc.Wait(30 * time.Second); code != 0 {
		t.Fatalf("%s exited %d", old.id, code)
	}
	back := e.startNode(old.id, old.dataDir, old.extra...)
	// The first request, as soon as the listeners are open.
	if got := backendOf(back, "/new/x"); got != "nb" {
		t.Fatalf("the restarted node's first request reached %q, want nb (the cluster's version, not its file's)", got)
	}
	testutil.Eventually(t, 10*time.Second, "the restarted node's warning that its file differs", func() bool {
		return strings.Contains(back.Stderr.String(), "differs from the cluster's version 1")
	})
	if n := strings.Count(back.Stderr.String(), "differs from the cluster's version"); n != 1 {
		t.Errorf("the warning is logged %d times at start, want once", n)
	}
	nodes[1] = back
	servesEverywhere(t, nodes, 1, "/new/x", "nb")

	// A minority: two of three killed.
	survivor := nodes[2]
	for _, a := range nodes[:2] {
		a.proc.Signal(syscall.SIGKILL)
		a.proc.Wait(10 * time.Second)
	}
	testutil.Eventually(t, 30*time.Second, survivor.id+" to lose its leader", func() bool { return leaderOf(t, survivor) == "" })
	v2 := writeConfig(t, "v2.json", pushedConfig(base, base, ""))
	code, out := run(t, nil, "config", "push", v2, "--timeout", "20s", "--admin", survivor.adminURL)
	if code != 1 || !strings.Contains(out, "503") {
		t.Fatalf("push to a minority: exit %d, want 1 with a 503:\n%s", code, out)
	}
	for range 20 {
		if got := backendOf(survivor, "/new/x"); got != "nb" {
			t.Fatalf("the minority node sent /new/x to %q, want nb (its last version)", got)
		}
	}
	if v := configVersionOf(t, survivor); v != 1 {
		t.Fatalf("the minority node's config_version is %v, want 1", v)
	}
}

// TestConfigPushOfAWholeYARPAppsettings: a YARP fleet's appsettings.json,
// pushed as it is (ASP.NET's boilerplate, Kestrel, an application's own
// section), becomes the cluster's ReverseProxy section on every node; the
// push names each section it left out, and only ReverseProxy is stored.
func TestConfigPushOfAWholeYARPAppsettings(t *testing.T) {
	base, shop := testutil.NewBackend(t, "base"), testutil.NewBackend(t, "shop")
	e := newClusterEnv(t, configFor(catchAll, base))
	nodes := e.form(3)
	appsettings := writeConfig(t, "appsettings.json", fmt.Sprintf(`{
  "$schema": "https://json.schemastore.org/appsettings.json",
  "Logging": {
    "LogLevel": { "Default": "Information", "Microsoft.AspNetCore": "Warning", "Yarp": "Information" }
  },
  "AllowedHosts": "*",
  "ConnectionStrings": { "Sessions": "Server=db;Database=sessions;Password=not-for-the-cluster" },
  "Kestrel": {
    "Endpoints": { "http": { "Url": "http://0.0.0.0:5000" } }
  },
  "ReverseProxy": {
    "Routes": {
      "shop": { "ClusterId": "shop", "Match": { "Path": "/shop/{**rest}" } },
      "all": { "ClusterId": "app", "Match": { "Path": "{**catch-all}" } }
    },
    "Clusters": {
      "shop": { "Destinations": { "shop-1": { "Address": "%s/" } } },
      "app": { "Destinations": { "base": { "Address": "%s/" } } }
    }
  }
}`, shop.URL(), base.URL()))

	code, out := run(t, nil, "config", "push", appsettings, "--admin", nodes[1].adminURL)
	if code != 0 || !strings.Contains(out, "pushed version 1 (") {
		t.Fatalf("push of appsettings.json as it is: exit %d, want 0:\n%s", code, out)
	}
	for _, section := range []string{"AllowedHosts", "ConnectionStrings", "Kestrel", "Logging"} {
		if !strings.Contains(out, "warning: "+section+": ") {
			t.Errorf("the push does not name the section it left out, %s:\n%s", section, out)
		}
	}
	if !strings.Contains(out, "warning: Kestrel: a node's own setting, not pushed; each node keeps its file's\n") {
		t.Errorf("the push does not say Kestrel stays each node's:\n%s", out)
	}
	if strings.Contains(out, "$schema") {
		t.Errorf("the push names $schema, which every loader ignores:\n%s", out)
	}
	servesEverywhere(t, nodes, 1, "/shop/cart", "shop")
	for _, a := range nodes {
		if got := backendOf(a, "/other"); got != "base" {
			t.Errorf("%s sent /other to %q, want base", a.id, got)
		}
	}
	// Only the ReverseProxy section is the cluster's.
	code, out = run(t, nil, "config", "show", "--admin", nodes[2].adminURL)
	if code != 0 || !strings.Contains(out, `"shop-1"`) {
		t.Fatalf("show: exit %d:\n%s", code, out)
	}
	for _, s := range []string{"ConnectionStrings", "not-for-the-cluster", "Kestrel", "5000", "Logging", "AllowedHosts"} {
		if strings.Contains(out, s) {
			t.Errorf("the cluster's version holds %s:\n%s", s, out)
		}
	}
}
