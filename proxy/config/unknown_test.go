package config

import (
	"slices"
	"strings"
	"testing"
)

func TestUnknownKeyRules(t *testing.T) {
	cases := []struct {
		desc   string
		in     string // a JSON file, minimalRP added
		strict bool
		// want is the one finding expected: a warning, an error (strict) or
		// an info line, by its full text.
		want string
		kind string // "warn", "error" or "info"
	}{
		{desc: "inside ReverseProxy a typo of a known key is an error without strict: it would turn a feature off",
			in:   `"ReverseProxy": {"Routes": {"r1": {"ClusterId": "c1", "Match": {"Path": "/"}}}, "Clusters": {"c1": {"SessionAfinity": {"Enabled": true}, "Destinations": {"d1": {"Address": "http://a.example"}}}}}`,
			want: "ReverseProxy.Clusters.c1.SessionAfinity: unknown key; did you mean SessionAffinity? (a misspelt key would silently turn its feature off)", kind: "error"},
		{desc: "a typo deeper inside ReverseProxy is an error too",
			in:   `"ReverseProxy": {"Routes": {"r1": {"ClusterId": "c1", "Match": {"Path": "/"}}}, "Clusters": {"c1": {"HealthCheck": {"Actve": {"Enabled": true}}, "Destinations": {"d1": {"Address": "http://a.example"}}}}}`,
			want: "ReverseProxy.Clusters.c1.HealthCheck.Actve: unknown key; did you mean Active?", kind: "error"},
		{desc: "a key inside ReverseProxy far from every known one stays a warning",
			in:   `"ReverseProxy": {"Routes": {"r1": {"ClusterId": "c1", "Match": {"Path": "/"}, "SessionStickiness": {}}}, "Clusters": {"c1": {"Destinations": {"d1": {"Address": "http://a.example"}}}}}`,
			want: "ReverseProxy.Routes.r1.SessionStickiness: unknown key (ignored; --strict makes this an error)", kind: "warn"},
		{desc: "strict: nested unknown key is an error",
			in:     `"ReverseProxy": {"Routes": {"r1": {"ClusterId": "c1", "Match": {"Path": "/", "Hots": []}}}, "Clusters": {"c1": {"Destinations": {"d1": {"Address": "http://a.example"}}}}}`,
			strict: true, want: "ReverseProxy.Routes.r1.Match.Hots: unknown key; did you mean Hosts?", kind: "error"},
		{desc: "a key far from every known one gets no suggestion",
			in:   `"ReverseProxy": {"Routes": {"r1": {"ClusterId": "c1", "Match": {"Path": "/"}, "Zzzzzzzzzzzz": 1}}, "Clusters": {"c1": {"Destinations": {"d1": {"Address": "http://a.example"}}}}}`,
			want: "ReverseProxy.Routes.r1.Zzzzzzzzzzzz: unknown key (ignored; --strict makes this an error)", kind: "warn"},
		{desc: "YARP's own misspelt key (\"Authorization Policy\": \"Anonymous\") only warns: ignoring it changes nothing",
			in:   `"ReverseProxy": {"Routes": {"r1": {"ClusterId": "c1", "Match": {"Path": "/"}, "Authorization Policy": "Anonymous"}}, "Clusters": {"c1": {"Destinations": {"d1": {"Address": "http://a.example"}}}}}`,
			want: "ReverseProxy.Routes.r1.Authorization Policy: unknown key; did you mean AuthorizationPolicy? (ignored; --strict makes this an error)", kind: "warn"},
		{desc: "top level: a typo of a known section is a typo",
			in: `"Listners": [{"Address": ":1"}], ` + minimalRP, want: "Listners: unknown key; did you mean Listeners? (ignored; --strict makes this an error)", kind: "warn"},
		{desc: "strict: a top-level typo is an error",
			in: `"Listners": [{"Address": ":1"}], ` + minimalRP, strict: true, want: "Listners: unknown key; did you mean Listeners?", kind: "error"},
		{desc: "top level: the application's ConnectionStrings are ignored with an info line",
			in:   `"ConnectionStrings": {"Db": "Server=x"}, ` + minimalRP,
			want: "ConnectionStrings: not a tether, YARP or ASP.NET section; ignored as the application's own", kind: "info"},
		{desc: "strict: the application's own section is still only an info line",
			in: `"MyApp": {"Feature": true, "Listners": 1}, ` + minimalRP, strict: true,
			want: "MyApp: not a tether, YARP or ASP.NET section; ignored as the application's own", kind: "info"},
		{desc: "a transposition counts as one edit",
			in:   `"Limits": {"KeepAlvieTimeout": "00:01:00"}, ` + minimalRP,
			want: "Limits.KeepAlvieTimeout: unknown key; did you mean KeepAliveTimeout? (ignored; --strict makes this an error)", kind: "warn"},
		{desc: "a misspelt policy naming a real policy is an error: it would open the route",
			in:   `"ReverseProxy": {"Routes": {"r1": {"ClusterId": "c1", "Match": {"Path": "/"}, "Authorization Policy": "Admins"}}, "Clusters": {"c1": {"Destinations": {"d1": {"Address": "http://a.example"}}}}}`,
			want: "ReverseProxy.Routes.r1.Authorization Policy: unknown key; did you mean AuthorizationPolicy?", kind: "error"},
	}
	for _, tc := range cases {
		t.Run(tc.desc, func(t *testing.T) {
			var infos []string
			c, warns, err := ParseWith([]byte("{"+tc.in+"}"), "json", LoadOptions{Strict: tc.strict, Info: func(m string) { infos = append(infos, m) }})
			switch tc.kind {
			case "error":
				if err == nil || c != nil {
					t.Fatalf("want error %q, got none (warnings %q)", tc.want, warns)
				}
				if !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("errors:\n%v\nwant %q", err, tc.want)
				}
			case "warn":
				if err != nil {
					t.Fatal(err)
				}
				if !slices.Contains(warns, tc.want) {
					t.Fatalf("warnings %q, want %q", warns, tc.want)
				}
			case "info":
				if err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(infos, []string{tc.want}) {
					t.Fatalf("infos %q, want exactly %q", infos, tc.want)
				}
				if len(warns) != 0 {
					t.Fatalf("an application section warned: %q", warns)
				}
			}
		})
	}
}

func TestEditDistance(t *testing.T) {
	for _, c := range []struct {
		a, b string
		want int
	}{
		{"", "", 0}, {"abc", "", 3}, {"listners", "listeners", 1}, {"kestral", "kestrel", 1},
		{"ab", "ba", 1}, {"sessionafinity", "sessionaffinity", 1}, {"myapp", "limits", 6},
	} {
		if got := editDistance(c.a, c.b); got != c.want {
			t.Errorf("editDistance(%q, %q) = %d, want %d", c.a, c.b, got, c.want)
		}
	}
}

// TopLevelKey classifies a top-level key as a load does: a section (any
// case), a typo of one (a load warns), or the application's own (a load
// ignores it with an info line).
func TestTopLevelKey(t *testing.T) {
	for _, c := range []struct {
		key, section string
		typo         bool
	}{
		{"ReverseProxy", "ReverseProxy", false}, {"reverseProxy", "ReverseProxy", false},
		{"KESTREL", "Kestrel", false}, {"Logging", "Logging", false}, {"allowedHosts", "AllowedHosts", false},
		{"Listeners", "Listeners", false}, {"Urls", "Urls", false}, {"Waf", "Waf", false},
		{"$schema", "$schema", false}, {"$Schema", "$schema", false},
		{"Listners", "Listeners", true}, {"ReversProxy", "ReverseProxy", true}, {"Kestral", "Kestrel", true},
		{"ConnectionStrings", "", false}, {"MyApp", "", false}, {"Serilog", "", false},
	} {
		section, typo := TopLevelKey(c.key)
		if section != c.section || typo != c.typo {
			t.Errorf("TopLevelKey(%q) = %q, %v; want %q, %v", c.key, section, typo, c.section, c.typo)
			continue
		}
		if section != "" && !typo {
			continue
		}
		// What the loader says of it agrees.
		var infos []string
		_, warns, err := ParseWith([]byte(`{"`+c.key+`": 1, `+minimalRP+`}`), "json", LoadOptions{Info: func(m string) { infos = append(infos, m) }})
		if err != nil {
			t.Fatalf("%s: %v", c.key, err)
		}
		if typo && !slices.ContainsFunc(warns, func(w string) bool { return strings.HasPrefix(w, c.key+": unknown key; did you mean "+section+"?") }) {
			t.Errorf("%s: the loader's warnings %q name no typo of %s", c.key, warns, section)
		}
		if !typo && !slices.Equal(infos, []string{c.key + ": not a tether, YARP or ASP.NET section; ignored as the application's own"}) {
			t.Errorf("%s: the loader's info lines %q", c.key, infos)
		}
	}
}
