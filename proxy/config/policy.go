package config

import (
	"strings"
)

// Route policies YARP hands to ASP.NET middleware. tether never
// serves a route more openly than YARP did: an AuthorizationPolicy or a
// CorsPolicy it cannot enforce is an error, not a warning. Route timeouts
// are implemented (package proxy).

// routePolicies checks one route's policies and rewrites the reserved
// names to their canonical spelling (ASP.NET reads them case-insensitively).
func (v *validator) routePolicies(path string, r *Route) {
	v.onlyReserved(path+".AuthorizationPolicy", &r.AuthorizationPolicy, "Anonymous",
		"tether does not authenticate or authorize requests, and YARP would enforce this policy: "+
			"the route would be open behind tether. Authenticate in front of tether or in the backend, and remove the key or set it to \"Anonymous\"")
	v.onlyReserved(path+".CorsPolicy", &r.CorsPolicy, "Disable",
		"tether does not implement CORS policies, and YARP would apply this one: "+
			"answer CORS in the backend, and remove the key or set it to \"Disable\"")
	v.onlyReserved(path+".TimeoutPolicy", &r.TimeoutPolicy, "Disable",
		"named timeout policies are defined in ASP.NET code; use Timeout (e.g. \"00:00:30\") or \"Disable\"")
	if r.Timeout.Set {
		if r.TimeoutPolicy != "" {
			v.errorf(path+".Timeout", "not together with TimeoutPolicy %q (as in YARP)", r.TimeoutPolicy)
		}
		v.positive(path+".Timeout", r.Timeout)
	}
}

// onlyReserved accepts an empty value or the reserved name (in any case,
// rewritten to its spelling) and refuses any other value, saying why.
func (v *validator) onlyReserved(path string, val *string, reserved, why string) {
	switch {
	case *val == "":
	case strings.EqualFold(*val, reserved):
		*val = reserved
	default:
		v.errorf(path, "%q: "+why, *val)
	}
}
