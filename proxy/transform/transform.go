package transform

import (
	"encoding/base64"
	"io"
	"net/http"
	"net/textproto"
	"net/url"
	"slices"
	"strings"

	"golang.org/x/net/http/httpguts"

	"github.com/tether-proxy/tether/proxy/route"
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
	pathPattern
	headerSet
	headerAppend
	headerRemove
	headerSetRoute    // RequestHeaderRouteValue with Set
	headerAppendRoute // RequestHeaderRouteValue with Append
	headersAllowed    // copy only the listed headers (or trailers)
	querySet
	queryAppend
	querySetRoute
	queryAppendRoute
	queryRemove
	methodChange
	clientCert
)

// op is one compiled step. key is the canonical header name (or the query
// parameter name); vals is a one-element slice with cap 1, shared by every
// request, so a later append by anyone copies instead of writing into it.
type op struct {
	kind  kind
	key   string
	value string
	vals  []string
	// escaped is value in URL-escaped form, for requests carrying RawPath.
	escaped string
	when    When
	// routeKey is the lower-cased route value name (…Route kinds).
	routeKey string
	// allowed holds canonical header names (headersAllowed).
	allowed map[string]bool
	pattern *pattern
}

// Transforms is the compiled transform list of one route. The zero value
// and nil are valid and change nothing except the defaults noted on the
// methods. Safe for concurrent use; immutable after Compile.
type Transforms struct {
	req          []op
	resp         []op
	trailers     []op
	originalHost bool
	noCopy       bool
	noRespCopy   bool
	noTrailCopy  bool
	// tmpl is the route's Match.Path, read for route values when a
	// transform needs them (needValues).
	tmpl       *route.Template
	needValues bool
}

// OriginalHost reports whether the client's Host header is sent to the
// backend (RequestHeaderOriginalHost=true). Default false: the
// destination's host.
func (t *Transforms) OriginalHost() bool { return t != nil && t.originalHost }

// CopyRequestHeaders reports whether the client's request headers are
// copied to the outgoing request (RequestHeadersCopy; RequestHeadersAllowed
// turns it off). Default true.
func (t *Transforms) CopyRequestHeaders() bool { return t == nil || !t.noCopy }

// HasRequest reports whether any request transform is configured
// (ApplyRequest does something).
func (t *Transforms) HasRequest() bool { return t != nil && len(t.req) > 0 }

// HasResponse reports whether any response or trailer transform is
// configured.
func (t *Transforms) HasResponse() bool {
	return t != nil && (len(t.resp) > 0 || len(t.trailers) > 0 || t.noRespCopy || t.noTrailCopy)
}

// ApplyRequest runs the request transforms, in their configured order, on
// the outgoing request out. Paths are transformed before the destination's
// base path is joined, as YARP does. in is the client's request (route
// values, client certificate); src holds the client's headers as
// ReverseProxy cleaned them: when CopyRequestHeaders is false, out.Header
// starts without them and src is where RequestHeadersAllowed copies from
// and where an Append finds the client's value, as in YARP. src must be
// out's own copy (ClientCert deletes from it), never in.Header.
func (t *Transforms) ApplyRequest(in, out *http.Request, src http.Header) {
	if t == nil || len(t.req) == 0 {
		return
	}
	copied := !t.noCopy
	var vals map[string]string
	valuesDone := !t.needValues
	var q *query
	for i := range t.req {
		o := &t.req[i]
		if !valuesDone {
			vals, valuesDone = t.values(in), true
		}
		switch o.kind {
		case pathRemovePrefix, pathPrefix, pathSet:
			applyPath(o, out.URL)
		case pathPattern:
			setEscapedPath(out.URL, o.pattern.bind(vals))
		case headerSet:
			setRequestHeader(out, o.key, o.value, o.vals)
		case headerAppend:
			appendRequestHeader(out, src, copied, o.key, o.value)
		case headerSetRoute, headerAppendRoute:
			v, ok := vals[o.routeKey]
			if !ok || !httpguts.ValidHeaderFieldValue(v) || o.key == "Host" && !httpguts.ValidHostHeader(v) {
				continue // YARP adds nothing without a value
			}
			if o.kind == headerSetRoute {
				setRequestHeader(out, o.key, v, []string{v})
			} else {
				appendRequestHeader(out, src, copied, o.key, v)
			}
		case headerRemove:
			delete(out.Header, o.key)
		case headersAllowed:
			if !copied { // a later RequestHeadersCopy=true copied them all
				copyAllowed(out.Header, src, o.allowed)
			}
			copied = true
		case querySet, queryAppend, querySetRoute, queryAppendRoute, queryRemove:
			if q == nil {
				q = parseQuery(out.URL.RawQuery)
			}
			applyQuery(q, o, vals)
		case methodChange:
			if strings.EqualFold(out.Method, o.key) {
				out.Method = o.value
			}
		case clientCert:
			// Always removed first, so a client cannot send its own, not
			// even through a later allow list (src is out's own copy).
			delete(out.Header, o.key)
			delete(src, o.key)
			if in.TLS != nil && len(in.TLS.PeerCertificates) > 0 {
				out.Header[o.key] = []string{base64.StdEncoding.EncodeToString(in.TLS.PeerCertificates[0].Raw)}
			}
		}
	}
	if q != nil && q.changed {
		out.URL.RawQuery = q.encode()
		out.URL.ForceQuery = false
	}
}

func (t *Transforms) values(in *http.Request) map[string]string {
	if t.tmpl == nil {
		return nil
	}
	vals, _ := t.tmpl.Values(in)
	return vals
}

func applyQuery(q *query, o *op, vals map[string]string) {
	v := o.value
	switch o.kind {
	case querySetRoute, queryAppendRoute:
		rv, ok := vals[o.routeKey]
		if !ok {
			return
		}
		// A route value keeps the client's encoded slash; in a query it
		// is the slash it stands for.
		v = strings.ReplaceAll(strings.ReplaceAll(rv, "%2F", "/"), "%2f", "/")
	}
	switch o.kind {
	case querySet, querySetRoute:
		q.set(o.key, v)
	case queryAppend, queryAppendRoute:
		q.append(o.key, v)
	case queryRemove:
		q.remove(o.key)
	}
}

func setRequestHeader(out *http.Request, key, value string, vals []string) {
	switch {
	case key == "Host":
		out.Host = value
	case value == "":
		delete(out.Header, key)
	default:
		out.Header[key] = vals
	}
}

func appendRequestHeader(out *http.Request, src http.Header, copied bool, key, value string) {
	if key == "Host" {
		out.Host = value
		return
	}
	cur, ok := out.Header[key]
	if !ok && !copied {
		cur = src[key]
	}
	out.Header[key] = append(slices.Clip(cur), value)
}

// copyAllowed adds the non-empty src headers named in allowed to dst.
func copyAllowed(dst, src http.Header, allowed map[string]bool) {
	for k, vv := range src {
		if len(vv) == 0 || len(vv) == 1 && vv[0] == "" || !allowed[textproto.CanonicalMIMEHeaderKey(k)] {
			continue
		}
		dst[k] = append(slices.Clip(dst[k]), vv...)
	}
}

// ApplyResponse runs the response header transforms whose When matches the
// status on the backend response, before ReverseProxy copies its headers
// to the client; with ResponseHeadersCopy false (or ResponseHeadersAllowed)
// resp.Header is replaced by what the transforms produce. Trailer
// transforms are armed here and run when ReverseProxy closes the body,
// once the trailers have arrived.
func (t *Transforms) ApplyResponse(resp *http.Response) {
	if t == nil {
		return
	}
	status := resp.StatusCode
	if len(t.resp) > 0 || t.noRespCopy {
		src, dst := resp.Header, resp.Header
		if t.noRespCopy {
			dst = make(http.Header, len(t.resp)+2)
			if status == http.StatusSwitchingProtocols {
				// The upgrade itself needs these.
				for _, k := range [...]string{"Connection", "Upgrade"} {
					if v, ok := src[k]; ok {
						dst[k] = v
					}
				}
			}
		}
		applyHeaderOps(t.resp, dst, src, !t.noRespCopy, status)
		resp.Header = dst
	}
	if (len(t.trailers) > 0 || t.noTrailCopy) && status != http.StatusSwitchingProtocols && resp.Body != nil {
		// Declare the trailers the client will get (ReverseProxy
		// announces resp.Trailer's keys before the body); trailerBody
		// computes their values once the backend's have been read.
		declared := make(http.Header, len(resp.Trailer)+len(t.trailers))
		if !t.noTrailCopy {
			for k := range resp.Trailer {
				declared[k] = nil
			}
		}
		for i := range t.trailers {
			o := &t.trailers[i]
			if !o.when.matches(status) {
				continue
			}
			switch o.kind {
			case headerSet, headerAppend:
				if o.kind == headerSet && o.value == "" {
					delete(declared, o.key)
				} else {
					declared[o.key] = nil
				}
			case headerRemove:
				delete(declared, o.key)
			case headersAllowed:
				for k := range resp.Trailer {
					if o.allowed[textproto.CanonicalMIMEHeaderKey(k)] {
						declared[k] = nil
					}
				}
			}
		}
		resp.Trailer = declared
		resp.Body = &trailerBody{ReadCloser: resp.Body, resp: resp, t: t}
	}
}

// ApplyError runs the response header transforms whose When matches status
// on an error response tether writes itself (h is the client response's
// header, before tether adds its own), as YARP runs them when the proxy
// fails: with no backend response, Set and Append add, Remove removes and
// an allow list lets nothing of the backend's through.
func (t *Transforms) ApplyError(h http.Header, status int) {
	if t == nil || len(t.resp) == 0 {
		return
	}
	applyHeaderOps(t.resp, h, nil, true, status)
}

// applyHeaderOps runs response (or trailer) ops on dst. copied says dst
// already holds the backend's fields; otherwise an Append finds the
// backend's value in src, as YARP's TakeHeader does.
func applyHeaderOps(ops []op, dst, src http.Header, copied bool, status int) {
	for i := range ops {
		o := &ops[i]
		if !o.when.matches(status) {
			continue
		}
		switch o.kind {
		case headerSet:
			if o.value == "" {
				delete(dst, o.key)
				continue
			}
			dst[o.key] = o.vals
		case headerAppend:
			cur, ok := dst[o.key]
			if !ok && !copied {
				cur = src[o.key]
			}
			dst[o.key] = append(slices.Clip(cur), o.value)
		case headerRemove:
			delete(dst, o.key)
		case headersAllowed:
			if !copied { // a later …Copy=true copied them all
				copyAllowed(dst, src, o.allowed)
			}
			copied = true
		}
	}
}

// trailerBody runs the trailer transforms when ReverseProxy closes the
// backend body: the transport has filled resp.Trailer by then, and
// ReverseProxy copies it to the client right after.
type trailerBody struct {
	io.ReadCloser
	resp *http.Response
	t    *Transforms
	done bool
}

func (b *trailerBody) Close() error {
	err := b.ReadCloser.Close()
	if !b.done {
		b.done = true
		src := b.resp.Trailer
		dst := src
		if b.t.noTrailCopy {
			dst = make(http.Header, len(b.t.trailers))
		}
		if dst == nil {
			dst = http.Header{}
		}
		applyHeaderOps(b.t.trailers, dst, src, !b.t.noTrailCopy, b.resp.StatusCode)
		for k, v := range dst {
			if len(v) == 0 {
				delete(dst, k) // declared but never sent
			}
		}
		b.resp.Trailer = dst
	}
	return err
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

// setEscapedPath sets u's path from its escaped form (PathPattern's
// output), keeping the escaping: an encoded slash stays encoded.
func setEscapedPath(u *url.URL, esc string) {
	p, err := url.PathUnescape(esc)
	if err != nil { // bind only writes valid escapes; be safe
		u.Path, u.RawPath = "", ""
		return
	}
	u.Path, u.RawPath = p, esc
	if u.EscapedPath() != esc {
		u.RawPath = ""
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
