package config

import (
	"fmt"
	"strings"
)

// secureCookiesOverHTTP warns about an affinity cookie with SecurePolicy
// Always on a route that plain HTTP listeners serve: clients never send a
// Secure cookie back over HTTP, so every request through them starts a new
// session (every request at all when no listener is HTTPS). Trusted
// proxies in front may terminate TLS for every client, which tether cannot
// tell: the warning then says so rather than stay silent.
func (v *validator) secureCookiesOverHTTP(c *Config) {
	var plain []string
	tls := false
	for i, l := range c.Listeners {
		if l.Redirect != nil {
			continue // answers with a redirect, never proxies
		}
		if l.Certificate != nil || l.SelfSigned || len(l.Sni) > 0 {
			tls = true
			continue
		}
		name := l.Source
		if name == "" {
			name = fmt.Sprintf("Listeners[%d]", i)
		}
		plain = append(plain, name+" "+l.Address)
	}
	if len(plain) == 0 {
		return
	}
	unless := ""
	if len(c.TrustedProxies) > 0 {
		unless = " (unless the trusted proxies in front terminate TLS for every client)"
	}
	for _, id := range sortedKeys(c.ReverseProxy.Routes) {
		r := c.ReverseProxy.Routes[id]
		a, at := r.SessionAffinity, "ReverseProxy.Routes."+id+".SessionAffinity"
		if a == nil {
			cl := c.ReverseProxy.Clusters[r.ClusterId]
			if cl == nil {
				continue
			}
			a, at = &cl.SessionAffinity, "ReverseProxy.Clusters."+r.ClusterId+".SessionAffinity"
		}
		if !a.Enabled || !strings.EqualFold(a.Cookie.SecurePolicy, "Always") || !cookiePolicy(a.Policy) {
			continue
		}
		if tls {
			v.warns = append(v.warns, fmt.Sprintf("%s.Cookie.SecurePolicy: Always, but route %s is also served by plain HTTP listeners (%s): "+
				"clients never send a Secure cookie back over HTTP, so each of their requests there starts a new session%s; "+
				"redirect those listeners to HTTPS or use SameAsRequest",
				at, id, strings.Join(plain, ", "), unless))
			continue
		}
		v.warns = append(v.warns, fmt.Sprintf("%s.Cookie.SecurePolicy: Always, but route %s is served only by plain HTTP listeners (%s): "+
			"clients never send a Secure cookie back over HTTP, so every request starts a new session%s; "+
			"use SameAsRequest or serve the route over HTTPS",
			at, id, strings.Join(plain, ", "), unless))
	}
}

// cookiePolicy reports whether an affinity policy keeps its key in a
// cookie (the default, HashCookie, does).
func cookiePolicy(p string) bool {
	for _, h := range []string{"CustomHeader", "EnvelopeHeader"} {
		if strings.EqualFold(p, h) {
			return false
		}
	}
	return true
}
