package config

import (
	"strings"
)

// Route policies YARP hands to ASP.NET middleware (SPEC §5). tether never
// serves a route more openly than YARP did: an AuthorizationPolicy or a
// CorsPolicy it cannot enforce is an error, not a warning. Route timeouts
// are implemented (package proxy).

// routePolicies checks one route's policies and rewrites the reserved
// names to their canonical spelling (ASP.NET reads them case-insensitively).
func (v *validator) routePolicies(path string, r *Route) {
	switch {
	case r.AuthorizationPolicy == "":
	case strings.EqualFold(r.AuthorizationPolicy, "Anonymous"):
		r.AuthorizationPolicy = "Anonymous"
	default:
		v.errorf(path+".AuthorizationPolicy", "%q: tether does not authenticate or authorize requests, and YARP would enforce this policy: "+
			"the route would be open behind tether. Authenticate in front of tether or in the backend, and remove the key or set it to \"Anonymous\"", r.AuthorizationPolicy)
	}
	switch {
	case r.CorsPolicy == "":
	case strings.EqualFold(r.CorsPolicy, "Disable"):
		r.CorsPolicy = "Disable"
	default:
		v.errorf(path+".CorsPolicy", "%q: tether does not implement CORS policies, and YARP would apply this one: "+
			"answer CORS in the backend, and remove the key or set it to \"Disable\"", r.CorsPolicy)
	}
	switch {
	case r.TimeoutPolicy == "":
	case strings.EqualFold(r.TimeoutPolicy, "Disable"):
		r.TimeoutPolicy = "Disable"
	default:
		v.errorf(path+".TimeoutPolicy", "%q: named timeout policies are defined in ASP.NET code; use Timeout (e.g. \"00:00:30\") or \"Disable\"", r.TimeoutPolicy)
	}
	if r.Timeout.Set {
		if r.TimeoutPolicy != "" {
			v.errorf(path+".Timeout", "not together with TimeoutPolicy %q (as in YARP)", r.TimeoutPolicy)
		}
		v.positive(path+".Timeout", r.Timeout)
	}
}
