package config

import (
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"net"
	"net/netip"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"unicode"

	"golang.org/x/net/http/httpguts"
)

// Canonical spellings of every enumeration; matched case-insensitively and
// rewritten to these by Load.
var (
	lbPolicies       = []string{"PowerOfTwoChoices", "RoundRobin", "LeastRequests", "Random", "FirstAlphabetical"}
	affinityPolicies = []string{"HashCookie", "ArrCookie", "Cookie", "CustomHeader", "EnvelopeCookie", "EnvelopeHeader"}
	failurePolicies  = []string{"Redistribute", "Return503Error"}
	sameSiteModes    = []string{"Unspecified", "None", "Lax", "Strict"}
	securePolicies   = []string{"SameAsRequest", "Always", "None"}
	headerModes      = []string{"ExactHeader", "HeaderPrefix", "Contains", "NotContains", "Exists", "NotExists"}
	queryModes       = []string{"Exact", "Contains", "NotContains", "Prefix", "Exists"}
	activePolicies   = []string{"ConsecutiveFailures"}
	passivePolicies  = []string{"TransportFailureRate"}
	redirectSchemes  = []string{"http", "https"}
	redirectCodes    = []int{301, 302, 303, 307, 308}
)

// thresholdKey is YARP's cluster metadata key for the failure threshold.
const thresholdKey = "ConsecutiveFailuresHealthPolicy.Threshold"

type validator struct {
	errs  Errors
	warns []string
}

func (v *validator) errorf(path, format string, args ...any) {
	v.errs = append(v.errs, FieldError{Path: path, Message: fmt.Sprintf(format, args...)})
}

// enum checks *s against allowed (case-insensitively) and rewrites it to the
// canonical spelling. Empty is left for the defaults.
func (v *validator) enum(path string, s *string, allowed []string) {
	if *s == "" {
		return
	}
	for _, a := range allowed {
		if strings.EqualFold(*s, a) {
			*s = a
			return
		}
	}
	v.errorf(path, "unknown value %q (want one of %s)", *s, strings.Join(allowed, ", "))
}

func sortedKeys[V any](m map[string]V) []string { return slices.Sorted(maps.Keys(m)) }

func (v *validator) config(c *Config) {
	v.allowedHosts(c.AllowedHosts)
	for i := range c.Listeners {
		v.listener(fmt.Sprintf("Listeners[%d]", i), &c.Listeners[i])
	}
	for i, p := range c.TrustedProxies {
		if _, err := netip.ParseAddr(p); err == nil {
			continue
		}
		if _, err := netip.ParsePrefix(p); err != nil {
			v.errorf(fmt.Sprintf("TrustedProxies[%d]", i), "%q is neither an IP address nor a CIDR", p)
		}
	}
	if c.Limits.MaxRequestHeadersTotalSize < 0 {
		v.errorf("Limits.MaxRequestHeadersTotalSize", "must not be negative")
	}
	v.positive("Limits.RequestHeadersTimeout", c.Limits.RequestHeadersTimeout)
	v.positive("Limits.KeepAliveTimeout", c.Limits.KeepAliveTimeout)
	rp := &c.ReverseProxy
	for _, id := range sortedKeys(rp.Routes) {
		v.route("ReverseProxy.Routes."+id, rp.Routes[id], rp.Clusters)
	}
	for _, id := range sortedKeys(rp.Clusters) {
		v.cluster("ReverseProxy.Clusters."+id, rp.Clusters[id])
	}
	v.dataProtection(c)
	v.waf(c)
	v.runChecks(c)
}

// Further checks of a decoded config that need packages config cannot
// import: package proxy registers its compiler (route templates, transforms,
// affinity, destinations), so that `config validate` and a reload report
// every error in one run, not those of the compiler only once the rest is
// fixed.
var (
	checksMu sync.Mutex
	checks   []func(*Config) Errors
)

// AddCheck registers a check that Parse runs on every decoded config, also
// when the config has other errors (so a check must cope with values the
// validator refuses). Its errors join Parse's, except those at a path
// Parse already reported.
func AddCheck(f func(*Config) Errors) {
	checksMu.Lock()
	defer checksMu.Unlock()
	checks = append(checks, f)
}

func (v *validator) runChecks(c *Config) {
	checksMu.Lock()
	fs := slices.Clone(checks)
	checksMu.Unlock()
	seen := make(map[string]bool, len(v.errs))
	for _, e := range v.errs {
		seen[e.Path] = true
	}
	for _, f := range fs {
		for _, e := range runCheck(f, c) {
			if !seen[e.Path] {
				seen[e.Path] = true
				v.errs = append(v.errs, e)
			}
		}
	}
}

// runCheck turns a check's panic on a config the validator already refused
// into an error, so a bad file never crashes `config validate`.
func runCheck(f func(*Config) Errors, c *Config) (errs Errors) {
	defer func() {
		if r := recover(); r != nil {
			errs = Errors{{Path: "$", Message: fmt.Sprintf("could not check further (%v); fix the errors above first", r)}}
		}
	}()
	return f(c)
}

func (v *validator) listener(path string, l *Listener) {
	if l.Address == "" {
		v.errorf(path+".Address", "required")
	} else if err := checkHostPort(l.Address); err != nil {
		v.errorf(path+".Address", "%q: %v", l.Address, err)
	}
	if c := l.Certificate; c != nil {
		v.certificate(path+".Certificate", c, "") // kestrel.go: PEM or PKCS#12
	}
	if l.Acme != nil {
		v.acme(path+".Acme", l) // acme.go
	}
	if r := l.Redirect; r != nil {
		v.enum(path+".Redirect.Scheme", &r.Scheme, redirectSchemes)
		if r.StatusCode != 0 && !slices.Contains(redirectCodes, r.StatusCode) {
			v.errorf(path+".Redirect.StatusCode", "%d is not a redirect status (want 301, 302, 303, 307 or 308)", r.StatusCode)
		}
		if r.Port < 0 || r.Port > 65535 {
			v.errorf(path+".Redirect.Port", "%d is out of range (1..65535)", r.Port)
		}
	}
}

// positive refuses a duration given as zero where zero has no meaning (a
// timer that fires at once, a probe loop that never sleeps). Absent keys
// get their default instead.
func (v *validator) positive(path string, d Duration) {
	if d.Set && d.Duration <= 0 {
		v.errorf(path, "must be greater than zero")
	}
}

func (v *validator) file(path, name string) {
	if name == "" {
		v.errorf(path, "required")
		return
	}
	if _, err := os.Stat(name); errors.Is(err, fs.ErrNotExist) {
		v.errorf(path, "file %q does not exist", name)
	} else if err != nil {
		v.errorf(path, "%v", err)
	}
}

func (v *validator) route(path string, r *Route, clusters map[string]*Cluster) {
	switch {
	case r.ClusterId == "":
		v.errorf(path+".ClusterId", "required")
	case clusters[r.ClusterId] == nil:
		// Keys are case-insensitive in .NET configuration, so ids are too.
		id, ok := foldKey(clusters, r.ClusterId)
		if !ok {
			v.errorf(path+".ClusterId", "no cluster named %q%s", r.ClusterId, nearestKey(r.ClusterId, clusters))
		}
		r.ClusterId = id
	}
	if r.MaxRequestBodySize < -1 {
		v.errorf(path+".MaxRequestBodySize", "must be -1, 0 or a size in bytes")
	}
	m := &r.Match
	if m.Path == "" && len(m.Hosts) == 0 {
		v.errorf(path+".Match", "Path or Hosts required")
	}
	for i, h := range m.Hosts {
		if err := checkHostPattern(h); err != nil {
			v.errorf(fmt.Sprintf("%s.Match.Hosts[%d]", path, i), "%q: %v", h, err)
		}
	}
	for i, meth := range m.Methods {
		switch {
		case strings.TrimSpace(meth) == "":
			v.errorf(fmt.Sprintf("%s.Match.Methods[%d]", path, i), "must not be empty")
		case !httpguts.ValidHeaderFieldName(meth):
			// RFC 9110 §9.1: a method is a token; nothing else can match.
			v.errorf(fmt.Sprintf("%s.Match.Methods[%d]", path, i), "%q is not an HTTP method (a token: no spaces or separators)", meth)
		}
	}
	for i := range m.Headers {
		h := &m.Headers[i]
		p := fmt.Sprintf("%s.Match.Headers[%d]", path, i)
		v.enum(p+".Mode", &h.Mode, headerModes)
		v.matchRule(p, h.Name, h.Values, h.Mode == "Exists" || h.Mode == "NotExists")
	}
	for i := range m.QueryParameters {
		q := &m.QueryParameters[i]
		p := fmt.Sprintf("%s.Match.QueryParameters[%d]", path, i)
		v.enum(p+".Mode", &q.Mode, queryModes)
		v.matchRule(p, q.Name, q.Values, q.Mode == "Exists")
	}
	for i, t := range r.Transforms {
		r.Transforms[i] = v.transform(fmt.Sprintf("%s.Transforms[%d]", path, i), t)
	}
	if r.SessionAffinity != nil {
		v.affinity(path+".SessionAffinity", r.SessionAffinity)
	}
}

func (v *validator) matchRule(path, name string, values []string, existence bool) {
	if name == "" {
		v.errorf(path+".Name", "required")
	}
	if !existence && len(values) == 0 {
		v.errorf(path+".Values", "required unless Mode is an existence check")
	}
}

func foldKey[V any](m map[string]V, key string) (string, bool) {
	for _, k := range sortedKeys(m) {
		if strings.EqualFold(k, key) {
			return k, true
		}
	}
	return key, false
}

// allowedHosts warns when ASP.NET's AllowedHosts names hosts: ASP.NET
// would answer 400 to a request for any other host, tether serves it.
// "*" (the template's value, alone or in the list) allows every host.
func (v *validator) allowedHosts(hosts string) {
	if strings.TrimSpace(hosts) == "" {
		return
	}
	for _, h := range strings.Split(hosts, ";") {
		if strings.TrimSpace(h) == "*" {
			return
		}
	}
	v.warns = append(v.warns, fmt.Sprintf("AllowedHosts: %q is not enforced by tether: requests for every host are served (a route's Match.Hosts restricts the hosts it serves)", hosts))
}

// nearestKey is "; did you mean K?" for the key of m nearest to typed
// within a typo's distance, else "".
func nearestKey[V any](typed string, m map[string]V) string {
	best, bestDist := "", suggestDistance(typed)+1
	for _, k := range sortedKeys(m) {
		if d := editDistance(strings.ToLower(typed), strings.ToLower(k)); d < bestDist {
			best, bestDist = k, d
		}
	}
	if best == "" {
		return ""
	}
	return "; did you mean " + best + "?"
}

func (v *validator) affinity(path string, a *SessionAffinity) {
	v.enum(path+".Policy", &a.Policy, affinityPolicies)
	v.enum(path+".FailurePolicy", &a.FailurePolicy, failurePolicies)
	v.enum(path+".Cookie.SameSite", &a.Cookie.SameSite, sameSiteModes)
	v.enum(path+".Cookie.SecurePolicy", &a.Cookie.SecurePolicy, securePolicies)
	if a.Enabled && a.AffinityKeyName == "" {
		v.errorf(path+".AffinityKeyName", "required when Enabled")
	}
	// 1xx is not a final status: the error body would go out as a 200.
	if a.FailureStatusCode != 0 && (a.FailureStatusCode < 200 || a.FailureStatusCode > 599) {
		v.errorf(path+".FailureStatusCode", "%d is not a final HTTP status (200..599)", a.FailureStatusCode)
	}
	// Browsers drop SameSite=None cookies without Secure; ASP.NET only
	// logs this too, so it is a warning, not an error.
	if a.Enabled && a.Cookie.SameSite == "None" && a.Cookie.SecurePolicy != "Always" && !strings.HasPrefix(a.Policy, "Envelope") && a.Policy != "CustomHeader" {
		v.warns = append(v.warns, path+".Cookie.SameSite: None without SecurePolicy Always: browsers drop the cookie on plain HTTP, and affinity will not stick there")
	}
}

func (v *validator) cluster(path string, c *Cluster) {
	v.enum(path+".LoadBalancingPolicy", &c.LoadBalancingPolicy, lbPolicies)
	v.affinity(path+".SessionAffinity", &c.SessionAffinity)

	a := &c.HealthCheck.Active
	ap := path + ".HealthCheck.Active"
	v.enum(ap+".Policy", &a.Policy, activePolicies)
	if a.Path != "" && !strings.HasPrefix(a.Path, "/") {
		// Appended to the destination's address: "healthz" would probe
		// "http://host:8080healthz" or a path the backend does not serve.
		v.errorf(ap+".Path", "%q must start with '/'", a.Path)
	}
	if a.HealthyStatuses != "" {
		if _, err := ParseStatusRanges(a.HealthyStatuses); err != nil {
			v.errorf(ap+".HealthyStatuses", "%v", err)
		}
	}
	for _, t := range []struct {
		name string
		n    int
	}{{"ConsecutiveFailures", a.ConsecutiveFailures}, {"ConsecutiveSuccesses", a.ConsecutiveSuccesses}, {"ProbeFanout", a.ProbeFanout}} {
		if t.n < 0 { // 0 means unset: the default applies
			v.errorf(ap+"."+t.name, "must be at least 1")
		}
	}
	if k, ok := foldKey(c.Metadata, thresholdKey); ok {
		if n, err := strconv.Atoi(c.Metadata[k]); err != nil || n < 1 {
			v.errorf(path+".Metadata."+k, "want an integer of at least 1, got %q", c.Metadata[k])
		}
	}
	v.positive(ap+".Interval", a.Interval)
	v.positive(ap+".Timeout", a.Timeout)
	v.enum(path+".HealthCheck.Passive.Policy", &c.HealthCheck.Passive.Policy, passivePolicies)
	v.positive(path+".HealthCheck.Passive.ReactivationPeriod", c.HealthCheck.Passive.ReactivationPeriod)
	v.positive(path+".HttpRequest.ActivityTimeout", c.HttpRequest.ActivityTimeout)
	v.positive(path+".HttpRequest.Timeout", c.HttpRequest.Timeout)
	v.backendTLS(path+".HttpClient", &c.HttpClient)
	if c.HttpClient.MaxConnectionsPerServer < 0 {
		v.errorf(path+".HttpClient.MaxConnectionsPerServer", "must not be negative")
	}

	if len(c.Destinations) == 0 {
		v.errorf(path+".Destinations", "at least one destination required")
	}
	for _, id := range sortedKeys(c.Destinations) {
		d, dp := c.Destinations[id], path+".Destinations."+id
		if d.Address == "" {
			v.errorf(dp+".Address", "required")
		} else if err := checkURL(d.Address); err != nil {
			v.errorf(dp+".Address", "%q: %v", d.Address, err)
		}
		if d.Health != "" {
			if err := checkURL(d.Health); err != nil {
				v.errorf(dp+".Health", "%q: %v", d.Health, err)
			}
		}
	}
}

// checkURL accepts an absolute http or https URL whose host is an IP address
// or a DNS name.
func checkURL(s string) error {
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") {
		return errors.New("want an absolute http:// or https:// URL")
	}
	if u.Hostname() == "" {
		return errors.New("no host")
	}
	if !validHost(u.Hostname()) {
		return fmt.Errorf("host %q is neither an IP address nor a DNS name", u.Hostname())
	}
	if p := u.Port(); p != "" {
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return fmt.Errorf("port %q is out of range (1..65535)", p)
		}
	}
	return nil
}

// checkHostPort accepts "host:port" and ":port" listen addresses.
func checkHostPort(s string) error {
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return errors.New("want host:port or :port")
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		return fmt.Errorf("port %q is out of range (0..65535)", port)
	}
	if host != "" && !validHost(host) {
		return fmt.Errorf("host %q is neither an IP address nor a DNS name", host)
	}
	return nil
}

// checkHostPattern accepts a route's host match: a host name (IDN in
// Unicode too), "*", or "*." and a name, optionally with ":port"; an IP
// literal (IPv6 in brackets). Anything with spaces, control characters or
// URL delimiters could never equal a request's Host.
func checkHostPattern(h string) error {
	if strings.TrimSpace(h) == "" {
		return errors.New("must not be empty")
	}
	for _, r := range h {
		switch {
		case unicode.IsSpace(r) || unicode.IsControl(r):
			return errors.New("contains a space or control character")
		case strings.ContainsRune(`/\?#@"<>{}|^%,;`+"`", r):
			return fmt.Errorf("contains %q, which no host name has", r)
		}
	}
	name, port := h, ""
	switch {
	case strings.HasPrefix(h, "["):
		end := strings.IndexByte(h, ']')
		if end < 0 {
			return errors.New("unclosed '['")
		}
		if _, err := netip.ParseAddr(h[1:end]); err != nil {
			return fmt.Errorf("%q is not an IPv6 address", h[1:end])
		}
		name, port = "", h[end+1:]
		if port != "" {
			if !strings.HasPrefix(port, ":") {
				return errors.New("want [address]:port")
			}
			port = port[1:]
		}
	case strings.Count(h, ":") == 1:
		name, port, _ = strings.Cut(h, ":")
	case strings.Count(h, ":") > 1:
		return errors.New("an IPv6 address must be in brackets")
	}
	if port != "" && port != "*" {
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			return fmt.Errorf("port %q is out of range (1..65535)", port)
		}
	}
	if name == "" || name == "*" {
		if name == "" && !strings.HasPrefix(h, "[") {
			return errors.New("no host name")
		}
		return nil
	}
	name = strings.TrimPrefix(name, "*.")
	for label := range strings.SplitSeq(strings.TrimSuffix(name, "."), ".") {
		if label == "" {
			return errors.New("empty label")
		}
		if strings.Contains(label, "*") {
			return errors.New(`a wildcard is only allowed as a leading "*."`)
		}
	}
	return nil
}

func validHost(h string) bool {
	if _, err := netip.ParseAddr(h); err == nil {
		return true
	}
	h = strings.TrimSuffix(h, ".")
	if h == "" || len(h) > 253 {
		return false
	}
	for label := range strings.SplitSeq(h, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for _, r := range label {
			if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
				return false
			}
		}
	}
	return true
}
