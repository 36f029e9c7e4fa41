package transform

import (
	"fmt"
	"net/textproto"
	"net/url"
	"sort"
	"strconv"
	"strings"

	"golang.org/x/net/http/httpguts"

	"github.com/tether-proxy/tether/proxy/config"
	"github.com/tether-proxy/tether/proxy/route"
)

// Transform keys, lower-cased for case-insensitive lookup.
const (
	kPathRemovePrefix     = "pathremoveprefix"
	kPathPrefix           = "pathprefix"
	kPathSet              = "pathset"
	kPathPattern          = "pathpattern"
	kQueryValue           = "queryvalueparameter"
	kQueryRoute           = "queryrouteparameter"
	kQueryRemove          = "queryremoveparameter"
	kMethodChange         = "httpmethodchange"
	kRequestHeader        = "requestheader"
	kRequestHeaderRoute   = "requestheaderroutevalue"
	kRequestHeaderRemove  = "requestheaderremove"
	kRequestAllowed       = "requestheadersallowed"
	kOriginalHost         = "requestheaderoriginalhost"
	kHeadersCopy          = "requestheaderscopy"
	kClientCert           = "clientcert"
	kResponseHeader       = "responseheader"
	kResponseRemove       = "responseheaderremove"
	kResponseAllowed      = "responseheadersallowed"
	kResponseCopy         = "responseheaderscopy"
	kResponseTrailer      = "responsetrailer"
	kResponseTrailRemove  = "responsetrailerremove"
	kResponseTrailAllowed = "responsetrailersallowed"
	kResponseTrailCopy    = "responsetrailerscopy"
	kSet                  = "set"
	kAppend               = "append"
	kWhen                 = "when"
)

// primaries maps each transform's identifying key to the other keys its
// dictionary may carry.
var primaries = map[string][]string{
	kPathRemovePrefix:     nil,
	kPathPrefix:           nil,
	kPathSet:              nil,
	kPathPattern:          nil,
	kQueryValue:           {kSet, kAppend},
	kQueryRoute:           {kSet, kAppend},
	kQueryRemove:          nil,
	kMethodChange:         {kSet},
	kRequestHeader:        {kSet, kAppend},
	kRequestHeaderRoute:   {kSet, kAppend},
	kRequestHeaderRemove:  nil,
	kRequestAllowed:       nil,
	kOriginalHost:         nil,
	kHeadersCopy:          nil,
	kClientCert:           nil,
	kResponseHeader:       {kSet, kAppend, kWhen},
	kResponseRemove:       {kWhen},
	kResponseAllowed:      nil,
	kResponseCopy:         nil,
	kResponseTrailer:      {kSet, kAppend, kWhen},
	kResponseTrailRemove:  {kWhen},
	kResponseTrailAllowed: nil,
	kResponseTrailCopy:    nil,
}

// Compile checks and compiles a route's transform dictionaries. path is the
// JSON path of the list ("ReverseProxy.Routes.r1.Transforms"); each error
// names its dictionary as path[i]. Route values (PathPattern,
// QueryRouteParameter, RequestHeaderRouteValue) are empty: use
// CompileRoute for a route.
func Compile(path string, dicts []map[string]string) (*Transforms, config.Errors) {
	return compile(path, dicts, nil)
}

// CompileRoute is Compile for a route whose Match.Path is matchPath: the
// transforms that read route values take them from that template.
func CompileRoute(path string, dicts []map[string]string, matchPath string) (*Transforms, config.Errors) {
	tmpl, err := route.ParseTemplate(matchPath)
	if err != nil {
		tmpl = nil // the route table reports it
	}
	return compile(path, dicts, tmpl)
}

func compile(path string, dicts []map[string]string, tmpl *route.Template) (*Transforms, config.Errors) {
	t := &Transforms{tmpl: tmpl}
	var errs config.Errors
	for i, d := range dicts {
		p := path + "[" + strconv.Itoa(i) + "]"
		if err := t.add(d); err != "" {
			errs = append(errs, config.FieldError{Path: p, Message: err})
		}
	}
	if len(errs) > 0 {
		return nil, errs
	}
	return t, nil
}

// add compiles one dictionary; it returns a message on error.
func (t *Transforms) add(d map[string]string) string {
	lower := make(map[string]string, len(d))
	var keys []string
	for k, v := range d {
		lk := strings.ToLower(k)
		if _, dup := lower[lk]; dup {
			return fmt.Sprintf("key %q given twice", k)
		}
		lower[lk] = v
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var found []string
	for _, k := range keys {
		lk := strings.ToLower(k)
		if _, ok := primaries[lk]; ok || config.ForwardedTransform(k) {
			found = append(found, k)
		}
	}
	switch {
	case len(found) > 1:
		return fmt.Sprintf("one transform per dictionary, found %s", strings.Join(found, ", "))
	case len(found) == 0 && len(keys) == 0:
		return "empty transform"
	case len(found) == 0:
		return fmt.Sprintf("unknown transform (keys: %s)", strings.Join(keys, ", "))
	}
	primary := strings.ToLower(found[0])
	if config.ForwardedTransform(primary) {
		return "" // compiled by package proxy
	}
	allowed := primaries[primary]
	for _, k := range keys {
		lk := strings.ToLower(k)
		if lk == primary {
			continue
		}
		ok := false
		for _, a := range allowed {
			ok = ok || a == lk
		}
		if !ok {
			return fmt.Sprintf("unexpected key %q for this transform", k)
		}
	}
	val := lower[primary]
	switch primary {
	case kPathRemovePrefix, kPathPrefix, kPathSet:
		if !strings.HasPrefix(val, "/") {
			return fmt.Sprintf("path %q must start with '/'", val)
		}
		k := map[string]kind{kPathRemovePrefix: pathRemovePrefix, kPathPrefix: pathPrefix, kPathSet: pathSet}[primary]
		t.req = append(t.req, op{kind: k, value: val, escaped: (&url.URL{Path: val}).EscapedPath()})
	case kPathPattern:
		p, err := compilePattern(val)
		if err != nil {
			return fmt.Sprintf("PathPattern %q: %v", val, err)
		}
		t.req = append(t.req, op{kind: pathPattern, value: val, pattern: p})
		t.needValues = true
	case kOriginalHost, kHeadersCopy, kResponseCopy, kResponseTrailCopy:
		b, err := strconv.ParseBool(strings.TrimSpace(val))
		if err != nil {
			return fmt.Sprintf("%q is not true or false", val)
		}
		switch primary {
		case kOriginalHost:
			t.originalHost = b
		case kHeadersCopy:
			t.noCopy = !b
		case kResponseCopy:
			t.noRespCopy = !b
		default:
			t.noTrailCopy = !b
		}
	case kQueryValue, kQueryRoute:
		if val == "" {
			return "query parameter name required"
		}
		v, app, msg := setOrAppend(lower)
		if msg != "" {
			return msg
		}
		o := op{kind: querySet, key: val, value: v}
		if primary == kQueryRoute {
			if v == "" {
				return "route value name required"
			}
			o.kind, o.value, o.routeKey = querySetRoute, "", strings.ToLower(v)
			t.needValues = true
		}
		if app {
			o.kind++ // querySet -> queryAppend, querySetRoute -> queryAppendRoute
		}
		t.req = append(t.req, o)
	case kQueryRemove:
		if val == "" {
			return "query parameter name required"
		}
		t.req = append(t.req, op{kind: queryRemove, key: val})
	case kMethodChange:
		to := lower[kSet]
		if _, ok := lower[kSet]; !ok {
			return "Set (the new method) is required"
		}
		for _, m := range []string{val, to} {
			if !httpguts.ValidHeaderFieldName(m) { // a method is a token
				return fmt.Sprintf("%q is not a valid HTTP method", m)
			}
		}
		t.req = append(t.req, op{kind: methodChange, key: val, value: canonicalMethod(to)})
	case kRequestHeaderRoute:
		name, msg := headerName(val)
		if msg != "" {
			return msg
		}
		v, app, msg := setOrAppend(lower)
		if msg != "" {
			return msg
		}
		if v == "" {
			return "route value name required"
		}
		o := op{kind: headerSetRoute, key: name, routeKey: strings.ToLower(v)}
		if app {
			o.kind = headerAppendRoute
		}
		t.req = append(t.req, o)
		t.needValues = true
	case kRequestAllowed, kResponseAllowed, kResponseTrailAllowed:
		set := map[string]bool{}
		for _, n := range strings.Split(val, ";") {
			if n = strings.TrimSpace(n); n == "" {
				continue
			}
			name, msg := headerName(n)
			if msg != "" {
				return msg
			}
			set[name] = true
		}
		o := op{kind: headersAllowed, allowed: set, when: Always}
		switch primary {
		case kRequestAllowed:
			t.noCopy = true
			t.req = append(t.req, o)
		case kResponseAllowed:
			t.noRespCopy = true
			t.resp = append(t.resp, o)
		default:
			t.noTrailCopy = true
			t.trailers = append(t.trailers, o)
		}
	case kClientCert:
		name, msg := headerName(val)
		if msg != "" {
			return msg
		}
		if name == "Host" {
			return "Host cannot carry the client certificate"
		}
		t.req = append(t.req, op{kind: clientCert, key: name})
	case kRequestHeaderRemove, kResponseRemove, kResponseTrailRemove:
		name, msg := headerName(val)
		if msg != "" {
			return msg
		}
		return t.addHeaderOp(op{kind: headerRemove, key: name}, primary == kRequestHeaderRemove, primary == kResponseTrailRemove, lower)
	case kRequestHeader, kResponseHeader, kResponseTrailer:
		name, msg := headerName(val)
		if msg != "" {
			return msg
		}
		v, app, msg := setOrAppend(lower)
		if msg != "" {
			return msg
		}
		o := op{kind: headerSet, key: name, value: v}
		if app {
			o.kind = headerAppend
		}
		if !httpguts.ValidHeaderFieldValue(o.value) {
			return fmt.Sprintf("header %s: invalid value", name)
		}
		o.vals = []string{o.value}[:1:1]
		if primary != kRequestHeader && o.key == "Host" {
			return "Host is not a response header"
		}
		return t.addHeaderOp(o, primary == kRequestHeader, primary == kResponseTrailer, lower)
	}
	return ""
}

// addHeaderOp puts a header op on the request, or, with its When, on the
// response or the trailers.
func (t *Transforms) addHeaderOp(o op, onRequest, onTrailers bool, lower map[string]string) string {
	if onRequest {
		t.req = append(t.req, o)
		return ""
	}
	var msg string
	if o.when, msg = when(lower); msg != "" {
		return msg
	}
	if onTrailers {
		t.trailers = append(t.trailers, o)
	} else {
		t.resp = append(t.resp, o)
	}
	return ""
}

// setOrAppend returns the Set or Append value of a dictionary that must
// carry exactly one of them.
func setOrAppend(lower map[string]string) (v string, isAppend bool, msg string) {
	set, hasSet := lower[kSet]
	app, hasAppend := lower[kAppend]
	if hasSet == hasAppend {
		return "", false, "exactly one of Set or Append is required"
	}
	if hasAppend {
		return app, true, ""
	}
	return set, false, ""
}

// canonicalMethod upper-cases the standard methods, as .NET's HttpMethod
// does; others are sent as written.
func canonicalMethod(m string) string {
	for _, s := range [...]string{"GET", "POST", "PUT", "DELETE", "OPTIONS", "HEAD", "PATCH", "TRACE"} {
		if strings.EqualFold(m, s) {
			return s
		}
	}
	return m
}

func headerName(v string) (string, string) {
	if !httpguts.ValidHeaderFieldName(v) {
		return "", fmt.Sprintf("%q is not a valid header name", v)
	}
	return textproto.CanonicalMIMEHeaderKey(v), ""
}

func when(lower map[string]string) (When, string) {
	v, ok := lower[kWhen]
	switch {
	case !ok, strings.EqualFold(v, "Success"):
		return Success, ""
	case strings.EqualFold(v, "Always"):
		return Always, ""
	case strings.EqualFold(v, "Failure"):
		return Failure, ""
	}
	return 0, fmt.Sprintf("When %q is not Success, Always or Failure", v)
}
