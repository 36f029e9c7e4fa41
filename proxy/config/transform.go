package config

import (
	"fmt"
	"slices"
	"strings"
)

// transformSpec describes one YARP transform: its identifying key, the other
// keys it may carry, and what its values must be.
type transformSpec struct {
	name      string
	extra     []string // further keys allowed in the same entry
	oneOf     []string // exactly one of these extra keys is required
	boolValue bool     // the identifying key's value is true/false
	emptyOK   bool     // the identifying key's value may be empty
}

// unsupportedTransforms are YARP transforms tether would accept with a
// warning: none left, every transform of YARP's documentation is
// implemented. Kept so a future YARP transform can be listed here.
var unsupportedTransforms []string

// UnsupportedTransform reports whether key identifies a YARP transform that
// Load accepts with a warning and proxy/transform does not compile, so
// compiling transforms skips it.
func UnsupportedTransform(key string) bool {
	return slices.ContainsFunc(unsupportedTransforms, func(s string) bool { return strings.EqualFold(s, key) })
}

// forwardedTransforms are compiled by package proxy (they need the peer's
// trust and the connection's addresses), not by package transform.
var forwardedTransforms = []string{"X-Forwarded", "Forwarded"}

// ForwardedTransform reports whether key identifies the X-Forwarded or
// Forwarded transform, which package transform leaves to package proxy.
func ForwardedTransform(key string) bool {
	return slices.ContainsFunc(forwardedTransforms, func(s string) bool { return strings.EqualFold(s, key) })
}

var transformSpecs = []transformSpec{
	{name: "X-Forwarded", extra: []string{"HeaderPrefix", "For", "Proto", "Host", "Prefix"}},
	{name: "Forwarded", extra: []string{"Action", "ForFormat", "ByFormat"}},
	{name: "PathRemovePrefix"},
	{name: "PathPrefix"},
	{name: "PathSet"},
	{name: "RequestHeader", extra: []string{"Set", "Append"}, oneOf: []string{"Set", "Append"}},
	{name: "ResponseHeader", extra: []string{"Set", "Append", "When"}, oneOf: []string{"Set", "Append"}},
	{name: "RequestHeaderRemove"},
	{name: "ResponseHeaderRemove", extra: []string{"When"}},
	{name: "RequestHeaderOriginalHost", boolValue: true},
	{name: "RequestHeadersCopy", boolValue: true},
	{name: "PathPattern"},
	{name: "QueryValueParameter", extra: []string{"Set", "Append"}, oneOf: []string{"Set", "Append"}},
	{name: "QueryRouteParameter", extra: []string{"Set", "Append"}, oneOf: []string{"Set", "Append"}},
	{name: "QueryRemoveParameter"},
	{name: "HttpMethodChange", extra: []string{"Set"}, oneOf: []string{"Set"}},
	{name: "RequestHeaderRouteValue", extra: []string{"Set", "Append"}, oneOf: []string{"Set", "Append"}},
	{name: "RequestHeadersAllowed", emptyOK: true},
	{name: "ClientCert"},
	{name: "ResponseHeadersCopy", boolValue: true},
	{name: "ResponseHeadersAllowed", emptyOK: true},
	{name: "ResponseTrailer", extra: []string{"Set", "Append", "When"}, oneOf: []string{"Set", "Append"}},
	{name: "ResponseTrailerRemove", extra: []string{"When"}},
	{name: "ResponseTrailersCopy", boolValue: true},
	{name: "ResponseTrailersAllowed", emptyOK: true},
}

var responseWhen = []string{"Success", "Always", "Failure"}

// transform checks one transform entry and returns it with its keys in
// canonical spelling (YARP reads them case-insensitively), so the transform
// package can index it directly.
func (v *validator) transform(path string, t map[string]string) map[string]string {
	var spec *transformSpec
	var found []string // identifying keys present
	unsupported := ""
	for _, k := range sortedKeys(t) {
		if i := slices.IndexFunc(transformSpecs, func(s transformSpec) bool { return strings.EqualFold(s.name, k) }); i >= 0 {
			spec, found = &transformSpecs[i], append(found, k)
		} else if i := slices.IndexFunc(unsupportedTransforms, func(s string) bool { return strings.EqualFold(s, k) }); i >= 0 {
			unsupported, found = unsupportedTransforms[i], append(found, k)
		}
	}
	switch {
	case len(found) > 1:
		v.errorf(path, "more than one transform in one entry (%s)", strings.Join(found, ", "))
		return t
	case unsupported != "":
		v.warns = append(v.warns, path+"."+unsupported+": accepted but not implemented by tether")
		return t
	case spec == nil:
		if len(t) == 0 {
			v.errorf(path, "empty transform")
		}
		for _, k := range sortedKeys(t) {
			v.errorf(path+"."+k, "unknown transform")
		}
		return t
	}
	key := found[0]
	out := map[string]string{spec.name: t[key]}
	for _, k := range sortedKeys(t) {
		if k == key {
			continue
		}
		i := slices.IndexFunc(spec.extra, func(e string) bool { return strings.EqualFold(e, k) })
		if i < 0 {
			v.errorf(path+"."+k, "unknown key for transform %s", spec.name)
			continue
		}
		out[spec.extra[i]] = t[k]
	}
	if spec.boolValue {
		switch val := out[spec.name]; {
		case strings.EqualFold(val, "true"):
			out[spec.name] = "true"
		case strings.EqualFold(val, "false"):
			out[spec.name] = "false"
		default:
			v.errorf(path+"."+spec.name, "want true or false, got %q", val)
		}
	} else if out[spec.name] == "" && !spec.emptyOK {
		v.errorf(path+"."+spec.name, "value required")
	}
	if len(spec.oneOf) > 0 {
		n := 0
		for _, k := range spec.oneOf {
			if _, ok := out[k]; ok {
				n++
			}
		}
		if n != 1 {
			v.errorf(path, "transform %s needs exactly one of %s", spec.name, strings.Join(spec.oneOf, ", "))
		}
	}
	if when, ok := out["When"]; ok {
		v.enum(path+".When", &when, responseWhen)
		out["When"] = when
	}
	return out
}

// clientCertListeners warns about ClientCert transforms that no listener
// can feed: only a TLS listener with ClientCertificateMode AllowCertificate
// asks clients for a certificate. Runs once the listeners are built.
func (v *validator) clientCertListeners(c *Config) {
	for _, l := range c.Listeners {
		if l.ClientCertificateMode == "AllowCertificate" && (l.Certificate != nil || l.SelfSigned) {
			return
		}
	}
	for _, id := range sortedKeys(c.ReverseProxy.Routes) {
		r := c.ReverseProxy.Routes[id]
		if r == nil {
			continue
		}
		for i, t := range r.Transforms {
			if _, ok := t["ClientCert"]; ok {
				v.warns = append(v.warns, fmt.Sprintf("ReverseProxy.Routes.%s.Transforms[%d].ClientCert: no HTTPS listener asks clients for a certificate "+
					"(Kestrel ClientCertificateMode AllowCertificate), so this transform only removes the header", id, i))
			}
		}
	}
}
