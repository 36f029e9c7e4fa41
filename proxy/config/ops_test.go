package config

import (
	"os"
	"slices"
	"strings"
	"testing"
)

const oneCluster = `"Clusters": {"c1": {"Destinations": {"d1": {"Address": "http://a.example"}}}}`

// TestWafPolicyTakesAStringAsYARPPoliciesDo: a route's WafPolicy may be
// named with a string, like AuthorizationPolicy or CorsPolicy.
func TestWafPolicyTakesAStringAsYARPPoliciesDo(t *testing.T) {
	for _, tc := range []struct {
		desc, policy string
		want         *WafPolicy
		err          string
	}{
		{"Disabled", `"Disabled"`, &WafPolicy{Disabled: true}, ""},
		{"Off is Disabled", `"off"`, &WafPolicy{Disabled: true}, ""},
		{"Detection", `"Detection"`, &WafPolicy{Mode: "Detection"}, ""},
		{"Prevention in any case", `"PREVENTION"`, &WafPolicy{Mode: "Prevention"}, ""},
		{"Default is the top-level Waf", `"Default"`, &WafPolicy{}, ""},
		{"the object form still works", `{"Disabled": true}`, &WafPolicy{Disabled: true}, ""},
		{"an unknown name is refused with the choices", `"Strict"`, nil, `ReverseProxy.Routes.r1.WafPolicy: "Strict": want Disabled, Detection, Prevention or Default`},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			in := `{"ReverseProxy": {"Routes": {"r1": {"ClusterId": "c1", "Match": {"Path": "/"}, "WafPolicy": ` + tc.policy + `}}, ` + oneCluster + `}}`
			c, _, err := Parse([]byte(in), "json")
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := c.ReverseProxy.Routes["r1"].WafPolicy; got == nil || *got != *tc.want {
				t.Fatalf("WafPolicy %+v, want %+v", got, tc.want)
			}
		})
	}
}

// TestSecureCookieOnPlainHTTPWarns: an affinity cookie that is always
// Secure, on routes only plain HTTP listeners serve, never comes back.
func TestSecureCookieOnPlainHTTPWarns(t *testing.T) {
	affinity := func(secure string) string {
		return `"SessionAffinity": {"Enabled": true, "Policy": "Cookie", "AffinityKeyName": "k", "Cookie": {"SecurePolicy": "` + secure + `"}}`
	}
	cluster := func(a string) string {
		return `"Clusters": {"c1": {` + a + `, "Destinations": {"d1": {"Address": "http://a.example"}}}}`
	}
	routes := `"Routes": {"r1": {"ClusterId": "c1", "Match": {"Path": "/"}}}`
	for _, tc := range []struct {
		desc, in string
		want     string // a warning containing this, or "" for none
	}{
		{"Always on plain HTTP warns, naming route and listener",
			`"Listeners": [{"Address": ":8080"}], "ReverseProxy": {` + routes + `, ` + cluster(affinity("Always")) + `}`,
			"ReverseProxy.Clusters.c1.SessionAffinity.Cookie.SecurePolicy: Always, but route r1 is served only by plain HTTP listeners (Listeners[0] :8080)"},
		{"the default listener counts",
			`"ReverseProxy": {` + routes + `, ` + cluster(affinity("Always")) + `}`, "route r1 is served only by plain HTTP listeners"},
		{"a route's own affinity block is named",
			`"ReverseProxy": {"Routes": {"r2": {"ClusterId": "c1", "Match": {"Path": "/"}, ` + affinity("always") + `}}, ` + oneCluster + `}`,
			"ReverseProxy.Routes.r2.SessionAffinity.Cookie.SecurePolicy: Always, but route r2"},
		{"SameAsRequest is fine", `"ReverseProxy": {` + routes + `, ` + cluster(affinity("SameAsRequest")) + `}`, ""},
		{"an HTTPS listener serves it", `"Urls": "https://*:8443", "ReverseProxy": {` + routes + `, ` + cluster(affinity("Always")) + `}`, ""},
		{"HTTPS and a plain HTTP redirect are fine", `"Listeners": [{"Address": ":8080", "Redirect": {"Scheme": "https"}}], "Urls": "https://*:8443", "Kestrel": {"Endpoints": {"s": {"Url": "https://*:8443"}}}, "ReverseProxy": {` + routes + `, ` + cluster(affinity("Always")) + `}`, ""},
		{"a plain listener beside an HTTPS one warns too", `"Urls": "http://*:8080;https://*:8443", "ReverseProxy": {` + routes + `, ` + cluster(affinity("Always")) + `}`,
			"route r1 is also served by plain HTTP listeners (Urls :8080)"},
		{"trusted proxies in front may terminate TLS: the warning says so", `"TrustedProxies": ["10.0.0.1"], "ReverseProxy": {` + routes + `, ` + cluster(affinity("Always")) + `}`,
			"starts a new session (unless the trusted proxies in front terminate TLS for every client)"},
		{"a header policy has no cookie", `"ReverseProxy": {` + routes + `, ` + cluster(strings.Replace(affinity("Always"), `"Cookie",`, `"CustomHeader",`, 1)) + `}`, ""},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			_, warns, err := ParseWith([]byte("{"+tc.in+"}"), "json", LoadOptions{LookupEnv: func(string) (string, bool) { return "", false }})
			if err != nil {
				t.Fatal(err)
			}
			i := slices.IndexFunc(warns, func(w string) bool { return strings.Contains(w, "SecurePolicy: Always") })
			switch {
			case tc.want == "" && i >= 0:
				t.Fatalf("unexpected warning %q", warns[i])
			case tc.want != "" && (i < 0 || !strings.Contains(warns[i], tc.want)):
				t.Fatalf("warnings %q, want one containing %q", warns, tc.want)
			}
		})
	}
}

// TestListenReplacesTheFilesListeners: --listen (LoadOptions.Listen)
// replaces Listeners, Kestrel endpoints and Urls.
func TestListenReplacesTheFilesListeners(t *testing.T) {
	in := `{"Listeners": [{"Address": ":8080"}], "Kestrel": {"Endpoints": {"e": {"Url": "http://127.0.0.1:9000"}}}, "ReverseProxy": {"Routes": {"r1": {"ClusterId": "c1", "Match": {"Path": "/"}}}, ` + oneCluster + `}}`
	for _, tc := range []struct {
		desc   string
		listen []string
		want   []string
	}{
		{"host:port", []string{"127.0.0.1:18081"}, []string{"127.0.0.1:18081"}},
		{"several, with :port and a URL", []string{":18082", "http://127.0.0.1:18083"}, []string{":18082", "127.0.0.1:18083"}},
		{"none keeps the file's", nil, []string{":8080", "127.0.0.1:9000"}},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			c, _, err := ParseWith([]byte(in), "json", LoadOptions{Listen: tc.listen})
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, l := range c.Listeners {
				got = append(got, l.Address)
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("listeners %q, want %q", got, tc.want)
			}
		})
	}
}

// TestDocsExampleKeepsItsSecureCookie: the full example of
// docs/CONFIGURATION.md sets SecurePolicy Always; no listener of it may serve
// routes over plain HTTP.
func TestDocsExampleKeepsItsSecureCookie(t *testing.T) {
	readme, err := os.ReadFile("../../docs/CONFIGURATION.md")
	if err != nil {
		t.Fatal(err)
	}
	var example string
	for _, block := range strings.Split(string(readme), "```json\n")[1:] {
		block, _, _ = strings.Cut(block, "```")
		if strings.Contains(block, `"SecurePolicy": "Always"`) {
			example = block
		}
	}
	if example == "" {
		t.Fatal("no docs/CONFIGURATION.md example with SecurePolicy Always")
	}
	_, warns, _ := ParseWith([]byte(example), "json", LoadOptions{LookupEnv: func(string) (string, bool) { return "", false }}) // its certificate files do not exist here
	for _, w := range warns {
		if strings.Contains(w, "SecurePolicy: Always") {
			t.Fatalf("the docs/CONFIGURATION.md example: %s", w)
		}
	}
}
