package config

import (
	"slices"
	"strings"
	"testing"
	"time"
)

func TestRoutePolicyRules(t *testing.T) {
	const r1 = "ReverseProxy.Routes.r1"
	cases := []struct {
		desc string
		set  map[string]any // keys under the route
		// errPath/errMsg: the error expected; empty for a config that loads.
		errPath, errMsg string
		check           func(*testing.T, *Route)
	}{
		{desc: "AuthorizationPolicy Anonymous loads, canonical spelling", set: map[string]any{"AuthorizationPolicy": "anonymous"},
			check: func(t *testing.T, r *Route) {
				if r.AuthorizationPolicy != "Anonymous" {
					t.Errorf("AuthorizationPolicy %q", r.AuthorizationPolicy)
				}
			}},
		{desc: "AuthorizationPolicy Default is refused: YARP would require an authenticated user",
			set: map[string]any{"AuthorizationPolicy": "Default"}, errPath: r1 + ".AuthorizationPolicy", errMsg: "would be open behind tether"},
		{desc: "a named AuthorizationPolicy is refused",
			set: map[string]any{"AuthorizationPolicy": "customPolicy"}, errPath: r1 + ".AuthorizationPolicy", errMsg: `"customPolicy": tether does not authenticate`},
		{desc: "CorsPolicy disable loads (YARP's sample spelling)", set: map[string]any{"CorsPolicy": "disable"},
			check: func(t *testing.T, r *Route) {
				if r.CorsPolicy != "Disable" {
					t.Errorf("CorsPolicy %q", r.CorsPolicy)
				}
			}},
		{desc: "CorsPolicy default is refused", set: map[string]any{"CorsPolicy": "default"}, errPath: r1 + ".CorsPolicy", errMsg: "does not implement CORS"},
		{desc: "RateLimiterPolicy stays a warning", set: map[string]any{"RateLimiterPolicy": "fixed"}},
		{desc: "OutputCachePolicy stays a warning", set: map[string]any{"OutputCachePolicy": "cache"}},
		{desc: "Timeout loads", set: map[string]any{"Timeout": "00:00:30"},
			check: func(t *testing.T, r *Route) {
				if !r.Timeout.Set || r.Timeout.Duration != 30*time.Second {
					t.Errorf("Timeout %+v", r.Timeout)
				}
			}},
		{desc: "Timeout zero is refused", set: map[string]any{"Timeout": "00:00:00"}, errPath: r1 + ".Timeout", errMsg: "greater than zero"},
		{desc: "TimeoutPolicy Disable loads", set: map[string]any{"TimeoutPolicy": "DISABLE"},
			check: func(t *testing.T, r *Route) {
				if r.TimeoutPolicy != "Disable" || r.Timeout.Set {
					t.Errorf("TimeoutPolicy %q, Timeout %+v", r.TimeoutPolicy, r.Timeout)
				}
			}},
		{desc: "a named TimeoutPolicy is refused", set: map[string]any{"TimeoutPolicy": "slow"}, errPath: r1 + ".TimeoutPolicy", errMsg: "named timeout policies"},
		{desc: "Timeout and TimeoutPolicy together are refused, as in YARP", set: map[string]any{"Timeout": "00:00:05", "TimeoutPolicy": "Disable"},
			errPath: r1 + ".Timeout", errMsg: "not together with TimeoutPolicy"},
	}
	for _, tc := range cases {
		t.Run(tc.desc, func(t *testing.T) {
			cfg := baseConfig()
			for k, v := range tc.set {
				set(cfg, r1+"."+k, v)
			}
			c, warns, err := Parse(mustJSON(t, cfg), "json")
			if tc.errPath != "" {
				wantFieldError(t, err, tc.errPath, tc.errMsg)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			for k := range tc.set {
				if (k == "RateLimiterPolicy" || k == "OutputCachePolicy") &&
					!slices.ContainsFunc(warns, func(w string) bool { return strings.HasPrefix(w, r1+"."+k+": accepted but not implemented") }) {
					t.Errorf("no warning for %s: %q", k, warns)
				}
			}
			if tc.check != nil {
				tc.check(t, c.ReverseProxy.Routes["r1"])
			}
		})
	}
}
