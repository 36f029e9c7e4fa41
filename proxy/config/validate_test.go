package config

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestValidationRules(t *testing.T) {
	const (
		route   = "ReverseProxy.Routes.r1"
		cluster = "ReverseProxy.Clusters.c1"
		sa      = cluster + ".SessionAffinity"
		active  = cluster + ".HealthCheck.Active"
		dest    = cluster + ".Destinations.d1"
	)
	enabled := func(extra obj) obj {
		m := obj{"Enabled": true, "AffinityKeyName": "k"}
		for k, v := range extra {
			m[k] = v
		}
		return m
	}
	cases := []struct {
		desc      string
		set       map[string]any
		path, msg string
	}{
		{"listener Address required", map[string]any{"Listeners": []any{obj{}}}, "Listeners[0].Address", "required"},
		{"listener Address is host:port", map[string]any{"Listeners": []any{obj{"Address": "8080"}}}, "Listeners[0].Address", "host:port"},
		{"listener port in range", map[string]any{"Listeners": []any{obj{"Address": ":70000"}}}, "Listeners[0].Address", "out of range"},
		{"Certificate needs Path", map[string]any{"Listeners": []any{obj{"Address": ":1", "Certificate": obj{"KeyPath": "k"}}}},
			"Listeners[0].Certificate.Path", "required"},
		{"Certificate without KeyPath is a PKCS#12 file, which must exist", map[string]any{"Listeners": []any{obj{"Address": ":1", "Certificate": obj{"Path": "c"}}}},
			"Listeners[0].Certificate.Path", "does not exist"},
		{"Certificate files must exist", map[string]any{"Listeners": []any{obj{"Address": ":1", "Certificate": obj{"Path": "/nonexistent/c.pem", "KeyPath": "k"}}}},
			"Listeners[0].Certificate.Path", "does not exist"},
		{"Redirect StatusCode is a redirect", map[string]any{"Listeners": []any{obj{"Address": ":1", "Redirect": obj{"StatusCode": 200}}}},
			"Listeners[0].Redirect.StatusCode", "200"},
		{"Redirect Scheme is http or https", map[string]any{"Listeners": []any{obj{"Address": ":1", "Redirect": obj{"Scheme": "ftp"}}}},
			"Listeners[0].Redirect.Scheme", "ftp"},
		{"TrustedProxies are IPs or CIDRs", map[string]any{"TrustedProxies": []any{"10.0.0.1", "10.0.0.0/8", "proxy.local"}},
			"TrustedProxies[2]", "proxy.local"},
		{"route ClusterId required", map[string]any{route + ".ClusterId": ""}, route + ".ClusterId", "required"},
		{"route ClusterId names a cluster", map[string]any{route + ".ClusterId": "nope"}, route + ".ClusterId", "no cluster"},
		{"route needs Path or Hosts", map[string]any{route + ".Match": obj{}}, route + ".Match", "Path or Hosts"},
		{"Methods are non-empty", map[string]any{route + ".Match.Methods": []any{"GET", " "}}, route + ".Match.Methods[1]", "empty"},
		{"header Mode is YARP's", map[string]any{route + ".Match.Headers": []any{obj{"Name": "h", "Values": []any{"v"}, "Mode": "Exact"}}},
			route + ".Match.Headers[0].Mode", "Exact"},
		{"header Name required", map[string]any{route + ".Match.Headers": []any{obj{"Values": []any{"v"}}}},
			route + ".Match.Headers[0].Name", "required"},
		{"header Values required unless existence", map[string]any{route + ".Match.Headers": []any{obj{"Name": "h", "Mode": "Contains"}}},
			route + ".Match.Headers[0].Values", "required"},
		{"query Mode is YARP's", map[string]any{route + ".Match.QueryParameters": []any{obj{"Name": "q", "Mode": "NotExists"}}},
			route + ".Match.QueryParameters[0].Mode", "NotExists"},
		{"query Values required unless Exists", map[string]any{route + ".Match.QueryParameters": []any{obj{"Name": "q"}}},
			route + ".Match.QueryParameters[0].Values", "required"},
		{"unknown transform", map[string]any{route + ".Transforms": []any{obj{"PathRemovePrefx": "/a"}}},
			route + ".Transforms[0].PathRemovePrefx", "unknown transform"},
		{"transform extra key unknown", map[string]any{route + ".Transforms": []any{obj{"PathSet": "/a", "Set": "x"}}},
			route + ".Transforms[0].Set", "unknown key for transform PathSet"},
		{"RequestHeader needs Set or Append", map[string]any{route + ".Transforms": []any{obj{"RequestHeader": "X"}}},
			route + ".Transforms[0]", "exactly one of Set, Append"},
		{"ResponseHeader When is known", map[string]any{route + ".Transforms": []any{obj{"ResponseHeader": "X", "Set": "1", "When": "Sometimes"}}},
			route + ".Transforms[0].When", "Sometimes"},
		{"RequestHeaderOriginalHost is a bool", map[string]any{route + ".Transforms": []any{obj{"RequestHeaderOriginalHost": "yes"}}},
			route + ".Transforms[0].RequestHeaderOriginalHost", "true or false"},
		{"two transforms in one entry", map[string]any{route + ".Transforms": []any{obj{"PathSet": "/a", "PathPrefix": "/b"}}},
			route + ".Transforms[0]", "more than one"},
		{"LoadBalancingPolicy is YARP's", map[string]any{cluster + ".LoadBalancingPolicy": "Fastest"}, cluster + ".LoadBalancingPolicy", "Fastest"},
		{"AffinityKeyName required when Enabled", map[string]any{sa: obj{"Enabled": true}}, sa + ".AffinityKeyName", "required when Enabled"},
		{"affinity Policy is known", map[string]any{sa: enabled(obj{"Policy": "Sticky"})}, sa + ".Policy", "Sticky"},
		{"affinity FailurePolicy is known", map[string]any{sa: enabled(obj{"FailurePolicy": "Retry"})}, sa + ".FailurePolicy", "Retry"},
		{"FailureStatusCode is an HTTP status", map[string]any{sa: enabled(obj{"FailureStatusCode": 600})}, sa + ".FailureStatusCode", "600"},
		{"FailureStatusCode is a final status, not 1xx", map[string]any{sa: enabled(obj{"FailureStatusCode": 150})}, sa + ".FailureStatusCode", "150"},
		{"cookie SameSite is known", map[string]any{sa: enabled(obj{"Cookie": obj{"SameSite": "Loose"}})}, sa + ".Cookie.SameSite", "Loose"},
		{"cookie SecurePolicy is known", map[string]any{sa: enabled(obj{"Cookie": obj{"SecurePolicy": "Never"}})}, sa + ".Cookie.SecurePolicy", "Never"},
		{"route affinity override is checked too", map[string]any{route + ".SessionAffinity": obj{"Enabled": true}},
			route + ".SessionAffinity.AffinityKeyName", "required when Enabled"},
		{"active Policy is ConsecutiveFailures", map[string]any{active + ".Policy": "Sometimes"}, active + ".Policy", "Sometimes"},
		{"HealthyStatuses parse", map[string]any{active + ".HealthyStatuses": "2xx"}, active + ".HealthyStatuses", "2xx"},
		{"thresholds at least 1", map[string]any{active + ".ConsecutiveSuccesses": -1}, active + ".ConsecutiveSuccesses", "at least 1"},
		{"metadata threshold is a number", map[string]any{cluster + ".Metadata": obj{"ConsecutiveFailuresHealthPolicy.Threshold": "x"}},
			cluster + ".Metadata.ConsecutiveFailuresHealthPolicy.Threshold", "at least 1"},
		{"passive Policy is TransportFailureRate", map[string]any{cluster + ".HealthCheck.Passive.Policy": "Errors"},
			cluster + ".HealthCheck.Passive.Policy", "Errors"},
		{"a cluster needs a destination", map[string]any{cluster + ".Destinations": obj{}}, cluster + ".Destinations", "at least one"},
		{"destination Address required", map[string]any{dest: obj{}}, dest + ".Address", "required"},
		{"destination Address is absolute http(s)", map[string]any{dest + ".Address": "10.0.0.1:8080"}, dest + ".Address", "http"},
		{"destination host is IP or DNS name", map[string]any{dest + ".Address": "http://bad_host!/"}, dest + ".Address", "neither an IP address nor a DNS name"},
		{"destination Health is a URL too", map[string]any{dest + ".Health": "ftp://h/"}, dest + ".Health", "http"},
		{"explicit zero Active.Interval is refused", map[string]any{active + ".Interval": "00:00:00"}, active + ".Interval", "must be greater than zero"},
		{"explicit zero Active.Timeout is refused", map[string]any{active + ".Timeout": "0s"}, active + ".Timeout", "must be greater than zero"},
		{"explicit zero Passive.ReactivationPeriod is refused", map[string]any{cluster + ".HealthCheck.Passive.ReactivationPeriod": "0"},
			cluster + ".HealthCheck.Passive.ReactivationPeriod", "must be greater than zero"},
		{"explicit zero HttpRequest.ActivityTimeout is refused", map[string]any{cluster + ".HttpRequest.ActivityTimeout": "00:00:00"},
			cluster + ".HttpRequest.ActivityTimeout", "must be greater than zero"},
		{"explicit zero HttpRequest.Timeout is refused", map[string]any{cluster + ".HttpRequest.Timeout": "0ms"},
			cluster + ".HttpRequest.Timeout", "must be greater than zero"},
		{"explicit zero Limits.RequestHeadersTimeout is refused", map[string]any{"Limits.RequestHeadersTimeout": "0s"},
			"Limits.RequestHeadersTimeout", "must be greater than zero"},
		{"a host with a space is refused", map[string]any{route + ".Match.Hosts": []any{"example.com", "www.example .com"}},
			route + ".Match.Hosts[1]", "space"},
		{"a host with a leading space is refused", map[string]any{route + ".Match.Hosts": []any{" example.com"}},
			route + ".Match.Hosts[0]", "space"},
		{"a host with a URL delimiter is refused", map[string]any{route + ".Match.Hosts": []any{"example.com/api"}},
			route + ".Match.Hosts[0]", "no host name has"},
		{"a host port is in range", map[string]any{route + ".Match.Hosts": []any{"example.com:70000"}},
			route + ".Match.Hosts[0]", "out of range"},
		{"a wildcard is only leading", map[string]any{route + ".Match.Hosts": []any{"api.*.example.com"}},
			route + ".Match.Hosts[0]", "wildcard"},
		{"a method is a token", map[string]any{route + ".Match.Methods": []any{"GET", "GE T"}},
			route + ".Match.Methods[1]", "not an HTTP method"},
		{"a method has no separators", map[string]any{route + ".Match.Methods": []any{"GET,POST"}},
			route + ".Match.Methods[0]", "not an HTTP method"},
		{"health Path starts with a slash", map[string]any{active + ".Path": "healthz"}, active + ".Path", "must start with '/'"},
		{"explicit zero Limits.KeepAliveTimeout is refused", map[string]any{"Limits.KeepAliveTimeout": "00:00"},
			"Limits.KeepAliveTimeout", "must be greater than zero"},
	}
	for _, tc := range cases {
		t.Run(tc.desc, func(t *testing.T) {
			cfg := baseConfig()
			for p, v := range tc.set {
				set(cfg, p, v)
			}
			c, _, err := Parse(mustJSON(t, cfg), "json")
			if c != nil {
				t.Error("config returned with an error")
			}
			wantFieldError(t, err, tc.path, tc.msg)
		})
	}
}

func TestValidCertificateLoads(t *testing.T) {
	dir := t.TempDir()
	cert, key := filepath.Join(dir, "c.pem"), filepath.Join(dir, "k.pem")
	for _, f := range []string{cert, key} {
		if err := os.WriteFile(f, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	cfg := baseConfig()
	set(cfg, "Listeners", []any{obj{"Address": "127.0.0.1:0", "Certificate": obj{"Path": cert, "KeyPath": key}}})
	if _, _, err := Parse(mustJSON(t, cfg), "json"); err != nil {
		t.Fatal(err)
	}
}

func TestDefaults(t *testing.T) {
	cfg := baseConfig()
	set(cfg, "Listeners", []any{obj{"Address": ":80", "Redirect": obj{"Scheme": "HTTPS"}}})
	set(cfg, "ReverseProxy.Routes.r1.SessionAffinity", obj{"Enabled": true, "AffinityKeyName": "r"})
	set(cfg, "ReverseProxy.Routes.r1.Match.Headers", []any{obj{"Name": "h", "Values": []any{"v"}}})
	set(cfg, "ReverseProxy.Routes.r1.Match.QueryParameters", []any{obj{"Name": "q", "Values": []any{"v"}}})
	set(cfg, "ReverseProxy.Routes.r2", obj{"ClusterId": "c2", "Match": obj{"Path": "/2"}, "SessionAffinity": obj{"Enabled": false}})
	set(cfg, "ReverseProxy.Clusters.c2", obj{
		"Metadata":     obj{"ConsecutiveFailuresHealthPolicy.Threshold": "7"},
		"HttpRequest":  obj{"Timeout": "00:00:20"},
		"Destinations": obj{"d": obj{"Address": "http://b.example"}},
	})
	c, _, err := Parse(mustJSON(t, cfg), "json")
	if err != nil {
		t.Fatal(err)
	}
	c1, c2 := c.ReverseProxy.Clusters["c1"], c.ReverseProxy.Clusters["c2"]
	r1, r2 := c.ReverseProxy.Routes["r1"], c.ReverseProxy.Routes["r2"]
	red := c.Listeners[0].Redirect
	cases := []struct {
		desc      string
		got, want any
	}{
		{"Limits.MaxRequestHeadersTotalSize", c.Limits.MaxRequestHeadersTotalSize, 32768},
		{"Limits.RequestHeadersTimeout", c.Limits.RequestHeadersTimeout.Duration, 30 * time.Second},
		{"Limits.KeepAliveTimeout", c.Limits.KeepAliveTimeout.Duration, 130 * time.Second},
		{"Limits.ShutdownTimeout", c.Limits.ShutdownTimeout.Duration, 30 * time.Second},
		{"Redirect.StatusCode", red.StatusCode, 308},
		{"Redirect.Scheme normalised", red.Scheme, "https"},
		{"Redirect.IncludePath", *red.IncludePath, true},
		{"Redirect.IncludeQueryString", *red.IncludeQueryString, true},
		{"LoadBalancingPolicy", c1.LoadBalancingPolicy, "PowerOfTwoChoices"},
		{"SessionAffinity.Policy", c1.SessionAffinity.Policy, "HashCookie"},
		{"SessionAffinity.FailurePolicy", c1.SessionAffinity.FailurePolicy, "Redistribute"},
		{"SessionAffinity.FailureStatusCode", c1.SessionAffinity.FailureStatusCode, 503},
		{"Cookie.Path", c1.SessionAffinity.Cookie.Path, "/"},
		{"Cookie.HttpOnly", *c1.SessionAffinity.Cookie.HttpOnly, true},
		{"Cookie.SameSite", c1.SessionAffinity.Cookie.SameSite, "Unspecified"},
		{"Cookie.SecurePolicy", c1.SessionAffinity.Cookie.SecurePolicy, "SameAsRequest"},
		{"Active.Interval", c1.HealthCheck.Active.Interval.Duration, 15 * time.Second},
		{"Active.Timeout", c1.HealthCheck.Active.Timeout.Duration, 10 * time.Second},
		{"Active.Policy", c1.HealthCheck.Active.Policy, "ConsecutiveFailures"},
		{"Active.Path", c1.HealthCheck.Active.Path, "/"},
		{"Active.HealthyStatuses", c1.HealthCheck.Active.HealthyStatuses, "200-399"},
		{"Active.ConsecutiveFailures", c1.HealthCheck.Active.ConsecutiveFailures, 3},
		{"Active.ConsecutiveFailures from metadata", c2.HealthCheck.Active.ConsecutiveFailures, 7},
		{"Active.ConsecutiveSuccesses", c1.HealthCheck.Active.ConsecutiveSuccesses, 1},
		{"Active.ProbeFanout", c1.HealthCheck.Active.ProbeFanout, 3},
		{"Passive.Policy", c1.HealthCheck.Passive.Policy, "TransportFailureRate"},
		{"Passive.ReactivationPeriod", c1.HealthCheck.Passive.ReactivationPeriod.Duration, 2 * time.Minute},
		{"HttpRequest.ActivityTimeout", c1.HttpRequest.ActivityTimeout.Duration, 100 * time.Second},
		{"HttpRequest.Timeout copied to ActivityTimeout", c2.HttpRequest.ActivityTimeout.Duration, 20 * time.Second},
		{"DrainTimeout", c1.DrainTimeout.Duration, 5 * time.Minute},
		{"header Mode", r1.Match.Headers[0].Mode, "ExactHeader"},
		{"query Mode", r1.Match.QueryParameters[0].Mode, "Exact"},
		{"route affinity override block gets defaults", r1.SessionAffinity.Policy, "HashCookie"},
		{"route affinity override cookie defaults", *r1.SessionAffinity.Cookie.HttpOnly, true},
		{"route affinity disable stays bare", r2.SessionAffinity.Policy, ""},
	}
	for _, tc := range cases {
		if tc.got != tc.want {
			t.Errorf("%s: got %v, want %v", tc.desc, tc.got, tc.want)
		}
	}
}

func TestHostPatternsAccepted(t *testing.T) {
	for _, h := range []string{"example.com", "EXAMPLE.com.", "*.example.com", "*", "*:8080", "example.com:443",
		"bücher.example", "10.0.0.1", "10.0.0.1:80", "[::1]", "[::1]:8443", "under_score.example"} {
		if err := checkHostPattern(h); err != nil {
			t.Errorf("%q refused: %v", h, err)
		}
	}
}

// TestChecksJoinParseErrors: a registered check runs even when the config
// has other errors; its errors join Parse's, once per path.
func TestChecksJoinParseErrors(t *testing.T) {
	checksMu.Lock()
	saved := checks
	checks = nil
	checksMu.Unlock()
	t.Cleanup(func() {
		checksMu.Lock()
		checks = saved
		checksMu.Unlock()
	})
	AddCheck(func(c *Config) Errors {
		return Errors{
			{Path: "ReverseProxy.Routes.r1.Match.Path", Message: "from the check"},
			{Path: "ReverseProxy.Clusters.c1.Destinations.d1.Address", Message: "reported twice"},
		}
	})
	AddCheck(func(c *Config) Errors { panic("boom") })
	cfg := baseConfig()
	set(cfg, "ReverseProxy.Clusters.c1.Destinations.d1.Address", "not a url")
	_, _, err := Parse(mustJSON(t, cfg), "json")
	es, _ := err.(Errors)
	count := map[string]int{}
	for _, e := range es {
		count[e.Path]++
	}
	if count["ReverseProxy.Routes.r1.Match.Path"] != 1 || count["ReverseProxy.Clusters.c1.Destinations.d1.Address"] != 1 || count["$"] != 1 {
		t.Fatalf("errors %v", es)
	}
}
