package config

import (
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
}

// unsupportedTransforms are YARP transforms tether accepts with a warning.
var unsupportedTransforms = []string{
	"X-Forwarded", "Forwarded", "ClientCert", "PathPattern", "QueryValueParameter",
	"QueryRouteParameter", "QueryRemoveParameter", "HttpMethodChange", "RequestHeaderRouteValue",
	"RequestHeadersAllowed", "ResponseHeadersAllowed", "ResponseTrailer", "ResponseTrailerRemove",
	"ResponseTrailersAllowed", "ResponseHeadersCopy", "ResponseTrailersCopy",
}

// UnsupportedTransform reports whether key identifies a YARP transform that
// Load accepts with a warning and tether does not implement, so compiling
// transforms skips it.
func UnsupportedTransform(key string) bool {
	return slices.ContainsFunc(unsupportedTransforms, func(s string) bool { return strings.EqualFold(s, key) })
}

var transformSpecs = []transformSpec{
	{name: "PathRemovePrefix"},
	{name: "PathPrefix"},
	{name: "PathSet"},
	{name: "RequestHeader", extra: []string{"Set", "Append"}, oneOf: []string{"Set", "Append"}},
	{name: "ResponseHeader", extra: []string{"Set", "Append", "When"}, oneOf: []string{"Set", "Append"}},
	{name: "RequestHeaderRemove"},
	{name: "ResponseHeaderRemove", extra: []string{"When"}},
	{name: "RequestHeaderOriginalHost", boolValue: true},
	{name: "RequestHeadersCopy", boolValue: true},
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
	} else if out[spec.name] == "" {
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
