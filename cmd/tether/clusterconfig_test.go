package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeConfigAPI is the config endpoints of the admin API as the contract
// (docs/API.md) has them, in memory: enough to drive the commands.
type fakeConfigAPI struct {
	mu       sync.Mutex
	versions []fakeVersion // version i+1 at i
	bodies   []string      // the bodies of the writes received
}

type fakeVersion struct {
	Version uint64          `json:"version"`
	Time    time.Time       `json:"time"`
	Summary string          `json:"summary"`
	Config  json.RawMessage `json:"config"`
}

func (f *fakeConfigAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	reply := func(status int, v any) {
		w.WriteHeader(status)
		json.NewEncoder(w).Encode(v)
	}
	cur := uint64(len(f.versions))
	body, _ := io.ReadAll(r.Body)
	if r.Method != http.MethodGet {
		f.bodies = append(f.bodies, string(body))
		if m := strings.Trim(r.Header.Get("If-Match"), `"`); m != "" && m != strconv.FormatUint(cur, 10) {
			reply(412, map[string]any{"error": fmt.Sprintf("config version is %d, not %s", cur, m), "version": cur})
			return
		}
	}
	commit := func(content json.RawMessage, summary string, warnings []string) {
		v := fakeVersion{Version: cur + 1, Time: time.Date(2026, 12, 6, 11, int(cur), 0, 0, time.UTC), Summary: summary, Config: content}
		f.versions = append(f.versions, v)
		answer := map[string]any{"version": v.Version, "index": 10 + v.Version, "summary": summary}
		if len(warnings) > 0 {
			answer["warnings"] = warnings
		}
		reply(200, answer)
	}
	switch {
	case r.Method == http.MethodPut && r.URL.Path == "/v1/config":
		var file map[string]json.RawMessage
		if err := json.Unmarshal(body, &file); err != nil {
			reply(400, map[string]any{"error": "config invalid: 1 errors", "errors": []map[string]string{{"path": "$", "error": err.Error()}}})
			return
		}
		var errs []map[string]string
		var warnings []string
		var section json.RawMessage
		for _, k := range slices.Sorted(maps.Keys(file)) {
			if strings.EqualFold(k, "ReverseProxy") {
				section = file[k]
			} else {
				warnings = append(warnings, k+": a node's own setting, not pushed; each node keeps its file's")
			}
		}
		if section == nil {
			errs = append(errs, map[string]string{"path": "ReverseProxy", "error": "missing: a pushed config holds the ReverseProxy section"})
		}
		var rp struct{ Routes map[string]map[string]any }
		json.Unmarshal(section, &rp)
		for id, route := range rp.Routes {
			if route["Match"] == nil {
				errs = append(errs, map[string]string{"path": "ReverseProxy.Routes." + id + ".Match", "error": "a route needs a Match"})
			}
		}
		if len(errs) > 0 {
			reply(400, map[string]any{"error": fmt.Sprintf("config invalid: %d errors", len(errs)), "errors": errs})
			return
		}
		commit(json.RawMessage(`{"ReverseProxy":`+string(section)+`}`), fmt.Sprintf("%d routes", len(rp.Routes)), warnings)
	case r.Method == http.MethodPost && r.URL.Path == "/v1/config/rollback":
		var req struct{ Version uint64 }
		json.Unmarshal(body, &req)
		if req.Version == 0 || req.Version > cur {
			reply(404, map[string]any{"error": fmt.Sprintf("version %d is not kept", req.Version)})
			return
		}
		commit(f.versions[req.Version-1].Config, fmt.Sprintf("rollback to version %d", req.Version), nil)
	case r.URL.Path == "/v1/config":
		if cur == 0 {
			reply(200, map[string]any{"version": 0, "config": nil})
			return
		}
		reply(200, f.versions[cur-1])
	case strings.HasPrefix(r.URL.Path, "/v1/config/versions/"):
		n, _ := strconv.ParseUint(strings.TrimPrefix(r.URL.Path, "/v1/config/versions/"), 10, 64)
		if n == 0 || n > cur {
			reply(404, map[string]any{"error": fmt.Sprintf("version %d is not kept", n)})
			return
		}
		reply(200, f.versions[n-1])
	case r.URL.Path == "/v1/config/history":
		var out []map[string]any
		for i := len(f.versions) - 1; i >= 0; i-- {
			v := f.versions[i]
			out = append(out, map[string]any{"version": v.Version, "time": v.Time, "summary": v.Summary})
		}
		reply(200, map[string]any{"versions": out})
	default:
		reply(404, map[string]any{"error": "no such endpoint"})
	}
}

// tetherRun runs the command tree in process with args and returns what
// it wrote and the error main would print.
func tetherRun(t *testing.T, stdin string, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	root := rootCmd()
	var out, errOut strings.Builder
	root.SetArgs(args)
	root.SetIn(strings.NewReader(stdin))
	root.SetOut(&out)
	root.SetErr(&errOut)
	err = root.Execute()
	return out.String(), errOut.String(), err
}

func writeTemp(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestConfigCommandsAgainstTheAPI: push (JSON with comments, YAML, stdin),
// every refusal, show, history, diff and rollback, as a user sees them.
func TestConfigCommandsAgainstTheAPI(t *testing.T) {
	api := &fakeConfigAPI{}
	srv := httptest.NewServer(api)
	defer srv.Close()
	t.Setenv("TETHER_ADMIN", srv.URL)
	t.Setenv("TETHER_IF_VERSION", "99") // a precondition is never taken from the environment
	t.Setenv("TETHER_VERSION", "1.2.3")

	out, errOut, err := tetherRun(t, "", "config", "show")
	if err != nil || out != "" || !strings.Contains(errOut, "version 0: nothing was pushed") {
		t.Fatalf("show before a push: %q %q %v", out, errOut, err)
	}

	if out, _, err = tetherRun(t, "", "config", "show", "--json"); err != nil || out != "{\n  \"version\": 0,\n  \"config\": null\n}\n" {
		t.Fatalf("show --json before a push: %q %v", out, err)
	}

	v1 := writeTemp(t, "v1.json", `{
  // appsettings.json style: comments and trailing commas
  "ReverseProxy": { "Routes": { "r1": { "ClusterId": "c1", "Match": { "Path": "/a" } }, }, },
}`)
	out, _, err = tetherRun(t, "", "config", "push", v1)
	if err != nil || out != "pushed version 1 (1 routes)\n" {
		t.Fatalf("push: %q %v", out, err)
	}
	if got := api.bodies[0]; strings.Contains(got, "//") || json.Valid([]byte(got)) == false {
		t.Fatalf("the push sent %q: want plain JSON", got)
	}

	v2 := writeTemp(t, "v2.yaml", "ReverseProxy:\n  Routes:\n    r1: {ClusterId: c1, Match: {Path: /a}}\n    r2: {ClusterId: c1, Match: {Path: /b}}\n")
	out, _, err = tetherRun(t, "", "config", "push", "--if-version", "1", v2)
	if err != nil || out != "pushed version 2 (2 routes)\n" {
		t.Fatalf("push of YAML with --if-version 1: %q %v", out, err)
	}

	// A stale precondition names the cluster's version; nothing changes.
	_, _, err = tetherRun(t, "", "config", "push", "--if-version", "1", v1)
	if err == nil || !strings.Contains(err.Error(), "the cluster's config is at version 2, not 1") || !strings.Contains(err.Error(), "--if-version 2") || errors.As(err, new(usageError)) {
		t.Fatalf("stale push: %v", err)
	}
	// Every validation error with its path, then one line.
	bad := writeTemp(t, "bad.json", `{"ReverseProxy": {"Routes": {"r8": {"ClusterId": "c1"}, "r9": {"ClusterId": "c1"}}}}`)
	_, errOut, err = tetherRun(t, "", "config", "push", bad)
	if err == nil || !strings.Contains(err.Error(), bad+" is not valid: config invalid: 2 errors (HTTP 400); the cluster's version is unchanged") ||
		!strings.Contains(errOut, "ReverseProxy.Routes.r8.Match: a route needs a Match\n") ||
		!strings.Contains(errOut, "ReverseProxy.Routes.r9.Match: a route needs a Match\n") {
		t.Fatalf("invalid push: %v\nstderr:\n%s", err, errOut)
	}
	// A file that does not parse is refused before anything is sent.
	sent := len(api.bodies)
	broken := writeTemp(t, "broken.json", "{\n  \"ReverseProxy\": {\n    \"Routes\": \n}")
	_, _, err = tetherRun(t, "", "config", "push", broken)
	if err == nil || !strings.Contains(err.Error(), broken+":") || len(api.bodies) != sent {
		t.Fatalf("a broken file: %v (%d requests sent)", err, len(api.bodies)-sent)
	}
	_, _, err = tetherRun(t, "", "config", "push", filepath.Join(t.TempDir(), "missing.json"))
	if err == nil || !strings.Contains(err.Error(), "no such file") {
		t.Fatalf("a missing file: %v", err)
	}

	// A whole appsettings.json as it is: pushed, each section the leader
	// left out named in a warning.
	appsettings := writeTemp(t, "appsettings.json", `{
  "Logging": { "LogLevel": { "Default": "Information" } },
  "AllowedHosts": "*",
  "reverseProxy": { "Routes": { "r1": { "ClusterId": "c1", "Match": { "Path": "/a" } } } }
}`)
	out, errOut, err = tetherRun(t, "", "config", "push", appsettings)
	if err != nil || out != "pushed version 3 (1 routes)\n" ||
		errOut != "warning: AllowedHosts: a node's own setting, not pushed; each node keeps its file's\nwarning: Logging: a node's own setting, not pushed; each node keeps its file's\n" {
		t.Fatalf("a whole appsettings.json: %q %q %v", out, errOut, err)
	}
	if got := api.bodies[len(api.bodies)-1]; !strings.Contains(got, `"Logging"`) {
		t.Fatalf("the push sent %q: want the whole file", got)
	}
	// --reverse-proxy-only sends the section alone and names what it left
	// out (here refused as stale: nothing more is committed).
	_, errOut, err = tetherRun(t, "", "config", "push", "--reverse-proxy-only", "--if-version", "2", appsettings)
	if err == nil || !strings.Contains(err.Error(), "at version 3, not 2") || errOut != "info: left out AllowedHosts, Logging: each node keeps them in its own file\n" {
		t.Fatalf("push --reverse-proxy-only: %q %v", errOut, err)
	}
	if got := api.bodies[len(api.bodies)-1]; got != `{"ReverseProxy":{ "Routes": { "r1": { "ClusterId": "c1", "Match": { "Path": "/a" } } } }}` {
		t.Fatalf("push --reverse-proxy-only sent %q", got)
	}
	if _, _, err = tetherRun(t, `{"Kestrel": {}}`, "config", "push", "--reverse-proxy-only", "-"); err == nil || err.Error() != "- has no ReverseProxy section: there is nothing to push" {
		t.Fatalf("--reverse-proxy-only without the section: %v", err)
	}
	// The section twice (in any case) is refused, as a load and the
	// leader refuse it, never one copy kept silently; comments are
	// allowed, as in a file a node loads.
	sent = len(api.bodies)
	if _, _, err = tetherRun(t, `{"ReverseProxy": {"Routes": {}}, "reverseproxy": {}}`, "config", "push", "--reverse-proxy-only", "-"); err == nil || err.Error() != `-: "reverseproxy" given twice (same as "ReverseProxy"; keys are case-insensitive)` || len(api.bodies) != sent {
		t.Fatalf("--reverse-proxy-only with the section twice: %v (%d requests sent)", err, len(api.bodies)-sent)
	}
	if _, errOut, err = tetherRun(t, "{\n  // the fleet's routes\n  \"ReverseProxy\": {\"Routes\": {}}, /* ours */ \"Logging\": {}\n}", "config", "push", "--reverse-proxy-only", "--if-version", "2", "-"); err == nil || !strings.Contains(err.Error(), "at version 3, not 2") || errOut != "info: left out Logging: each node keeps them in its own file\n" {
		t.Fatalf("--reverse-proxy-only with comments: %q %v", errOut, err)
	}
	if got := api.bodies[len(api.bodies)-1]; got != `{"ReverseProxy":{"Routes": {}}}` {
		t.Fatalf("push --reverse-proxy-only with comments sent %q", got)
	}

	// stdin, and the JSON answer.
	out, _, err = tetherRun(t, `{"ReverseProxy": {"Routes": {}}}`, "config", "push", "-", "--json")
	var answer map[string]any
	if err != nil || json.Unmarshal([]byte(out), &answer) != nil || answer["version"] != 4.0 || answer["index"] != 14.0 {
		t.Fatalf("push from stdin: %q %v", out, err)
	}

	out, errOut, err = tetherRun(t, "", "config", "show", "--version", "2")
	if err != nil || !strings.HasPrefix(errOut, "version 2, 2026-12-06 11:01:00Z: 2 routes") || !strings.Contains(out, "\n      \"r2\": {\n") {
		t.Fatalf("show --version 2: %q %q %v", out, errOut, err)
	}
	if _, _, err := tetherRun(t, "", "config", "show", "--version", "7"); err == nil || !strings.Contains(err.Error(), "version 7 is not kept (HTTP 404)") {
		t.Fatalf("show --version 7: %v", err)
	}

	out, _, err = tetherRun(t, "", "config", "history")
	want := "VERSION  TIME                  SUMMARY\n4        2026-12-06 11:03:00Z  0 routes\n3        2026-12-06 11:02:00Z  1 routes\n2        2026-12-06 11:01:00Z  2 routes\n1        2026-12-06 11:00:00Z  1 routes\n"
	if err != nil || out != want {
		t.Fatalf("history:\n%s\nwant:\n%s(%v)", out, want, err)
	}

	out, _, err = tetherRun(t, "", "config", "diff", "1", "2")
	wantDiff := `--- version 1 (2026-12-06 11:00:00Z)
+++ version 2 (2026-12-06 11:01:00Z)
@@ -6,6 +6,12 @@
         "Match": {
           "Path": "/a"
         }
+      },
+      "r2": {
+        "ClusterId": "c1",
+        "Match": {
+          "Path": "/b"
+        }
       }
     }
   }
`
	if err != nil || out != wantDiff {
		t.Fatalf("diff 1 2:\n%s\nwant:\n%s(%v)", out, wantDiff, err)
	}
	// A local file against a version: only its ReverseProxy section.
	whole := writeTemp(t, "whole.json", `{"Kestrel": {"Endpoints": {}}, "ReverseProxy": {"Routes": {"r1": {"Match": {"Path": "/a"}, "ClusterId": "c1"}}}}`)
	out, errOut, err = tetherRun(t, "", "config", "diff", "file:"+whole, "1")
	if err != nil || out != "" || !strings.Contains(errOut, "are the same") {
		t.Fatalf("diff file: 1: %q %q %v", out, errOut, err)
	}
	out, _, err = tetherRun(t, "", "config", "diff", "0", "1")
	if err != nil || !strings.HasPrefix(out, "--- version 0 (nothing pushed)\n+++ version 1 (2026-12-06 11:00:00Z)\n@@ -0,0 +1,12 @@\n+{\n") {
		t.Fatalf("diff 0 1:\n%s(%v)", out, err)
	}
	if _, _, err := tetherRun(t, "", "config", "diff", "1", "latest"); !errors.As(err, new(usageError)) || !strings.Contains(err.Error(), `"latest" is not a version`) {
		t.Fatalf("diff 1 latest: %v, want a usage error", err)
	}

	out, _, err = tetherRun(t, "", "config", "rollback", "1")
	if err != nil || out != "rolled back to version 1 as version 5 (rollback to version 1)\n" {
		t.Fatalf("rollback: %q %v", out, err)
	}
	if _, _, err := tetherRun(t, "", "config", "rollback", "--if-version", "3", "2"); err == nil || !strings.Contains(err.Error(), "at version 5, not 3") {
		t.Fatalf("stale rollback: %v", err)
	}
	if got := api.bodies[len(api.bodies)-1]; got != `{"version":2}` {
		t.Fatalf("rollback sent %q", got)
	}
}
