package config

import (
	"crypto/tls"
	"slices"
	"strings"
	"testing"
)

func TestHTTPVersionRules(t *testing.T) {
	const at = "ReverseProxy.Clusters.c1.HttpRequest"
	cases := []struct {
		desc, version, policy string
		wantV, wantP          string
		warn, errPath, errMsg string
	}{
		{desc: "YARP's defaults: 2.0, RequestVersionOrLower", wantV: "2.0", wantP: "RequestVersionOrLower"},
		{desc: "\"2\" reads as 2.0, policy case-insensitive", version: "2", policy: "requestversionexact", wantV: "2.0", wantP: "RequestVersionExact"},
		{desc: "1.1", version: "1.1", policy: "RequestVersionOrHigher", wantV: "1.1", wantP: "RequestVersionOrHigher"},
		{desc: "1.0 is sent as 1.1, with a warning", version: "1.0", wantV: "1.1", wantP: "RequestVersionOrLower", warn: at + ".Version: HTTP/1.0 is sent as HTTP/1.1"},
		{desc: "3 with OrLower falls back, with a warning", version: "3", wantV: "2.0", wantP: "RequestVersionOrLower", warn: at + ".Version: HTTP/3 is not supported"},
		{desc: "3 exact is refused", version: "3.0", policy: "RequestVersionExact", errPath: at + ".Version", errMsg: "HTTP/3 is not supported"},
		{desc: "unknown version", version: "2.5", errPath: at + ".Version", errMsg: `unknown HTTP version "2.5"`},
		{desc: "unknown policy", policy: "Exact", errPath: at + ".VersionPolicy", errMsg: `unknown value "Exact"`},
	}
	for _, tc := range cases {
		t.Run(tc.desc, func(t *testing.T) {
			cfg := baseConfig()
			if tc.version != "" {
				set(cfg, "ReverseProxy.Clusters.c1.HttpRequest.Version", tc.version)
			}
			if tc.policy != "" {
				set(cfg, "ReverseProxy.Clusters.c1.HttpRequest.VersionPolicy", tc.policy)
			}
			c, warns, err := Parse(mustJSON(t, cfg), "json")
			if tc.errPath != "" {
				wantFieldError(t, err, tc.errPath, tc.errMsg)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			r := c.ReverseProxy.Clusters["c1"].HttpRequest
			if r.Version != tc.wantV || r.VersionPolicy != tc.wantP {
				t.Errorf("got %q %q, want %q %q", r.Version, r.VersionPolicy, tc.wantV, tc.wantP)
			}
			if tc.warn != "" && !slices.ContainsFunc(warns, func(w string) bool { return strings.HasPrefix(w, tc.warn) }) {
				t.Errorf("warnings %q lack %q", warns, tc.warn)
			}
		})
	}
}

func TestSslProtocolsForms(t *testing.T) {
	for _, c := range []struct {
		desc string
		in   any
		want TLSVersions
	}{
		{"a list", []any{"Tls12", "Tls13"}, TLSVersions{Min: tls.VersionTLS12, Max: tls.VersionTLS13, Set: true}},
		{"a comma-separated string (.NET flags)", "Tls13, tls12", TLSVersions{Min: tls.VersionTLS12, Max: tls.VersionTLS13, Set: true}},
		{"old versions by name", []any{"Tls", "Tls11"}, TLSVersions{Min: tls.VersionTLS10, Max: tls.VersionTLS11, Set: true}},
		{"None: the default", "None", TLSVersions{Set: true}},
	} {
		t.Run(c.desc, func(t *testing.T) {
			cfg := baseConfig()
			set(cfg, "ReverseProxy.Clusters.c1.HttpClient.SslProtocols", c.in)
			cf, _, err := Parse(mustJSON(t, cfg), "json")
			if err != nil {
				t.Fatal(err)
			}
			if got := cf.ReverseProxy.Clusters["c1"].HttpClient.SslProtocols; got != c.want {
				t.Fatalf("%+v, want %+v", got, c.want)
			}
		})
	}
}
