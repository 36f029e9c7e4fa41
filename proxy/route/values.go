package route

import (
	"net/http"
	"strings"
)

// Values returns the route values t binds for r (ASP.NET's
// Request.RouteValues): each parameter's text as Match saw it, keyed by its
// lower-cased name (ASP.NET compares names case-insensitively). A parameter
// left out takes its default; an optional one left out, or an empty
// catch-all without a default, has no value. ok is false when t does not
// match r. The YARP transforms that read route values (PathPattern,
// QueryRouteParameter, RequestHeaderRouteValue) call it, so routes without
// them pay nothing.
func (t *Template) Values(r *http.Request) (vals map[string]string, ok bool) {
	return t.bind(requestPath(r))
}

// bind is Match that records values; it must accept exactly what Match
// accepts (FuzzValuesAgreeWithMatch).
func (t *Template) bind(path string) (map[string]string, bool) {
	vals := map[string]string{}
	full := strings.TrimPrefix(path, "/")
	rest, more := full, full != ""
	if more {
		rest = strings.TrimSuffix(rest, "/")
	}
	for i := range t.segs {
		s := &t.segs[i]
		if p := &s.parts[0]; p.catchAll {
			if !more {
				if !p.absent() {
					return nil, false
				}
				if p.hasDefault {
					setValue(vals, p.name, p.def)
				}
				return vals, true
			}
			v := full[len(full)-len(rest)-(len(path)-len(strings.TrimSuffix(path, "/"))):]
			if !p.check(v) {
				return nil, false
			}
			setValue(vals, p.name, v)
			return vals, true
		}
		if !more {
			if p := &s.parts[0]; len(s.parts) == 1 && p.param && (p.optional || p.hasDefault && p.check(p.def)) {
				if p.hasDefault {
					setValue(vals, p.name, p.def)
				}
				continue
			}
			return nil, false
		}
		var seg string
		if j := strings.IndexByte(rest, '/'); j >= 0 {
			seg, rest = rest[:j], rest[j+1:]
		} else {
			seg, rest, more = rest, "", false
		}
		if !s.bind(seg, vals) {
			return nil, false
		}
	}
	if more {
		return nil, false
	}
	return vals, true
}

func setValue(vals map[string]string, name, v string) {
	if name != "" { // the plain-prefix forms' catch-all has no name
		vals[strings.ToLower(name)] = v
	}
}

func (s *segment) bind(v string, vals map[string]string) bool {
	if len(s.parts) == 1 {
		p := &s.parts[0]
		if !p.param {
			return strings.EqualFold(p.literal, v)
		}
		if v == "" || !p.check(v) {
			return false
		}
		setValue(vals, p.name, v)
		return true
	}
	if bindComplex(s.parts, v, vals) {
		return true
	}
	n := len(s.parts)
	return s.parts[n-1].optional && !strings.HasSuffix(v, ".") && bindComplex(s.parts[:n-2], v, vals)
}

// bindComplex is matchComplex recording each parameter's text; vals is
// only written when the segment matches.
func bindComplex(parts []part, v string, vals map[string]string) bool {
	var buf [8]boundValue
	found := buf[:0]
	if !scanComplex(parts, v, &found) {
		return false
	}
	for _, f := range found {
		setValue(vals, f.name, f.v)
	}
	return true
}
