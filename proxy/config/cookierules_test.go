package config

import (
	"slices"
	"strings"
	"testing"
)

func TestCookieRuleWarnings(t *testing.T) {
	const aff = "ReverseProxy.Clusters.c1.SessionAffinity"
	cases := []struct {
		desc   string
		policy string
		name   string
		cookie obj
		want   []string // warnings expected (prefix match); nil: none of this kind
	}{
		{"__Host- with Domain, Path and SecurePolicy None", "HashCookie", "__Host-aff", obj{"Domain": "example.com", "Path": "/app", "SecurePolicy": "None"},
			[]string{aff + ".Cookie.SecurePolicy: the __Host- cookie name requires Secure", aff + ".Cookie.Path: the __Host- cookie name requires Path=/", aff + ".Cookie.Domain: the __Host- cookie name forbids Domain"}},
		{"__Host- as the prefix wants it: no warning", "Cookie", "__Host-aff", obj{"SecurePolicy": "Always", "Path": "/"}, nil},
		{"__Secure- with SecurePolicy SameAsRequest", "ArrCookie", "__Secure-aff", obj{"SecurePolicy": "SameAsRequest"},
			[]string{aff + ".Cookie.SecurePolicy: the __Secure- cookie name requires Secure"}},
		{"SameSite None with SecurePolicy None", "HashCookie", "aff", obj{"SameSite": "None", "SecurePolicy": "none"},
			[]string{aff + ".Cookie.SecurePolicy: browsers refuse SameSite=None without Secure: tether sends Secure on HTTPS requests"}},
		{"header policies set no cookie", "CustomHeader", "__Host-aff", obj{"Domain": "example.com"}, nil},
	}
	for _, tc := range cases {
		t.Run(tc.desc, func(t *testing.T) {
			cfg := baseConfig()
			set(cfg, aff, obj{"Enabled": true, "Policy": tc.policy, "AffinityKeyName": tc.name, "Cookie": tc.cookie})
			_, warns, err := Parse(mustJSON(t, cfg), "json")
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, w := range warns {
				if strings.Contains(w, "cookie name") || strings.Contains(w, "tether sends Secure") {
					got = append(got, w)
				}
			}
			if len(got) != len(tc.want) {
				t.Fatalf("warnings %q, want %q", got, tc.want)
			}
			for _, w := range tc.want {
				if !slices.ContainsFunc(got, func(g string) bool { return strings.HasPrefix(g, w) }) {
					t.Errorf("missing %q in %q", w, got)
				}
			}
		})
	}
}
