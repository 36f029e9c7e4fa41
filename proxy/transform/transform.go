package transform

import (
	"fmt"
	"net/http"
	"net/textproto"
	"net/url"
	"sort"
	"strconv"
	"strings"

	"github.com/tether-proxy/tether/proxy/config"

	"golang.org/x/net/http/httpguts"
)

// When says which backend responses a response transform applies to
// (YARP's ResponseCondition).
type When uint8

const (
	// Success: status below 400 (YARP's default).
	Success When = iota
	// Always: every response.
	Always
	// Failure: status 400 and above.
	Failure
)

func (w When) matches(status int) bool {
	switch w {
	case Always:
		return true
	case Failure:
		return status >= 400
	default:
		return status < 400
	}
}

type kind uint8

const (
	pathRemovePrefix kind = iota
	pathPrefix
	pathSet
	headerSet
	headerAppend
	headerRemove
)

// op is one compiled step. key is the canonical header name; vals is a
// one-element slice with cap 1, shared by every request, so a later append
// by anyone copies instead of writing into it.
type op struct {
	kind  kind
	key   string
	value string
	vals  []string
	// escaped is value in URL-escaped form, for requests carrying RawPath.
	escaped string
	when    When
}

// Transforms is the compiled transform list of one route. The zero value
// and nil are valid and change nothing except the defaults noted on the
// methods. Safe for concurrent use; immutable after Compile.
type Transforms struct {
	req          []op
	resp         []op
	originalHost bool
	noCopy       bool
}

// OriginalHost reports whether the client's Host header is sent to the
// backend (RequestHeaderOriginalHost=true). Default false: the
// destination's host.
func (t *Transforms) OriginalHost() bool { return t != nil && t.originalHost }

// CopyRequestHeaders reports whether the client's request headers are
// copied to the outgoing request (RequestHeadersCopy). Default true.
func (t *Transforms) CopyRequestHeaders() bool { return t == nil || !t.noCopy }

// HasResponse reports whether any response transform is configured.
func (t *Transforms) HasResponse() bool { return t != nil && len(t.resp) > 0 }

// ApplyRequest runs the path and request header transforms, in their
// configured order, on the outgoing request. Paths are transformed before
// the destination's base path is joined, as YARP does.
func (t *Transforms) ApplyRequest(out *http.Request) {
	if t == nil {
		return
	}
	for i := range t.req {
		o := &t.req[i]
		switch o.kind {
		case pathRemovePrefix, pathPrefix, pathSet:
			applyPath(o, out.URL)
		case headerSet:
			if o.key == "Host" {
				out.Host = o.value
				continue
			}
			if o.value == "" {
				delete(out.Header, o.key)
				continue
			}
			out.Header[o.key] = o.vals
		case headerAppend:
			if o.key == "Host" {
				out.Host = o.value
				continue
			}
			out.Header[o.key] = append(out.Header[o.key], o.value)
		case headerRemove:
			delete(out.Header, o.key)
		}
	}
}

// ApplyResponse runs the response header transforms whose When matches
// status on the backend response headers h.
func (t *Transforms) ApplyResponse(h http.Header, status int) {
	if t == nil {
		return
	}
	for i := range t.resp {
		o := &t.resp[i]
		if !o.when.matches(status) {
			continue
		}
		switch o.kind {
		case headerSet:
			if o.value == "" {
				delete(h, o.key)
				continue
			}
			h[o.key] = o.vals
		case headerAppend:
			h[o.key] = append(h[o.key], o.value)
		case headerRemove:
			delete(h, o.key)
		}
	}
}

func applyPath(o *op, u *url.URL) {
	raw := u.RawPath
	switch o.kind {
	case pathRemovePrefix:
		rest, ok := cutSegments(u.Path, o.value)
		if !ok {
			return
		}
		if raw != "" {
			// Cut the escaped path too, segment by segment, so what the
			// client encoded stays encoded: dropping RawPath would turn an
			// encoded "..%2F" into a real "../" on the wire.
			r, ok := cutEscapedSegments(raw, o.value)
			if !ok {
				return // the prefix spans an encoded slash: leave the path alone
			}
			u.RawPath = r
		}
		u.Path = rest
	case pathPrefix:
		u.Path = o.value + u.Path
		if raw != "" {
			u.RawPath = o.escaped + raw
		}
	case pathSet:
		u.Path = o.value
		u.RawPath = ""
		return
	}
	// RawPath is only a hint; drop it if it no longer encodes Path.
	if u.RawPath != "" {
		if p, err := url.PathUnescape(u.RawPath); err != nil || p != u.Path {
			u.RawPath = ""
		}
	}
}

// cutEscapedSegments cuts the segments of prefix (decoded) from the front
// of the escaped path raw, comparing each decoded segment
// case-insensitively. A segment holding an encoded slash never matches: it
// is one segment on the wire.
func cutEscapedSegments(raw, prefix string) (string, bool) {
	prefix = strings.TrimSuffix(prefix, "/")
	if prefix == "" {
		return raw, true
	}
	rest := raw
	for _, want := range strings.Split(prefix[1:], "/") {
		if !strings.HasPrefix(rest, "/") {
			return "", false
		}
		seg := rest[1:]
		if i := strings.IndexByte(seg, '/'); i >= 0 {
			seg = seg[:i]
		}
		got, err := url.PathUnescape(seg)
		if err != nil || strings.Contains(got, "/") || !strings.EqualFold(got, want) {
			return "", false
		}
		rest = rest[1+len(seg):]
	}
	return rest, true
}

// cutSegments is ASP.NET's PathString.StartsWithSegments (case-insensitive):
// path equals prefix, or continues with '/' right after it.
func cutSegments(path, prefix string) (string, bool) {
	if len(path) < len(prefix) || !strings.EqualFold(path[:len(prefix)], prefix) {
		return "", false
	}
	rest := path[len(prefix):]
	if rest != "" && rest[0] != '/' {
		return "", false
	}
	return rest, true
}

// Transform keys, lower-cased for case-insensitive lookup.
const (
	kPathRemovePrefix    = "pathremoveprefix"
	kPathPrefix          = "pathprefix"
	kPathSet             = "pathset"
	kRequestHeader       = "requestheader"
	kRequestHeaderRemove = "requestheaderremove"
	kOriginalHost        = "requestheaderoriginalhost"
	kHeadersCopy         = "requestheaderscopy"
	kResponseHeader      = "responseheader"
	kResponseRemove      = "responseheaderremove"
	kSet                 = "set"
	kAppend              = "append"
	kWhen                = "when"
)

// primaries maps each transform's identifying key to the other keys its
// dictionary may carry.
var primaries = map[string][]string{
	kPathRemovePrefix:    nil,
	kPathPrefix:          nil,
	kPathSet:             nil,
	kRequestHeader:       {kSet, kAppend},
	kRequestHeaderRemove: nil,
	kOriginalHost:        nil,
	kHeadersCopy:         nil,
	kResponseHeader:      {kSet, kAppend, kWhen},
	kResponseRemove:      {kWhen},
}

// Compile checks and compiles a route's transform dictionaries. path is the
// JSON path of the list ("ReverseProxy.Routes.r1.Transforms"); each error
// names its dictionary as path[i].
func Compile(path string, dicts []map[string]string) (*Transforms, config.Errors) {
	t := &Transforms{}
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
		if _, ok := primaries[lk]; ok || config.UnsupportedTransform(k) {
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
	if config.UnsupportedTransform(primary) {
		return "" // accepted with a warning by config.Load, not implemented
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
	case kOriginalHost, kHeadersCopy:
		b, err := strconv.ParseBool(strings.TrimSpace(val))
		if err != nil {
			return fmt.Sprintf("%q is not true or false", val)
		}
		if primary == kOriginalHost {
			t.originalHost = b
		} else {
			t.noCopy = !b
		}
	case kRequestHeaderRemove, kResponseRemove:
		name, msg := headerName(val)
		if msg != "" {
			return msg
		}
		o := op{kind: headerRemove, key: name}
		if primary == kRequestHeaderRemove {
			t.req = append(t.req, o)
			return ""
		}
		if o.when, msg = when(lower); msg != "" {
			return msg
		}
		t.resp = append(t.resp, o)
	case kRequestHeader, kResponseHeader:
		name, msg := headerName(val)
		if msg != "" {
			return msg
		}
		set, hasSet := lower[kSet]
		app, hasAppend := lower[kAppend]
		if hasSet == hasAppend {
			return "exactly one of Set or Append is required"
		}
		o := op{kind: headerSet, key: name, value: set}
		if hasAppend {
			o.kind, o.value = headerAppend, app
		}
		if !httpguts.ValidHeaderFieldValue(o.value) {
			return fmt.Sprintf("header %s: invalid value", name)
		}
		o.vals = []string{o.value}[:1:1]
		if primary == kRequestHeader {
			t.req = append(t.req, o)
			return ""
		}
		if o.key == "Host" {
			return "Host is not a response header"
		}
		if o.when, msg = when(lower); msg != "" {
			return msg
		}
		t.resp = append(t.resp, o)
	}
	return ""
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
