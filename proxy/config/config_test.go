package config

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

type obj = map[string]any

// baseConfig is the smallest valid configuration; cases change one thing.
func baseConfig() obj {
	return obj{
		"ReverseProxy": obj{
			"Routes": obj{"r1": obj{"ClusterId": "c1", "Match": obj{"Path": "/{**catch-all}"}}},
			"Clusters": obj{"c1": obj{
				"Destinations": obj{"d1": obj{"Address": "http://10.0.0.1:8080/"}},
			}},
		},
	}
}

// set stores val at a dotted path, creating objects on the way.
func set(m obj, path string, val any) {
	parts := strings.Split(path, ".")
	for _, p := range parts[:len(parts)-1] {
		next, ok := m[p].(obj)
		if !ok {
			next = obj{}
			m[p] = next
		}
		m = next
	}
	m[parts[len(parts)-1]] = val
}

func mustJSON(t testing.TB, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func parseOK(t *testing.T, data string, format string) (*Config, []string) {
	t.Helper()
	c, warns, err := Parse([]byte(data), format)
	if err != nil {
		t.Fatalf("Parse: unexpected error:\n%v", err)
	}
	return c, warns
}

func wantFieldError(t *testing.T, err error, path, msg string) {
	t.Helper()
	var es Errors
	if !errors.As(err, &es) {
		t.Fatalf("want Errors containing %s: %s, got %v", path, msg, err)
	}
	for _, e := range es {
		if e.Path == path && strings.Contains(e.Message, msg) {
			return
		}
	}
	t.Errorf("want error %s: %s; got:\n%v", path, msg, err)
}

const minimalRP = `"ReverseProxy": {
	"Routes": {"r1": {"ClusterId": "c1", "Match": {"Path": "/"}}},
	"Clusters": {"c1": {"Destinations": {"d1": {"Address": "http://a.example:80"}}}}
}`

func TestDecodingRules(t *testing.T) {
	cases := []struct {
		desc   string
		format string
		in     string
		check  func(c *Config) bool
	}{
		{"JSON comments are allowed", "json", `{
			// line comment
			/* block */ ` + minimalRP + `}`,
			func(c *Config) bool { return c.ReverseProxy.Routes["r1"] != nil }},
		{"JSON trailing commas are allowed", "json", `{"TrustedProxies": ["10.0.0.1",], ` + minimalRP + `,}`,
			func(c *Config) bool { return len(c.TrustedProxies) == 1 }},
		{"keys match fields case-insensitively", "json", `{"reverseproxy": {
			"ROUTES": {"r1": {"clusterid": "c1", "match": {"path": "/"}}},
			"clusters": {"c1": {"destinations": {"d1": {"address": "http://a.example"}}}}}}`,
			func(c *Config) bool { return c.ReverseProxy.Routes["r1"].ClusterId == "c1" }},
		{"booleans may be strings", "json", `{` + minimalRP + `, "Listeners": [{"Address": ":1", "Redirect": {"IncludePath": "False"}}]}`,
			func(c *Config) bool { return !*c.Listeners[0].Redirect.IncludePath }},
		{"numbers may be strings", "json", `{` + minimalRP + `, "Limits": {"MaxRequestHeadersTotalSize": "5"}}`,
			func(c *Config) bool { return c.Limits.MaxRequestHeadersTotalSize == 5 }},
		{"map ids keep the file's spelling and fill the Id fields", "json", `{"ReverseProxy": {
			"Routes": {"Route-A": {"ClusterId": "Cl", "Match": {"Path": "/"}}},
			"Clusters": {"Cl": {"Destinations": {"Dest/1": {"Address": "http://a.example"}}}}}}`,
			func(c *Config) bool {
				r, cl := c.ReverseProxy.Routes["Route-A"], c.ReverseProxy.Clusters["Cl"]
				return r != nil && r.RouteId == "Route-A" && cl.ClusterId == "Cl" && cl.Destinations["Dest/1"].DestinationId == "Dest/1"
			}},
		{"a route's ClusterId matches a cluster case-insensitively", "json", `{"ReverseProxy": {
			"Routes": {"r": {"ClusterId": "APP", "Match": {"Path": "/"}}},
			"Clusters": {"app": {"Destinations": {"d": {"Address": "http://a.example"}}}}}}`,
			func(c *Config) bool { return c.ReverseProxy.Routes["r"].ClusterId == "app" }},
		{"pointer structs are allocated when present", "json", `{` + minimalRP + `, "Listeners": [{"Address": ":1", "Redirect": {}}]}`,
			func(c *Config) bool { return c.Listeners[0].Redirect != nil && c.Listeners[0].Certificate == nil }},
		{"Metadata reads as a string map", "json", `{"ReverseProxy": {
			"Routes": {"r1": {"ClusterId": "c1", "Match": {"Path": "/"}, "Metadata": {"k": "v", "n": 5}}},
			"Clusters": {"c1": {"Destinations": {"d1": {"Address": "http://a.example"}}}}}}`,
			func(c *Config) bool { m := c.ReverseProxy.Routes["r1"].Metadata; return m["k"] == "v" && m["n"] == "5" }},
		{"null leaves the default", "json", `{"Limits": null, ` + minimalRP + `}`,
			func(c *Config) bool { return c.Limits.MaxRequestHeadersTotalSize == 32768 }},
		{"YAML reads the same keys", "yaml", `
reverseProxy:
  routes:
    r1: {clusterId: c1, match: {path: /}}
  clusters:
    c1:
      sessionAffinity: {enabled: "true", affinityKeyName: k}
      destinations:
        d1: {address: "http://a.example"}
`,
			func(c *Config) bool { return c.ReverseProxy.Clusters["c1"].SessionAffinity.Enabled }},
		{"Urls become listeners when Listeners is absent", "json", `{"Urls": "http://*:8080; http://+:81;http://localhost:5000;http://0.0.0.0:82;http://[::1]:83", ` + minimalRP + `}`,
			func(c *Config) bool {
				var got []string
				for _, l := range c.Listeners {
					got = append(got, l.Address)
				}
				return reflect.DeepEqual(got, []string{":8080", ":81", "localhost:5000", ":82", "[::1]:83"})
			}},
		{"Listeners win over Urls", "json", `{"Urls": "http://*:9", "Listeners": [{"Address": "127.0.0.1:7"}], ` + minimalRP + `}`,
			func(c *Config) bool { return len(c.Listeners) == 1 && c.Listeners[0].Address == "127.0.0.1:7" }},
		{"default listener is :8080", "json", `{` + minimalRP + `}`,
			func(c *Config) bool { return len(c.Listeners) == 1 && c.Listeners[0].Address == ":8080" }},
		{"enumerations are normalised to the canonical spelling", "json", `{"ReverseProxy": {
			"Routes": {"r1": {"ClusterId": "c1", "Match": {"Path": "/", "Headers": [{"Name": "h", "Mode": "exists"}]}}},
			"Clusters": {"c1": {"LoadBalancingPolicy": "roundrobin",
				"SessionAffinity": {"Enabled": true, "AffinityKeyName": "k", "Policy": "customheader", "Cookie": {"SameSite": "lax"}},
				"Destinations": {"d1": {"Address": "http://a.example"}}}}}}`,
			func(c *Config) bool {
				cl := c.ReverseProxy.Clusters["c1"]
				return cl.LoadBalancingPolicy == "RoundRobin" && cl.SessionAffinity.Policy == "CustomHeader" &&
					cl.SessionAffinity.Cookie.SameSite == "Lax" && c.ReverseProxy.Routes["r1"].Match.Headers[0].Mode == "Exists"
			}},
		{"transform keys are normalised to YARP's spelling", "json", `{"ReverseProxy": {
			"Routes": {"r1": {"ClusterId": "c1", "Match": {"Path": "/"}, "Transforms": [
				{"pathremoveprefix": "/api"}, {"responseheader": "X", "set": "1", "when": "always"}]}},
			"Clusters": {"c1": {"Destinations": {"d1": {"Address": "http://a.example"}}}}}}`,
			func(c *Config) bool {
				tr := c.ReverseProxy.Routes["r1"].Transforms
				return tr[0]["PathRemovePrefix"] == "/api" && tr[1]["ResponseHeader"] == "X" && tr[1]["Set"] == "1" && tr[1]["When"] == "Always"
			}},
	}
	for _, tc := range cases {
		t.Run(tc.desc, func(t *testing.T) {
			c, _ := parseOK(t, tc.in, tc.format)
			if !tc.check(c) {
				t.Errorf("check failed; config: %+v", c)
			}
		})
	}
}

func TestDurations(t *testing.T) {
	cases := []struct {
		desc string
		in   string
		want time.Duration
		bad  bool
	}{
		{"TimeSpan hh:mm:ss", "03:00:00", 3 * time.Hour, false},
		{"TimeSpan with days", "1.00:00:00", 24 * time.Hour, false},
		{"TimeSpan with fraction", "00:00:00.5", 500 * time.Millisecond, false},
		{"TimeSpan hh:mm", "01:30", 90 * time.Minute, false},
		{"TimeSpan d:hh:mm:ss", "2:01:00:00", 49 * time.Hour, false},
		{"Go duration", "3h", 3 * time.Hour, false},
		{"Go duration ms", "500ms", 500 * time.Millisecond, false},
		{"bare integer is days, as .NET's TimeSpan reads it", "5", 5 * 24 * time.Hour, false},
		{"bare decimal is an error, as in .NET", "1.5", 0, true},
		{"bare integer beyond an int64 of nanoseconds", "106752", 0, true},
		{"negative TimeSpan is rejected", "-00:00:05", 0, true},
		{"negative Go duration is rejected", "-5s", 0, true},
		{"hours out of range", "24:00:00", 0, true},
		{"minutes out of range", "00:60:00", 0, true},
		{"fraction too long", "00:00:00.12345678", 0, true},
		{"garbage", "soon", 0, true},
		{"NaN is not a number of seconds", "NaN", 0, true},
		{"overflowing days", "99999999.00:00:00", 0, true},
	}
	for _, tc := range cases {
		t.Run(tc.desc, func(t *testing.T) {
			cfg := baseConfig()
			set(cfg, "ReverseProxy.Clusters.c1.DrainTimeout", tc.in)
			c, _, err := Parse(mustJSON(t, cfg), "json")
			if tc.bad {
				wantFieldError(t, err, "ReverseProxy.Clusters.c1.DrainTimeout", tc.in)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := c.ReverseProxy.Clusters["c1"].DrainTimeout.Duration; got != tc.want {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
	t.Run("a JSON number is days, with a warning naming the path", func(t *testing.T) {
		cfg := baseConfig()
		set(cfg, "ReverseProxy.Clusters.c1.DrainTimeout", 7)
		c, warns, err := Parse(mustJSON(t, cfg), "json")
		if err != nil || c.ReverseProxy.Clusters["c1"].DrainTimeout.Duration != 7*24*time.Hour {
			t.Fatalf("got %v, %v", c, err)
		}
		want := `ReverseProxy.Clusters.c1.DrainTimeout: bare number 7 read as 7 days, as .NET does; write "00:00:07" or "7s" for seconds`
		if !slices.Contains(warns, want) {
			t.Errorf("warnings %q lack %q", warns, want)
		}
	})
}

// TestInputRules checks how the file itself is read: encodings, limits and
// keys that are not configuration.
func TestInputRules(t *testing.T) {
	const schema = `"$schema": "https://json.schemastore.org/appsettings.json"`
	deep := func(n int) string { return strings.Repeat("[", n) + strings.Repeat("]", n) }
	cases := []struct {
		desc, format, in string
		check            func(t *testing.T, c *Config, warns []string, err error)
	}{
		{"a UTF-8 BOM before JSON is skipped (Visual Studio writes one)", "json", "\ufeff{" + minimalRP + "}",
			func(t *testing.T, c *Config, _ []string, err error) {
				if err != nil {
					t.Fatal(err)
				}
			}},
		{"JSON nested deeper than 1000 levels is refused at $", "json", strings.Repeat("[", 1_000_000),
			func(t *testing.T, _ *Config, _ []string, err error) {
				wantFieldError(t, err, "$", "nested more than 1000 levels")
			}},
		{"brackets in JSON strings and comments do not count as nesting", "json",
			`{"ReverseProxy": {"Routes": {"r1": {"ClusterId": "c1", "Match": {"Path": "/"},
				"Metadata": {"k": "` + strings.Repeat("[", 1500) + `\"` + strings.Repeat("{", 1500) + `"}}}, // ` + strings.Repeat("[", 1500) + "\n" +
				`/* ` + strings.Repeat("{", 1500) + ` */ "Clusters": {"c1": {"Destinations": {"d1": {"Address": "http://a.example"}}}}}}`,
			func(t *testing.T, c *Config, _ []string, err error) {
				if err != nil {
					t.Fatal(err)
				}
				if k := c.ReverseProxy.Routes["r1"].Metadata["k"]; len(k) != 3001 {
					t.Errorf("metadata value has %d bytes, want 3001", len(k))
				}
			}},
		{"YAML nested deeper than 1000 levels is refused at $", "yaml", "Urls: " + deep(1001) + "\n",
			func(t *testing.T, _ *Config, _ []string, err error) {
				wantFieldError(t, err, "$", "nested more than 1000 levels")
			}},
		{"YAML with more than one document is refused", "yaml", "Urls: http://*:1\n---\nUrls: http://*:2\n",
			func(t *testing.T, _ *Config, _ []string, err error) {
				wantFieldError(t, err, "$", "more than one YAML document")
			}},
		{"a top-level $schema is ignored without a warning", "json", "{" + schema + ", " + minimalRP + "}",
			func(t *testing.T, _ *Config, warns []string, err error) {
				if err != nil || len(warns) > 0 {
					t.Fatalf("err %v, warnings %q", err, warns)
				}
			}},
	}
	for _, tc := range cases {
		t.Run(tc.desc, func(t *testing.T) {
			c, warns, err := Parse([]byte(tc.in), tc.format)
			tc.check(t, c, warns, err)
		})
	}
}

// TestExplicitZeroDurations checks that a duration given as zero is told
// from an absent one: kept where zero means something, refused elsewhere.
func TestExplicitZeroDurations(t *testing.T) {
	const cl = "ReverseProxy.Clusters.c1"
	for _, tc := range []struct {
		desc, path string
		val        any
		get        func(c *Config) Duration
	}{
		{"DrainTimeout 0s drains at once instead of the 5m default", cl + ".DrainTimeout", "0s",
			func(c *Config) Duration { return c.ReverseProxy.Clusters["c1"].DrainTimeout }},
		{"ShutdownTimeout 00:00:00 stops at once instead of the 30s default", "Limits.ShutdownTimeout", "00:00:00",
			func(c *Config) Duration { return c.Limits.ShutdownTimeout }},
		{"Cookie MaxAge 0 stays unsent", cl + ".SessionAffinity.Cookie.MaxAge", 0,
			func(c *Config) Duration { return c.ReverseProxy.Clusters["c1"].SessionAffinity.Cookie.MaxAge }},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			cfg := baseConfig()
			set(cfg, tc.path, tc.val)
			c, _, err := Parse(mustJSON(t, cfg), "json")
			if err != nil {
				t.Fatal(err)
			}
			if d := tc.get(c); d.Duration != 0 || !d.Set {
				t.Errorf("got %+v, want zero and Set", d)
			}
		})
	}
	t.Run("defaulted durations are not Set", func(t *testing.T) {
		c, _, err := Parse(mustJSON(t, baseConfig()), "json")
		if err != nil {
			t.Fatal(err)
		}
		if d := c.ReverseProxy.Clusters["c1"].DrainTimeout; d.Set || d.Duration != 5*time.Minute {
			t.Errorf("got %+v", d)
		}
	})
}

func TestDecodeErrors(t *testing.T) {
	cases := []struct {
		desc, format, in, path, msg string
	}{
		{"keys differing only in case are duplicates", "json", `{"Urls": "http://*:1", "urls": "http://*:2", ` + minimalRP + `}`, "urls", "duplicate key"},
		{"duplicate map ids differing in case", "json", `{"ReverseProxy": {"Clusters": {"a": {}, "A": {}}}}`, "ReverseProxy.Clusters.A", "duplicate key"},
		{"wrong type: bool", "json", `{"ReverseProxy": {"Clusters": {"c1": {"SessionAffinity": {"Enabled": "yes"}}}}}`,
			"ReverseProxy.Clusters.c1.SessionAffinity.Enabled", `"yes"`},
		{"wrong type: integer", "json", `{"Limits": {"MaxRequestHeadersTotalSize": "big"}}`, "Limits.MaxRequestHeadersTotalSize", `"big"`},
		{"wrong type: object for string", "json", `{"Urls": {}}`, "Urls", "an object"},
		{"wrong type: list index in path", "json", `{"Listeners": [{"Address": ":1"}, {"Address": []}]}`, "Listeners[1].Address", "a list"},
		{"wrong type: list expected", "json", `{"TrustedProxies": "10.0.0.1"}`, "TrustedProxies", "want a list"},
		{"root must be an object", "json", `[1]`, "$", "want an object"},
		{"syntax error", "json", `{"Urls": }`, "", "line 1, column 10: invalid JSON: a value is missing before '}'"},
		{"YAML syntax error", "yaml", "a: [", "", "line 1: invalid YAML: did not find expected node content"},
		{"unknown format", "toml", `x`, "$", "unknown format"},
	}
	for _, tc := range cases {
		t.Run(tc.desc, func(t *testing.T) {
			c, _, err := Parse([]byte(tc.in), tc.format)
			if c != nil {
				t.Error("config returned with an error")
			}
			wantFieldError(t, err, tc.path, tc.msg)
		})
	}
}

func TestEveryErrorIsReported(t *testing.T) {
	cfg := baseConfig()
	set(cfg, "Listeners", []any{obj{}})
	set(cfg, "ReverseProxy.Clusters.c1.LoadBalancingPolicy", "Fastest")
	set(cfg, "ReverseProxy.Routes.r1.ClusterId", "")
	set(cfg, "Limits.Bogus", 1)
	_, _, err := ParseWith(mustJSON(t, cfg), "json", LoadOptions{Strict: true})
	for _, want := range [][2]string{
		{"Listeners[0].Address", "required"},
		{"ReverseProxy.Clusters.c1.LoadBalancingPolicy", "Fastest"},
		{"ReverseProxy.Routes.r1.ClusterId", "required"},
		{"Limits.Bogus", "unknown key"},
	} {
		wantFieldError(t, err, want[0], want[1])
	}
}

func TestSameSiteNoneWithoutSecureWarns(t *testing.T) {
	for _, c := range []struct {
		desc   string
		secure string
		want   bool
	}{
		{"SameAsRequest: warned", "SameAsRequest", true},
		{"None: warned", "None", true},
		{"Always: no warning", "Always", false},
	} {
		t.Run(c.desc, func(t *testing.T) {
			cfg := baseConfig()
			set(cfg, "ReverseProxy.Clusters.c1.SessionAffinity", obj{"Enabled": true, "AffinityKeyName": "k",
				"Cookie": obj{"SameSite": "none", "SecurePolicy": c.secure}})
			_, warns, err := Parse(mustJSON(t, cfg), "json")
			if err != nil {
				t.Fatal(err)
			}
			got := slices.ContainsFunc(warns, func(w string) bool {
				return strings.HasPrefix(w, "ReverseProxy.Clusters.c1.SessionAffinity.Cookie.SameSite: None without SecurePolicy Always")
			})
			if got != c.want {
				t.Fatalf("warned %v, want %v: %q", got, c.want, warns)
			}
		})
	}
}

func TestUnsupportedKeysWarn(t *testing.T) {
	cfg := baseConfig()
	set(cfg, "Logging", obj{"LogLevel": obj{}})
	set(cfg, "ReverseProxy.Routes.r1.RateLimiterPolicy", "default")
	set(cfg, "ReverseProxy.Routes.r1.Transforms", []any{obj{"X-Forwarded": "Set"}})
	c, warns, err := Parse(mustJSON(t, cfg), "json")
	if err != nil {
		t.Fatal(err)
	}
	if !c.Logging.Set || !c.ReverseProxy.Routes["r1"].RateLimiterPolicy.Set {
		t.Error("Set not set")
	}
	want := []string{
		"ReverseProxy.Routes.r1.RateLimiterPolicy: accepted but not implemented by tether",
	}
	if !reflect.DeepEqual(warns, want) {
		t.Errorf("warnings:\n%q\nwant:\n%q", warns, want)
	}
}

func TestYARPAppSettingsLoadsWithWarningsOnly(t *testing.T) {
	c, warns, err := Load("testdata/appsettings.json")
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	for _, w := range []string{
		"ReverseProxy.Clusters.cluster1.HealthCheck.AvailableDestinationsPolicy: accepted but not implemented by tether",
	} {
		found := false
		for _, got := range warns {
			found = found || got == w
		}
		if !found {
			t.Errorf("missing warning %q in %q", w, warns)
		}
	}
	cl := c.ReverseProxy.Clusters["cluster1"]
	if cl.SessionAffinity.Cookie.MaxAge.Duration != 24*time.Hour || cl.HealthCheck.Active.ConsecutiveFailures != 5 ||
		cl.HttpRequest.ActivityTimeout.Duration != 2*time.Minute || cl.Destinations["cluster1/destination2"].Metadata["AffinityKey"] != "group-a" {
		t.Errorf("unexpected cluster: %+v", cl)
	}
}

func TestYAMLMatchesJSON(t *testing.T) {
	js := `{"Listeners": [{"Address": ":8080"}], "TrustedProxies": ["10.0.0.0/8"],
	"ReverseProxy": {
		"Routes": {"all": {"ClusterId": "app", "Match": {"Path": "{**catch-all}", "Methods": ["GET"]},
			"Transforms": [{"PathPrefix": "/x"}]}},
		"Clusters": {"app": {"LoadBalancingPolicy": "RoundRobin",
			"SessionAffinity": {"Enabled": true, "Policy": "Cookie", "AffinityKeyName": ".Tether.Affinity"},
			"HealthCheck": {"Active": {"Enabled": true, "Interval": "00:00:05", "Timeout": "2s", "Path": "/healthz"}},
			"Destinations": {"app-1": {"Address": "http://10.0.0.11:8080/"}, "app-2": {"Address": "http://10.0.0.12:8080/"}}}}}}`
	ym := `
Listeners:
  - Address: ":8080"
TrustedProxies: [10.0.0.0/8]
ReverseProxy:
  Routes:
    all:
      ClusterId: app
      Match: {Path: "{**catch-all}", Methods: [GET]}
      Transforms:
        - PathPrefix: /x
  Clusters:
    app:
      LoadBalancingPolicy: RoundRobin
      SessionAffinity: {Enabled: true, Policy: Cookie, AffinityKeyName: .Tether.Affinity}
      HealthCheck:
        Active: {Enabled: true, Interval: "00:00:05", Timeout: 2s, Path: /healthz}
      Destinations:
        app-1: {Address: "http://10.0.0.11:8080/"}
        app-2: {Address: "http://10.0.0.12:8080/"}
`
	cj, _ := parseOK(t, js, "json")
	cy, _ := parseOK(t, ym, "yaml")
	if !reflect.DeepEqual(cj, cy) {
		t.Errorf("YAML and JSON differ:\njson: %+v\nyaml: %+v", cj, cy)
	}
}

func TestLoadFormatFromExtension(t *testing.T) {
	dir := t.TempDir()
	y := filepath.Join(dir, "c.yml")
	if err := os.WriteFile(y, []byte("Urls: http://*:9\n"+"ReverseProxy: {Clusters: {c: {Destinations: {d: {Address: 'http://a'}}}}}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c, _, err := Load(y)
	if err != nil || c.Listeners[0].Address != ":9" {
		t.Fatalf("Load yml: %v %+v", err, c)
	}
	if _, _, err := Load(filepath.Join(dir, "missing.json")); err == nil {
		t.Fatal("missing file loaded")
	}
}

func TestStatusRanges(t *testing.T) {
	cases := []struct {
		desc, in string
		in200    bool
		in302    bool
		in500    bool
		bad      bool
	}{
		{"default range", "200-399", true, true, false, false},
		{"list of codes and ranges", "200,204,300-302", true, true, false, false},
		{"spaces allowed", " 500 , 200 ", true, false, true, false},
		{"reversed range", "399-200", false, false, false, true},
		{"out of range code", "200-600", false, false, false, true},
		{"not a number", "ok", false, false, false, true},
		{"empty", "", false, false, false, true},
	}
	for _, tc := range cases {
		t.Run(tc.desc, func(t *testing.T) {
			rs, err := ParseStatusRanges(tc.in)
			if (err != nil) != tc.bad {
				t.Fatalf("err = %v", err)
			}
			if rs.Contains(200) != tc.in200 || rs.Contains(302) != tc.in302 || rs.Contains(500) != tc.in500 {
				t.Errorf("Contains wrong for %v", rs)
			}
		})
	}
}

// TestSyntaxErrorsReadAsWords: a file that does not parse is told at its
// line and column in words, never with the parser's name or jargon; Load
// puts the file first, as compilers do (file:line:column).
func TestSyntaxErrorsReadAsWords(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{`{"a": }`, `line 1, column 7: invalid JSON: a value is missing before '}'`},
		{`{"a": 1 "b": 2}`, `line 1, column 9: invalid JSON: a ',' or '}' is missing before '"'`},
		{`[1 2]`, `line 1, column 4: invalid JSON: a ',' or ']' is missing before '2'`},
		{`{"a" 1}`, `line 1, column 6: invalid JSON: a ':' is missing after the key, before '1'`},
		{`{Urls: 1}`, `line 1, column 2: invalid JSON: Urls is not a JSON value: keys and strings take double quotes`},
		{`{"a": 1}}`, `line 1, column 9: invalid JSON: unexpected '}' after the end of the document (one '}' too many?)`},
		{`{"a": 1 /* x`, `line 1, column 9: invalid JSON: a /* comment is not closed with */`},
		{`{"a": "x`, `line 1, column 9: invalid JSON: the file ends inside a string (a '"' is missing)`},
		{"{\n \"a\": [1, 2", `line 2, column 12: invalid JSON: the file ends before the JSON does (a '}' or ']' is missing)`},
		{`{"a": 'x'}`, `line 1, column 7: invalid JSON: strings take double quotes, not '`},
		{`{"a": yes}`, `line 1, column 7: invalid JSON: yes is not a JSON value`},
	} {
		t.Run(tc.in, func(t *testing.T) {
			_, _, err := Parse([]byte(tc.in), "json")
			if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "hujson") {
				t.Fatalf("got %v, want %s", err, tc.want)
			}
		})
	}
	dir := t.TempDir()
	f := filepath.Join(dir, "app.json")
	os.WriteFile(f, []byte("{\n  \"Urls\": \"http://*:1\"\n  \"ReverseProxy\": {}\n}\n"), 0o600)
	if _, _, err := Load(f); err == nil || err.Error() != f+`:3:3: invalid JSON: a ',' or '}' is missing before '"'` {
		t.Fatalf("Load: %v", err)
	}
	y := filepath.Join(dir, "app.yaml")
	os.WriteFile(y, []byte("a: b\n c: d\n"), 0o600)
	if _, _, err := Load(y); err == nil || err.Error() != y+":2: invalid YAML: mapping values are not allowed in this context" {
		t.Fatalf("Load: %v", err)
	}
	for _, tc := range []struct{ path, want string }{
		{filepath.Join(dir, "nosuch.json"), filepath.Join(dir, "nosuch.json") + ": no such file"},
		{dir, dir + ": is a directory, not a configuration file"},
	} {
		if _, _, err := Load(tc.path); err == nil || err.Error() != tc.want {
			t.Errorf("Load(%s): %v, want %s", tc.path, err, tc.want)
		}
	}
}

// TestASPNETBoilerplateLoadsWithoutAWarning: every appsettings.json has
// Logging and AllowedHosts "*"; neither is worth a line on every start and
// reload. AllowedHosts naming hosts is: ASP.NET would refuse other hosts.
func TestASPNETBoilerplateLoadsWithoutAWarning(t *testing.T) {
	for _, tc := range []struct {
		desc, hosts string
		warn        string
	}{
		{"the template's *", "*", ""},
		{"* among hosts", "example.com;*", ""},
		{"absent", "", ""},
		{"hosts named", "example.com;*.example.org", `AllowedHosts: "example.com;*.example.org" is not enforced by tether`},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			cfg := baseConfig()
			set(cfg, "Logging", obj{"LogLevel": obj{"Default": "Information", "Microsoft.AspNetCore": "Warning"}})
			if tc.hosts != "" {
				set(cfg, "AllowedHosts", tc.hosts)
			}
			_, warns, err := ParseWith(mustJSON(t, cfg), "json", LoadOptions{Strict: true})
			if err != nil {
				t.Fatal(err)
			}
			switch {
			case tc.warn == "" && len(warns) > 0:
				t.Errorf("warnings: %q", warns)
			case tc.warn != "" && (len(warns) != 1 || !strings.HasPrefix(warns[0], tc.warn)):
				t.Errorf("warnings %q, want one starting %q", warns, tc.warn)
			}
		})
	}
}
