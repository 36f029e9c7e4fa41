package node

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tailscale/hujson"

	"github.com/tether-proxy/tether/cluster"
	"github.com/tether-proxy/tether/proxy/config"
	"github.com/tether-proxy/tether/test/testutil"
)

// pushedConfig is a ReverseProxy section over the test cluster's
// destinations with the given extra routes.
func pushedConfig(tc *testCluster, routes ...string) []byte {
	cur, _, err := config.Load(tc.cfgPath)
	if err != nil {
		tc.t.Fatal(err)
	}
	var dests []string
	for _, id := range []string{"d1", "d2"} {
		if d, ok := cur.ReverseProxy.Clusters["app"].Destinations[id]; ok {
			dests = append(dests, fmt.Sprintf(`%q: {"Address": %q}`, id, d.Address))
		}
	}
	r := []string{`"all": {"ClusterId": "app", "Match": {"Path": "{**catch-all}"}}`}
	for _, id := range routes {
		r = append(r, fmt.Sprintf(`%q: {"ClusterId": "app", "Match": {"Path": "/%s/{**rest}"}}`, id, id))
	}
	return fmt.Appendf(nil, `{"ReverseProxy": {"Routes": {%s}, "Clusters": {"app": {
	  "SessionAffinity": {"Enabled": true, "Policy": "Cookie", "AffinityKeyName": "aff", "FailurePolicy": "Return503Error"},
	  "Destinations": {%s}}}}}`, strings.Join(r, ", "), strings.Join(dests, ", "))
}

// servedRoutes are the routes n's data path runs with.
func servedRoutes(n *Node) string {
	n.reloadMu.Lock()
	defer n.reloadMu.Unlock()
	var ids []string
	for id := range n.current.ReverseProxy.Routes {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return fmt.Sprint(ids)
}

// waitVersion waits until every live node serves version v (and, when
// routes is not empty, those routes).
func waitVersion(t *testing.T, tc *testCluster, v uint64, routes string) {
	t.Helper()
	testutil.Eventually(t, 15*time.Second, fmt.Sprintf("config version %d on every node", v), func() bool {
		for _, n := range tc.live() {
			if got, _ := n.clusterCfg.get(); got != v || (routes != "" && servedRoutes(n) != routes) {
				return false
			}
		}
		return true
	})
}

// The cluster's config goes through Raft: a push through a follower is
// served by every node from the same index; of two pushes made against
// the same version exactly one lands; an invalid push changes nothing; a
// rollback is a new version; a node that cannot apply a version keeps its
// own and every node shows why; a restarted node serves the cluster's
// version before it opens its listeners.
func TestClusterConfigThroughRaft(t *testing.T) {
	tc := newTestCluster(t, 2)
	tc.captureLogs()
	// The node named by lacking lacks a file the route "needs-file" would
	// need (a follower: the leader checks a push with its own files).
	var lacking atomic.Pointer[string]
	tc.startThree(func(i int, n *Node) {
		n.clusterCfg.check = func(c *config.Config) error {
			if _, ok := c.ReverseProxy.Routes["needs-file"]; ok && lacking.Load() != nil && *lacking.Load() == n.ID() {
				return errors.New("ReverseProxy.Clusters.app.HttpClient.ClientCertificate.Path: /etc/tether/client.pem: no such file")
			}
			return nil
		}
	})
	tc.waitSettled()
	for _, n := range tc.live() {
		if v, _ := n.clusterCfg.get(); v != 0 || servedRoutes(n) != "[all]" {
			t.Fatalf("%s before any push: version %d, routes %s", n.ID(), v, servedRoutes(n))
		}
	}

	// Through a follower.
	f := tc.follower()
	status, body := adminWith(t, f, "PUT", "/v1/config", nil, pushedConfig(tc, "extra"))
	if status != 200 || body["version"] != 1.0 || body["summary"] != "2 routes, 1 clusters" {
		t.Fatalf("push through %s: %d %v", f.ID(), status, body)
	}
	// The follower answered once it serves it.
	if v, _ := f.clusterCfg.get(); v != 1 || servedRoutes(f) != "[all extra]" {
		t.Fatalf("%s answered the push but serves version %d, routes %s", f.ID(), v, servedRoutes(f))
	}
	waitVersion(t, tc, 1, "[all extra]")
	idx := uint64(body["index"].(float64))
	for _, n := range tc.live() {
		if c := n.store.ConfigCurrent(); c.Index != idx {
			t.Errorf("%s holds version 1 at index %d, the push answered %d", n.ID(), c.Index, idx)
		}
		if status, st := admin(t, n, "GET", "/v1/status", nil); status != 200 || st["config_version"] != 1.0 {
			t.Errorf("%s /v1/status: %d config_version %v", n.ID(), status, st["config_version"])
		}
	}

	// Two pushes against version 1: one lands, the other is 412.
	var wg sync.WaitGroup
	statuses := make([]int, 2)
	for i, n := range tc.live()[:2] {
		wg.Add(1)
		go func() {
			defer wg.Done()
			statuses[i], _ = adminWith(t, n, "PUT", "/v1/config", map[string]string{"If-Match": `"1"`}, pushedConfig(tc, fmt.Sprint("race", i)))
		}()
	}
	wg.Wait()
	if slices.Sort(statuses); fmt.Sprint(statuses) != "[200 412]" {
		t.Fatalf("two pushes with If-Match 1 answered %v, want one 200 and one 412", statuses)
	}
	waitVersion(t, tc, 2, "")

	// Invalid: every error with its path, nothing changes.
	bad := []byte(`{"Kestrel": {"Endpoints": {}}, "ReverseProxy": {"Routes": {"r": {"ClusterId": "nope", "Match": {"Path": "/x"}}, "r2": {"ClusterId": "nope"}}}}`)
	status, body = adminWith(t, f, "PUT", "/v1/config", nil, bad)
	errs := fmt.Sprint(body["errors"])
	if status != 400 || body["error"] != "config invalid: 3 errors" || strings.Contains(errs, "Kestrel") || !strings.Contains(errs, "ReverseProxy.Routes.r.ClusterId") || !strings.Contains(errs, "ReverseProxy.Routes.r2.Match") {
		t.Fatalf("invalid push: %d %v", status, body)
	}
	if c := f.store.ConfigCurrent(); c.Version != 2 {
		t.Fatalf("an invalid push moved the version to %d", c.Version)
	}

	// Rollback to 1: version 3, version 1's routes.
	status, body = adminWith(t, f, "POST", "/v1/config/rollback", nil, map[string]any{"version": 1})
	if status != 200 || body["version"] != 3.0 || body["summary"] != "rollback to version 1" {
		t.Fatalf("rollback: %d %v", status, body)
	}
	waitVersion(t, tc, 3, "[all extra]")

	// A follower cannot apply version 4: it keeps 3 and every node says why.
	lack := tc.follower()
	lacking.Store(&lack.cfg.NodeID)
	status, body = adminWith(t, f, "PUT", "/v1/config", nil, pushedConfig(tc, "needs-file"))
	if status != 200 || body["version"] != 4.0 {
		t.Fatalf("push 4: %d %v", status, body)
	}
	testutil.Eventually(t, 15*time.Second, lack.ID()+"'s config_error on every node", func() bool {
		for _, n := range tc.live() {
			_, m := admin(t, n, "GET", "/v1/members", nil)
			for _, row := range m["members"].([]any) {
				row := row.(map[string]any)
				want := 4.0
				if row["id"] == lack.ID() {
					want = 3.0
					if !strings.Contains(fmt.Sprint(row["config_error"]), "version 4: ReverseProxy.Clusters.app") {
						return false
					}
				} else if row["config_error"] != nil {
					return false
				}
				if row["config_version"] != want {
					return false
				}
			}
		}
		return true
	})
	if servedRoutes(lack) != "[all extra]" {
		t.Fatalf("%s serves %s, want version 3's routes", lack.ID(), servedRoutes(lack))
	}
	status, _ = adminWith(t, f, "PUT", "/v1/config", nil, pushedConfig(tc, "fixed"))
	if status != 200 {
		t.Fatalf("push 5: %d", status)
	}
	waitVersion(t, tc, 5, "[all fixed]")
	if _, e := lack.clusterCfg.get(); e != "" {
		t.Fatalf("%s still reports %q", lack.ID(), e)
	}

	// A restarted node serves version 5 from the start, and says its
	// file differs.
	tc.stop("n2")
	n2 := tc.start(tc.config("n2", 3, []string{tc.live()[0].GossipAddr()})) // a fresh log buffer
	if v, _ := n2.clusterCfg.get(); v != 5 || servedRoutes(n2) != "[all fixed]" {
		t.Fatalf("restarted n2 serves version %d, routes %s, right after Start", v, servedRoutes(n2))
	}
	log := tc.nodeLog("n2")
	applied, started := strings.Index(log, "cluster config applied"), strings.LastIndex(log, "node started")
	if applied < 0 || started < 0 || applied > started || !strings.Contains(log, "the config file's ReverseProxy differs from the cluster's version 5; the cluster's is served") {
		t.Fatalf("restarted n2's log:\n%s", log)
	}
	// A reload says it again, and keeps serving the cluster's version.
	if err := n2.Reload(); err != nil {
		t.Fatal(err)
	}
	if strings.Count(tc.nodeLog("n2"), "differs from the cluster's version 5") != 2 || servedRoutes(n2) != "[all fixed]" {
		t.Fatalf("after a reload n2 serves %s; log:\n%s", servedRoutes(n2), tc.nodeLog("n2"))
	}
}

// A pushed file is checked as `tether config validate` checks a file,
// YARP's appsettings form (comments, "$schema") included.
func TestPushedConfigChecks(t *testing.T) {
	n, _ := startNode(t, "")
	rules := clusterConfigRules{n}
	yarp := []byte(`{
	  // appsettings.json of a YARP instance
	  "$schema": "https://json.schemastore.org/appsettings.json",
	  "ReverseProxy": {
	    "Routes": { "r1": { "ClusterId": "c1", "Match": { "Path": "{**catch-all}" } } },
	    "Clusters": { "c1": { "Destinations": { "d1": { "Address": "http://127.0.0.1:1/" } } } }, // trailing comma
	  }
	}`)
	content, warnings, errs := rules.Check(yarp)
	if len(errs) > 0 || len(warnings) > 0 || !strings.HasPrefix(string(content), `{"Routes":{"r1":`) {
		t.Fatalf("YARP form: %s %v %v", content, warnings, errs)
	}
	// A key accepted but not implemented is named in the answer.
	bogus := bytes.Replace(yarp, []byte(`"Routes":`), []byte(`"Bogus": 1, "Routes":`), 1)
	if _, warnings, errs := rules.Check(bogus); len(errs) > 0 || !strings.Contains(fmt.Sprint(warnings), "ReverseProxy.Bogus") {
		t.Fatalf("an unknown key: warnings %v, errors %v", warnings, errs)
	}
	const rp = `"ReverseProxy": {"Routes": {"r1": {"ClusterId": "c1", "Match": {"Path": "/"}}}, "Clusters": {"c1": {"Destinations": {"d1": {"Address": "http://127.0.0.1:1/"}}}}}`
	// strict is a node started with --strict (the leader's rules apply).
	strictFile := filepath.Join(t.TempDir(), "tether.json")
	if err := os.WriteFile(strictFile, []byte(testConfig("http://127.0.0.1:1/", "")), 0o600); err != nil {
		t.Fatal(err)
	}
	strict := clusterConfigRules{&Node{cfg: Config{ConfigPath: strictFile, Strict: true}, log: quietLogger()}}
	for _, c := range []struct {
		desc, body string
		strict     bool
		// warnings, or errs as "path: error", exactly and in order; the
		// content is the ReverseProxy section whenever errs is empty.
		warnings, errs []string
	}{
		{desc: "every other section is left out, each named: ASP.NET's boilerplate, a node's own settings, the application's own, a misspelt section",
			body: `{"Logging": {"LogLevel": {"Default": "Information"}}, "AllowedHosts": "*", "Kestrel": {"Endpoints": {"http": {"Url": "http://0.0.0.0:5000"}}},
			        "ConnectionStrings": {"Db": "Server=db"}, "Listners": [], "$schema": "x", "listeners": [{"Address": "127.0.0.1:0"}], "Waf": {"Mode": "Prevention"}, ` + rp + `}`,
			warnings: []string{
				"Logging: not pushed: ASP.NET's log categories, which tether does not read (each node logs at its --log-level)",
				"AllowedHosts: not pushed: ASP.NET's host filtering, which tether does not do (a route's Match.Hosts restricts the hosts it serves)",
				"Kestrel: a node's own setting, not pushed; each node keeps its file's",
				"ConnectionStrings: not a tether, YARP or ASP.NET section; not pushed (the application's own)",
				"Listners: unknown key; did you mean Listeners? not pushed",
				"listeners: a node's own setting, not pushed; each node keeps its file's",
				"Waf: a node's own setting, not pushed; each node keeps its file's",
			}},
		{desc: "node sections are not checked: they are not applied",
			body:     `{"Kestrel": {"Certificates": {"Default": {"Path": "/nowhere.pem"}}}, "Limits": {"RequestHeadersTimeout": "bogus"}, ` + rp + `}`,
			warnings: []string{"Kestrel: a node's own setting, not pushed; each node keeps its file's", "Limits: a node's own setting, not pushed; each node keeps its file's"}},
		{desc: "the section's key in any case, as ASP.NET reads keys",
			body: `{"reverseproxy": {"Routes": {}}, "urls": "http://*:80"}`, warnings: []string{"urls: a node's own setting, not pushed; each node keeps its file's"}},
		{desc: "a misspelt ReverseProxy beside the real one is left out",
			body: `{"ReversProxy": {}, ` + rp + `}`, warnings: []string{"ReversProxy: unknown key; did you mean ReverseProxy? not pushed"}},
		{desc: "a misspelt ReverseProxy alone is named where the section is missing",
			body: `{"Logging": {}, "ReversProxy": {}}`,
			errs: []string{"ReversProxy: unknown key; did you mean ReverseProxy?", "ReverseProxy: missing: a pushed config holds the ReverseProxy section"}},
		{desc: "on a strict node a misspelt section is an error, as `tether config validate --strict` has it",
			body: `{"Listners": [], ` + rp + `}`, strict: true, errs: []string{"Listners: unknown key; did you mean Listeners?"}},
		{desc: "on a strict node the boilerplate and application sections are still left out",
			body: `{"Logging": {}, "MyApp": {"Key": 1}, ` + rp + `}`, strict: true,
			warnings: []string{"Logging: not pushed: ASP.NET's log categories, which tether does not read (each node logs at its --log-level)",
				"MyApp: not a tether, YARP or ASP.NET section; not pushed (the application's own)"}},
		{desc: "keys differing only in case collide, as in a load",
			body: `{"Kestrel": {}, "kestrel": {}, ` + rp + `}`, errs: []string{`kestrel: duplicate key (same as "Kestrel"; keys are case-insensitive)`}},
		{desc: "ReverseProxy twice, even spelt alike, is refused rather than one of them taken",
			body: `{` + rp + `, ` + rp + `}`, errs: []string{`ReverseProxy: duplicate key (same as "ReverseProxy"; keys are case-insensitive)`}},
		{desc: "no ReverseProxy", body: `{"Listeners": []}`,
			errs: []string{"ReverseProxy: missing: a pushed config holds the ReverseProxy section"}},
		{desc: "ReverseProxy not an object", body: `{"ReverseProxy": []}`, errs: []string{"ReverseProxy: not a JSON object"}},
		{desc: "not an object", body: `["ReverseProxy"]`, errs: []string{"$: a config file is a JSON object: this one is an array"}},
		{desc: "two values", body: `{"ReverseProxy": {}} {}`, errs: []string{": line 1, column 22: invalid JSON: unexpected '{' after the end of the document (one '}' too many?)"}},
		{desc: "an invalid section: every error at its path",
			body: `{"Logging": {}, "ReverseProxy": {"Routes": {"r1": {"ClusterId": "nope", "Match": {"Path": "/x"}}, "r2": {"ClusterId": "nope"}}}}`,
			errs: []string{
				`ReverseProxy.Routes.r1.ClusterId: no cluster named "nope"`,
				`ReverseProxy.Routes.r2.ClusterId: no cluster named "nope"`,
				"ReverseProxy.Routes.r2.Match: Path or Hosts required",
			}},
	} {
		rules := rules
		if c.strict {
			rules = strict
		}
		content, warnings, errs := rules.Check([]byte(c.body))
		got := make([]string, 0, len(errs))
		for _, e := range errs {
			got = append(got, e.Path+": "+e.Error)
		}
		if !slices.Equal(got, c.errs) && !(len(got) == 0 && len(c.errs) == 0) {
			t.Errorf("%s: errors\n%s\nwant\n%s", c.desc, strings.Join(got, "\n"), strings.Join(c.errs, "\n"))
			continue
		}
		if !slices.Equal(warnings, c.warnings) {
			t.Errorf("%s: warnings\n%s\nwant\n%s", c.desc, strings.Join(warnings, "\n"), strings.Join(c.warnings, "\n"))
		}
		if (len(errs) == 0) != (content != nil) || (content != nil && (!json.Valid(content) || !bytes.HasPrefix(content, []byte(`{"Routes":`)))) {
			t.Errorf("%s: content %s", c.desc, content)
		}
	}
	if _, _, errs := rules.Check([]byte(`{"ReverseProxy": {`)); !strings.Contains(fmt.Sprint(errs), "JSON") {
		t.Errorf("a file that does not parse: %v", errs)
	}
}

func TestConfigErrorFitsGossipMeta(t *testing.T) {
	m := cluster.Meta{ID: strings.Repeat("n", 60), RaftAddr: strings.Repeat("r", 80), AdminAddr: strings.Repeat("a", 80), Commands: "11111111111",
		ConfigVersion: 12, ConfigError: strings.Repeat("é", 200)}
	fitConfigError(&m)
	b, _ := json.Marshal(m)
	if len(b) > metaRoom || m.ConfigError == "" || !strings.HasSuffix(m.ConfigError, "...") {
		t.Fatalf("%d bytes, error %q", len(b), m.ConfigError)
	}
	short := cluster.Meta{ID: "n1", ConfigError: "version 2: no such file"}
	if fitConfigError(&short); short.ConfigError != "version 2: no such file" {
		t.Fatalf("a short error was cut: %q", short.ConfigError)
	}
}

// A node that restarts where the cluster's version cannot be applied
// serves its own file's section and says why from the start.
func TestRestartWhereTheClustersVersionCannotApply(t *testing.T) {
	tc := newTestCluster(t, 1)
	solo := func() Config {
		cfg := tc.config("solo", 0, nil)
		cfg.ClusterSecretFile = ""
		return cfg
	}
	n := tc.start(solo())
	if status, body := adminWith(t, n, "PUT", "/v1/config", nil, pushedConfig(tc, "extra")); status != 200 {
		t.Fatalf("push: %d %v", status, body)
	}
	waitVersion(t, tc, 1, "[all extra]")
	tc.stop("solo")
	n = tc.start(solo(), func(n *Node) {
		n.clusterCfg.check = func(*config.Config) error { return errors.New("ReverseProxy.Clusters.app: a file is missing here") }
	})
	if v, e := n.clusterCfg.get(); v != 0 || e != "version 1: ReverseProxy.Clusters.app: a file is missing here" || servedRoutes(n) != "[all]" {
		t.Fatalf("restarted: version %d, error %q, routes %s", v, e, servedRoutes(n))
	}
	status, body := admin(t, n, "GET", "/v1/members", nil)
	row := body["members"].([]any)[0].(map[string]any)
	if status != 200 || row["config_version"] != 0.0 || row["config_error"] != "version 1: ReverseProxy.Clusters.app: a file is missing here" {
		t.Fatalf("members: %d %v", status, body)
	}
}

// FuzzPushedConfigCheck: any pushed body is refused with errors or taken
// as a JSON object section, and every top-level key of a taken file but
// ReverseProxy and $schema is named in a warning.
func FuzzPushedConfigCheck(f *testing.F) {
	for _, seed := range []string{
		`{"ReverseProxy": {"Routes": {}}}`,
		`{"$schema": "x", "Logging": {}, "AllowedHosts": "*", "Kestrel": {"Endpoints": {}}, "ConnectionStrings": {}, "ReverseProxy": {}}`,
		`{"Listners": [], "reverseproxy": {}, "ReversProxy": 1}`,
		`{"ReverseProxy": {}, "reverseProxy": {}}`,
		"\ufeff{ // comment\n \"ReverseProxy\": {},\n}",
		`[]`, `"x"`, `{"ReverseProxy": {`, `{} {}`, ``,
	} {
		f.Add([]byte(seed))
	}
	file := filepath.Join(f.TempDir(), "tether.json")
	if err := os.WriteFile(file, []byte(testConfig("http://127.0.0.1:1/", "")), 0o600); err != nil {
		f.Fatal(err)
	}
	rules := clusterConfigRules{&Node{cfg: Config{ConfigPath: file}, log: quietLogger()}}
	f.Fuzz(func(t *testing.T, body []byte) {
		content, warnings, errs := rules.Check(body)
		if len(errs) > 0 {
			if content != nil || warnings != nil {
				t.Fatalf("refused with content %q, warnings %q", content, warnings)
			}
			return
		}
		var section map[string]json.RawMessage
		if err := json.Unmarshal(content, &section); err != nil {
			t.Fatalf("taken: %q is not a JSON object: %v", content, err)
		}
		std, err := hujson.Standardize(bytes.TrimPrefix(slices.Clone(body), []byte("\ufeff")))
		if err != nil {
			t.Fatalf("taken, but it does not parse: %v", err)
		}
		keys, _, err := topLevelSections(std)
		if err != nil {
			t.Fatalf("taken, but its keys do not read: %v", err)
		}
		for _, k := range keys {
			if strings.EqualFold(k, "ReverseProxy") || strings.EqualFold(k, "$schema") {
				continue
			}
			if !slices.ContainsFunc(warnings, func(w string) bool { return strings.HasPrefix(w, k+": ") }) {
				t.Fatalf("%q left out unsaid; warnings %q", k, warnings)
			}
		}
	})
}
