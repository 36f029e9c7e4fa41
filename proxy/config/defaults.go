package config

import (
	"strconv"
	"time"
)

// applyDefaults fills in every default documented in types.go, so consumers
// read effective values. It runs only on a valid config.
func applyDefaults(c *Config) {
	l := &c.Limits
	setInt(&l.MaxRequestHeadersTotalSize, 32768)
	setDur(&l.RequestHeadersTimeout, 30*time.Second)
	setDur(&l.KeepAliveTimeout, 2*time.Minute+10*time.Second)
	setDur(&l.ShutdownTimeout, 30*time.Second)
	for _, r := range []*MinDataRate{&l.MinRequestBodyDataRate, &l.MinResponseDataRate} {
		if !r.Set {
			r.BytesPerSecond = DefaultMinDataRate
		}
		setDur(&r.GracePeriod, DefaultMinDataRateGrace)
	}

	for i := range c.Listeners {
		if r := c.Listeners[i].Redirect; r != nil {
			setInt(&r.StatusCode, 308)
			setBool(&r.IncludePath, true)
			setBool(&r.IncludeQueryString, true)
		}
	}
	for _, r := range c.ReverseProxy.Routes {
		if r.MaxRequestBodySize == 0 {
			r.MaxRequestBodySize = c.Limits.MaxRequestBodySize // Kestrel's server limit; 0: none
		}
		for i := range r.Match.Headers {
			setStr(&r.Match.Headers[i].Mode, "ExactHeader")
		}
		for i := range r.Match.QueryParameters {
			setStr(&r.Match.QueryParameters[i].Mode, "Exact")
		}
		// {"Enabled": false} only switches the cluster's affinity off; a full
		// block replaces it and gets the same defaults.
		if a := r.SessionAffinity; a != nil && a.Enabled {
			affinityDefaults(a)
		}
	}
	for _, cl := range c.ReverseProxy.Clusters {
		clusterDefaults(cl)
	}
	wafDefaults(c)
}

func clusterDefaults(c *Cluster) {
	setStr(&c.LoadBalancingPolicy, "PowerOfTwoChoices")
	affinityDefaults(&c.SessionAffinity)
	setDur(&c.DrainTimeout, 5*time.Minute)

	a := &c.HealthCheck.Active
	setDur(&a.Interval, 15*time.Second)
	setDur(&a.Timeout, 10*time.Second)
	setStr(&a.Policy, "ConsecutiveFailures")
	setStr(&a.Path, "/")
	setStr(&a.HealthyStatuses, "200-399")
	threshold := 3
	if k, ok := foldKey(c.Metadata, thresholdKey); ok {
		threshold, _ = strconv.Atoi(c.Metadata[k]) // validated already
	}
	setInt(&a.ConsecutiveFailures, threshold)
	setInt(&a.ConsecutiveSuccesses, 1)
	setInt(&a.ProbeFanout, 3)

	p := &c.HealthCheck.Passive
	setStr(&p.Policy, "TransportFailureRate")
	setDur(&p.ReactivationPeriod, 2*time.Minute)

	r := &c.HttpRequest
	if !r.ActivityTimeout.Set && r.Timeout.Set {
		r.ActivityTimeout = r.Timeout // Timeout is YARP's older name
	}
	setDur(&r.ActivityTimeout, 100*time.Second)
}

func affinityDefaults(a *SessionAffinity) {
	setStr(&a.Policy, "HashCookie")
	setStr(&a.FailurePolicy, "Redistribute")
	setInt(&a.FailureStatusCode, 503)
	setStr(&a.Cookie.Path, "/")
	setBool(&a.Cookie.HttpOnly, true)
	setStr(&a.Cookie.SameSite, "Unspecified")
	setStr(&a.Cookie.SecurePolicy, "SameAsRequest")
}

func setStr(p *string, v string) {
	if *p == "" {
		*p = v
	}
}

func setInt(p *int, v int) {
	if *p == 0 {
		*p = v
	}
}

// setDur fills in a duration the file left out; a given zero stays zero
// (validation has refused it where zero is meaningless).
func setDur(p *Duration, v time.Duration) {
	if !p.Set {
		p.Duration = v
	}
}

func setBool(p **bool, v bool) {
	if *p == nil {
		*p = &v
	}
}
