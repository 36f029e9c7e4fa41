package config

import (
	"fmt"
	"reflect"
	"strconv"
	"strings"
)

// Waf is the web application firewall (Application Gateway's WAF): OWASP
// Coraza running the OWASP Core Rule Set on every routed request, after
// routing and before affinity and the backend. The zero value is off.
type Waf struct {
	// Mode: Off (default), Detection (evaluate and log, still forward) or
	// Prevention (a threat is answered 403 and never reaches a backend).
	// A route's WafPolicy may differ.
	Mode string
	// ParanoiaLevel is CRS's blocking paranoia level, 1 (default) to 4:
	// higher levels run more rules and raise more false positives.
	ParanoiaLevel int
	// AnomalyThreshold is CRS's inbound anomaly score threshold: a request
	// whose score reaches it is a threat. Default 5 (one critical match).
	AnomalyThreshold int
	// MaxRequestBodySize is how many bytes of a request body are inspected,
	// and so at most buffered in memory per request. Default 131072
	// (128 KiB, Application Gateway's inspection limit). A body beyond it
	// is handled by RequestBodyLimitAction. It does not replace a route's
	// own MaxRequestBodySize, which is checked first.
	MaxRequestBodySize int64
	// RequestBodyLimitAction is CRS's SecRequestBodyLimitAction: Reject
	// (default: 413 in Prevention, logged in Detection) or ProcessPartial
	// (the first MaxRequestBodySize bytes are inspected, the rest streams
	// through uninspected).
	RequestBodyLimitAction string
	// InspectResponses turns on response inspection (CRS's RESPONSE-95x
	// rules): response headers, and bodies of text types up to
	// MaxResponseBodySize, which are then buffered before they are sent.
	// Default false: responses stream untouched.
	InspectResponses bool
	// MaxResponseBodySize bounds the response body inspected (and
	// buffered) when InspectResponses is on; the rest streams through.
	// Default 524288.
	MaxResponseBodySize int64
	// Exclusions switch rules off, everywhere or on some routes only.
	Exclusions []WafExclusion
	// Rules are extra rule files (ModSecurity SecLang), loaded after the
	// CRS, e.g. for local exclusions or rules of one's own. A rule error is
	// a config error naming the file and line.
	Rules []string
	// SetupRules are rule files loaded before the CRS, where CRS reads its
	// settings (crs-setup.conf: SecAction setting tx.* variables such as
	// allowed methods or argument limits, SecDefaultAction). Errors as for
	// Rules.
	SetupRules []string
}

// WafExclusion switches CRS rules off (Application Gateway's exclusions and
// per-rule overrides).
type WafExclusion struct {
	// RuleIds are rule ids ("942100", or a number) or inclusive ranges
	// ("942000-942999"). Required.
	RuleIds []string
	// Routes limits the exclusion to these route ids; empty: every route.
	Routes []string
}

// WafPolicy is a route's own WAF setting (Application Gateway's per-site
// and per-URI policies). Nil: the top-level Waf applies. Like YARP's other
// route policies (AuthorizationPolicy, CorsPolicy), it may be named with a
// string: "Disabled" (or "Off"), "Detection", "Prevention", or "Default"
// (the top-level Waf).
type WafPolicy struct {
	// Disabled turns the WAF off for the route.
	Disabled bool
	// Mode: Detection or Prevention (Off is the same as Disabled); empty:
	// the top-level Mode.
	Mode string
}

// wafPolicyName decodes the string form of a route's WafPolicy into v.
func (d *decoder) wafPolicyName(path, name string, v reflect.Value) {
	var p WafPolicy
	switch s := strings.TrimSpace(name); {
	case strings.EqualFold(s, "Disabled"), strings.EqualFold(s, "Off"):
		p.Disabled = true
	case strings.EqualFold(s, "Detection"), strings.EqualFold(s, "Prevention"):
		p.Mode = strings.ToUpper(s[:1]) + strings.ToLower(s[1:])
	case strings.EqualFold(s, "Default"), s == "":
	default:
		d.errorf(path, "%q: want Disabled, Detection, Prevention or Default, or an object ({\"Disabled\": true} or {\"Mode\": \"Detection\"})", name)
		return
	}
	v.Set(reflect.ValueOf(p))
}

var (
	wafModes        = []string{"Off", "Detection", "Prevention"}
	wafLimitActions = []string{"Reject", "ProcessPartial"}
)

// WafRuleRange is one parsed WafExclusion.RuleIds entry.
type WafRuleRange struct{ First, Last int }

// ParseWafRuleIDs reads a RuleIds entry: "942100" or "942000-942999".
func ParseWafRuleIDs(s string) (WafRuleRange, error) {
	s = strings.TrimSpace(s)
	lo, hi, isRange := strings.Cut(s, "-")
	first, err := strconv.Atoi(strings.TrimSpace(lo))
	if err != nil || first < 1 {
		return WafRuleRange{}, fmt.Errorf("%q is not a rule id or range (want 942100 or 942000-942999)", s)
	}
	last := first
	if isRange {
		if last, err = strconv.Atoi(strings.TrimSpace(hi)); err != nil || last < first {
			return WafRuleRange{}, fmt.Errorf("%q is not a rule id range (want first-last, first <= last)", s)
		}
	}
	return WafRuleRange{First: first, Last: last}, nil
}

// waf checks the Waf section and every route's WafPolicy. Rule files are
// parsed when the data path is built (proxy.Compile), which reports their
// errors with file and line.
func (v *validator) waf(c *Config) {
	w := &c.Waf
	v.enum("Waf.Mode", &w.Mode, wafModes)
	v.enum("Waf.RequestBodyLimitAction", &w.RequestBodyLimitAction, wafLimitActions)
	if w.ParanoiaLevel != 0 && (w.ParanoiaLevel < 1 || w.ParanoiaLevel > 4) {
		v.errorf("Waf.ParanoiaLevel", "%d is out of range (1..4)", w.ParanoiaLevel)
	}
	if w.AnomalyThreshold < 0 {
		v.errorf("Waf.AnomalyThreshold", "must be at least 1")
	}
	if w.MaxRequestBodySize < 0 {
		v.errorf("Waf.MaxRequestBodySize", "must be a size in bytes")
	}
	if w.MaxResponseBodySize < 0 {
		v.errorf("Waf.MaxResponseBodySize", "must be a size in bytes")
	}
	for i, e := range w.Exclusions {
		p := fmt.Sprintf("Waf.Exclusions[%d]", i)
		if len(e.RuleIds) == 0 {
			v.errorf(p+".RuleIds", "required")
		}
		for j, id := range e.RuleIds {
			if _, err := ParseWafRuleIDs(id); err != nil {
				v.errorf(fmt.Sprintf("%s.RuleIds[%d]", p, j), "%v", err)
			}
		}
		for j, r := range e.Routes {
			id, ok := foldKey(c.ReverseProxy.Routes, r)
			if !ok {
				v.errorf(fmt.Sprintf("%s.Routes[%d]", p, j), "no route named %q", r)
			}
			e.Routes[j] = id
		}
	}
	for i, f := range w.Rules {
		v.file(fmt.Sprintf("Waf.Rules[%d]", i), f)
	}
	for i, f := range w.SetupRules {
		v.file(fmt.Sprintf("Waf.SetupRules[%d]", i), f)
	}
	for _, id := range sortedKeys(c.ReverseProxy.Routes) {
		if pol := c.ReverseProxy.Routes[id].WafPolicy; pol != nil {
			v.enum("ReverseProxy.Routes."+id+".WafPolicy.Mode", &pol.Mode, wafModes)
		}
	}
}

// wafDefaults fills in the Waf section's defaults.
func wafDefaults(c *Config) { c.Waf = c.Waf.WithDefaults() }

// WithDefaults returns w with every default filled in (checks registered
// with AddCheck see a config before Load fills them).
func (w Waf) WithDefaults() Waf {
	setStr(&w.Mode, "Off")
	if w.ParanoiaLevel < 1 || w.ParanoiaLevel > 4 {
		w.ParanoiaLevel = 1 // unset (or refused by validation)
	}
	if w.AnomalyThreshold < 1 {
		w.AnomalyThreshold = 5
	}
	if w.MaxRequestBodySize <= 0 {
		w.MaxRequestBodySize = 128 << 10
	}
	if w.MaxResponseBodySize <= 0 {
		w.MaxResponseBodySize = 512 << 10
	}
	if w.RequestBodyLimitAction != "ProcessPartial" {
		w.RequestBodyLimitAction = "Reject"
	}
	return w
}

// WafMode is the mode that applies to a route: its WafPolicy's, else the
// top-level one. "Off" when the WAF does not run for it.
func (c *Config) WafMode(r *Route) string {
	if p := r.WafPolicy; p != nil {
		if p.Disabled {
			return "Off"
		}
		if p.Mode != "" {
			return p.Mode
		}
	}
	if c.Waf.Mode == "" {
		return "Off"
	}
	return c.Waf.Mode
}
