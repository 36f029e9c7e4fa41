package config

import (
	"errors"
	"strings"
	"testing"
)

func wafConfig(waf, policy string) string {
	if policy != "" {
		policy = `"WafPolicy": ` + policy + `,`
	}
	return `{ "Waf": ` + waf + `,
  "ReverseProxy": {
    "Routes": { "api": { ` + policy + ` "ClusterId": "c", "Match": { "Path": "/api/{**rest}" } } },
    "Clusters": { "c": { "Destinations": { "d": { "Address": "http://127.0.0.1:1" } } } } } }`
}

func TestWafValidation(t *testing.T) {
	cases := []struct {
		desc, waf, policy string
		path, msg         string
	}{
		{desc: "Mode is Off, Detection or Prevention", waf: `{"Mode": "Block"}`, path: "Waf.Mode", msg: "Block"},
		{desc: "ParanoiaLevel is 1 to 4", waf: `{"ParanoiaLevel": 5}`, path: "Waf.ParanoiaLevel", msg: "1..4"},
		{desc: "AnomalyThreshold is positive", waf: `{"AnomalyThreshold": -1}`, path: "Waf.AnomalyThreshold", msg: "at least 1"},
		{desc: "MaxRequestBodySize is a size", waf: `{"MaxRequestBodySize": -5}`, path: "Waf.MaxRequestBodySize", msg: "size"},
		{desc: "RequestBodyLimitAction is CRS's", waf: `{"RequestBodyLimitAction": "Drop"}`, path: "Waf.RequestBodyLimitAction", msg: "Drop"},
		{desc: "an exclusion needs RuleIds", waf: `{"Exclusions": [{"Routes": ["api"]}]}`, path: "Waf.Exclusions[0].RuleIds", msg: "required"},
		{desc: "rule ids are numbers or ranges", waf: `{"Exclusions": [{"RuleIds": ["942100", "sqli"]}]}`, path: "Waf.Exclusions[0].RuleIds[1]", msg: "sqli"},
		{desc: "a rule range runs upwards", waf: `{"Exclusions": [{"RuleIds": ["942999-942000"]}]}`, path: "Waf.Exclusions[0].RuleIds[0]", msg: "first <= last"},
		{desc: "an exclusion names existing routes", waf: `{"Exclusions": [{"RuleIds": [942100], "Routes": ["nope"]}]}`, path: "Waf.Exclusions[0].Routes[0]", msg: "no route"},
		{desc: "rule files must exist", waf: `{"Rules": ["/nonexistent/local.conf"]}`, path: "Waf.Rules[0]", msg: "does not exist"},
		{desc: "a route's WafPolicy Mode is checked", waf: `{}`, policy: `{"Mode": "Loud"}`, path: "ReverseProxy.Routes.api.WafPolicy.Mode", msg: "Loud"},
	}
	for _, tc := range cases {
		t.Run(tc.desc, func(t *testing.T) {
			_, _, err := Parse([]byte(wafConfig(tc.waf, tc.policy)), "json")
			var es Errors
			if !errors.As(err, &es) {
				t.Fatalf("err %v, want Errors", err)
			}
			for _, e := range es {
				if e.Path == tc.path && strings.Contains(e.Message, tc.msg) {
					return
				}
			}
			t.Fatalf("errors %v, want %s: ...%s...", es, tc.path, tc.msg)
		})
	}
}

func TestWafDefaultsAndModes(t *testing.T) {
	cases := []struct {
		desc, waf, policy string
		want              string
	}{
		{desc: "absent Waf is Off", waf: `{}`, want: "Off"},
		{desc: "the site's mode applies to a route without policy", waf: `{"mode": "prevention"}`, want: "Prevention"},
		{desc: "Disabled wins over the site's mode", waf: `{"Mode": "Prevention"}`, policy: `{"Disabled": true}`, want: "Off"},
		{desc: "a route's Mode wins over the site's", waf: `{"Mode": "Prevention"}`, policy: `{"Mode": "Detection"}`, want: "Detection"},
		{desc: "a route may run the WAF with the site Off", waf: `{"Mode": "Off"}`, policy: `{"Mode": "Prevention"}`, want: "Prevention"},
	}
	for _, tc := range cases {
		t.Run(tc.desc, func(t *testing.T) {
			c, _, err := Parse([]byte(wafConfig(tc.waf, tc.policy)), "json")
			if err != nil {
				t.Fatal(err)
			}
			if got := c.WafMode(c.ReverseProxy.Routes["api"]); got != tc.want {
				t.Fatalf("WafMode %q, want %q", got, tc.want)
			}
			w := c.Waf
			if w.ParanoiaLevel != 1 || w.AnomalyThreshold != 5 || w.MaxRequestBodySize != 128<<10 ||
				w.RequestBodyLimitAction != "Reject" || w.InspectResponses || w.MaxResponseBodySize != 512<<10 {
				t.Fatalf("defaults %+v", w)
			}
		})
	}
}

func TestWafUnknownKeyWarnsWithNearestKey(t *testing.T) {
	_, warns, err := Parse([]byte(wafConfig(`{"ParanoiaLevl": 2}`, "")), "json")
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range warns {
		if strings.Contains(w, "Waf.ParanoiaLevl") && strings.Contains(w, "ParanoiaLevel") {
			return
		}
	}
	t.Fatalf("warnings %q, want one naming Waf.ParanoiaLevl and ParanoiaLevel", warns)
}

func TestParseWafRuleIDs(t *testing.T) {
	for _, tc := range []struct {
		in          string
		first, last int
		bad         bool
	}{
		{in: "942100", first: 942100, last: 942100},
		{in: " 942000 - 942999 ", first: 942000, last: 942999},
		{in: "0", bad: true},
		{in: "-5", bad: true},
		{in: "1-", bad: true},
		{in: "abc", bad: true},
	} {
		r, err := ParseWafRuleIDs(tc.in)
		if (err != nil) != tc.bad || (!tc.bad && (r.First != tc.first || r.Last != tc.last)) {
			t.Errorf("ParseWafRuleIDs(%q) = %+v, %v", tc.in, r, err)
		}
	}
}
