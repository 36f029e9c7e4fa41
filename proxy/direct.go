package proxy

import (
	"context"
	"io"
	"net/http"
	"net/http/httputil"
	"net/textproto"
	"os"
	"strings"

	"github.com/tether-proxy/tether/proxy/forwarded"
	"github.com/tether-proxy/tether/proxy/hygiene"
	"github.com/tether-proxy/tether/proxy/internal/h1wire"
	"golang.org/x/net/http/httpguts"
)

// The direct path: a request the lean transport takes (no body, no
// upgrade, an http:// destination) is proxied by the handler itself
// instead of by httputil.ReverseProxy, doing what ReverseProxy does step
// by step (the same hooks: rewrite, the retrying transport,
// modifyResponse, errorHandler) without what it costs per request: a
// second clone of the request with its header map, URL and context, a
// client trace for 1xx responses, a media-type parse of every response's
// Content-Type, a canonicalising Add per response field. The outgoing
// header map and URL are the request state's own, reused.
//
// It declines, before anything was sent or changed, what ReverseProxy
// treats specially (an Upgrade, a query it would re-encode, a request
// the lean transport would hand to http.Transport after the rewrite);
// ServeHTTP then gives the request to the cluster's ReverseProxy.

// directOff: a GODEBUG urlmaxqueryparams setting makes ReverseProxy
// re-encode every query, which the direct path does not do.
var directOff = strings.Contains(os.Getenv("GODEBUG"), "urlmaxqueryparams")

// direct proxies r, which has no body (ServeHTTP checked), on cl's lean
// transport; false when it declined (then it has sent and written
// nothing).
func (p *Proxy) direct(cl *clusterRT, st *reqState, r *http.Request, ctx context.Context) bool {
	if directOff || r.ContentLength != 0 {
		return false
	}
	if !plainQuery(r.URL.RawQuery) {
		return false // ReverseProxy's cleanQueryParams would re-encode it
	}
	// The outgoing request is the state's own, as its header map and URL
	// (the copy WithContext makes stays on the stack).
	st.outReq = *r.WithContext(ctx)
	out := &st.outReq
	out.Body = nil // as ReverseProxy for a request without a body
	out.Close = false
	h := st.outHeader
	if h == nil {
		h = make(http.Header, len(r.Header)+forwarded.Headers+2)
	}
	// The client's fields less the hop-by-hop ones and the forwarding
	// ones, which ReverseProxy deletes after copying all, and the
	// spoofable ones of an untrusted client, which forwarded.Set drops:
	// skipped here, a string switch per field where that is a hash delete
	// per name. With no '_' in a name either, Set need not walk them again
	// (an underscore spelling is left to it: it counts what it drops).
	// The hop-by-hop fields the path reads are found in the same walk: an
	// Upgrade (with or without values) declines.
	// Without transforms that read or change them, tether's own fields
	// stay out of the map (reqState.aside; proxy/DESIGN.md, "Fields
	// beside the outgoing map"): the client's fields of their
	// names, which they would replace, are skipped here. The client's
	// fields stay out of it too when nothing reads the map but the head
	// writer: no affinity rewrite, no Connection or Te field to act on, no
	// underscore spelling for Set to drop, and a method the lean
	// transport replays without a look at an Idempotency-Key.
	tf := st.route.tf
	hk := p.opts.hooks
	aside := st.route.fwd == nil && tf.CopyRequestHeaders() && !tf.HasRequest() && (hk == nil || hk.onRewrite == nil)
	st.aside = aside
	asideClient := aside && !st.route.aff.RewritesRequest() && replayableMethod(r.Method)
	fs := st.own.fields
	var uaName string
	var ua []string
	hasUA := false
	untrusted, clean := !st.client.Trusted, true
	var conn, te []string
	for k, vs := range r.Header {
		if hygiene.HopByHop(k) {
			switch k {
			case "Upgrade":
				clear(h)
				clear(fs[ownFixed:])
				return false
			case "Connection":
				conn = vs
			case "Te":
				te = vs
			}
			continue
		}
		if clientForwarding(k) || untrusted && forwarded.Spoofable(k) || aside && st.ownName(k) {
			continue
		}
		if clean && strings.IndexByte(k, '_') >= 0 {
			clean = false
		}
		if asideClient {
			if k == "User-Agent" {
				// Put last (h1wire.Beside), under k: the parser's
				// string, a known name the writer does not check again.
				uaName, ua, hasUA = k, vs[:len(vs):len(vs)], true
				continue
			}
			fs = append(fs, h1wire.Field{Name: k, Values: vs[:len(vs):len(vs)]})
			continue
		}
		h[k] = vs[:len(vs):len(vs)] // an append by a transform copies
	}
	if hasUA {
		fs = append(fs, h1wire.Field{Name: uaName, Values: ua})
	}
	if asideClient && (conn != nil || te != nil || !clean) {
		for _, f := range fs[ownFixed:] {
			h[f.Name] = f.Values
		}
		clear(fs[ownFixed:])
		fs = fs[:ownFixed]
	}
	st.own.fields = fs
	hygiene.RemoveConnectionFields(h, conn)
	if httpguts.HeaderValuesContainsToken(te, "trailers") {
		h["Te"] = teTrailers
	}
	st.fwdClean = clean
	out.Header = h
	st.outHeader = h
	st.outURL = *r.URL
	out.URL = &st.outURL
	pr := httputil.ProxyRequest{In: r, Out: out}
	p.rewriteState(st, &pr)
	out = pr.Out
	if asideClient {
		if !hasUA {
			out.Header["User-Agent"] = noUserAgent
		}
	} else if _, ok := out.Header["User-Agent"]; !ok {
		out.Header["User-Agent"] = noUserAgent
	}
	// The own loop's request: what its parser checked is not checked again.
	if !cl.lean.PrepareDirect(out, &st.direct, r.Context(), st.beside()) {
		// The rewrite made it something for http.Transport (a transform's
		// invalid field, an https destination): ReverseProxy does it all
		// again from the client's request.
		clear(h)
		st.owned = false
		return false
	}
	st.directOut = out // covered, its head written: the lean transport sends it
	if hk != nil && hk.onDirect != nil {
		hk.onDirect()
	}
	rw := &st.rw
	st.direct.ListFields = true
	var res *http.Response
	var err error
	if rt, ok := cl.rp.Transport.(*retryTransport); ok {
		res, err = rt.roundTrip(out, st)
	} else {
		res, err = cl.rp.Transport.RoundTrip(out) // a test's
	}
	if err != nil {
		p.errorHandler(rw, out, err)
		return true
	}
	if st.direct.HopByHop(res) { // else a lean head without any
		hygiene.RemoveHopByHop(res.Header)
	}
	if hk != nil && hk.onResponse != nil {
		st.ownFields() // a test's look at res.Request sees them all
	}
	// The response's trace id stays out of res's map when nothing reads
	// the map after it is set but the writer that adopts it, which writes
	// it beside the map's fields (fieldsAdopter); else it goes in.
	f := st.direct.Fields(res)
	st.traceAside = f != nil && !st.waf.InspectsResponses()
	var adopter fieldsAdopter
	if f.Listed() && !st.readsResponseFields(hk) {
		adopter = st.adoptFields(f) // the list itself (proxy/DESIGN.md, "Fields beside the outgoing map")
	}
	if f.Listed() {
		res.Header = f.Map() // read on the way, or not taken
	}
	p.modifyResponseState(st, res)
	if adopter == nil {
		adopter = st.adoptFields(st.direct.Fields(res))
	}
	if adopter == nil {
		if st.traceAside {
			res.Header[forwarded.TraceKey] = st.traceVal[:1:1]
		}
		copyFields(rw.Header(), res.Header)
	}
	st.traceAside = false
	announced := len(res.Trailer)
	if announced > 0 {
		keys := make([]string, 0, announced)
		for k := range res.Trailer {
			keys = append(keys, k)
		}
		rw.Header().Add("Trailer", strings.Join(keys, ", "))
	}
	rw.WriteHeader(res.StatusCode)
	flush := res.ContentLength == -1
	if !flush {
		// The writer that adopted res's map walked it at WriteHeader, after
		// everything that changes it: its Content-Type, without a look-up.
		ct, ok := []string(nil), false
		if adopter != nil {
			ct, ok = adopter.ScannedType()
		}
		if !ok {
			ct = res.Header["Content-Type"]
		}
		flush = eventStream(ct)
	}
	if flush {
		_ = rw.FlushError() // ReverseProxy's first flush: the head goes out before the body
	}
	if err := p.copyBody(rw, res.Body, flush, res.ContentLength); err != nil {
		defer res.Body.Close()
		if r.Context().Value(http.ServerContextKey) == nil {
			p.errLog.Printf("suppressing panic for copyResponse error in test; copy error: %v", err)
			return true
		}
		panic(http.ErrAbortHandler) // as ReverseProxy: the response is cut
	}
	res.Body.Close() // now, to read the trailers
	if len(res.Trailer) > 0 {
		_ = rw.FlushError() // chunked, so the trailers can follow
	}
	if len(res.Trailer) == announced {
		for k, vs := range res.Trailer {
			for _, v := range vs {
				rw.Header().Add(k, v)
			}
		}
		return true
	}
	for k, vs := range res.Trailer {
		k = http.TrailerPrefix + k
		for _, v := range vs {
			rw.Header().Add(k, v)
		}
	}
	return true
}

// copyFields adds src's fields to dst as Header.Add would, name by name:
// canonical names, the values of names that meet appended. Into an empty
// dst a canonical name is not there yet unless a name was canonicalised
// into it before (merged), so it takes no lookup.
func copyFields(dst, src http.Header) {
	empty, merged := len(dst) == 0, false
	for k, vs := range src {
		ck := canonicalName(k)
		if empty && !merged && ck == k {
			dst[k] = vs
			continue
		}
		merged = merged || ck != k
		if old, ok := dst[ck]; ok {
			dst[ck] = append(old, vs...)
		} else {
			dst[ck] = vs
		}
	}
}

// fieldsAdopter is a response writer that can take a lean response's
// header map and its value slots as its own header (the own HTTP/1.1
// loop's).
type fieldsAdopter interface {
	// AdoptFields takes f's map, and also as one more field beside it
	// that replaces the map's of its name.
	AdoptFields(f *h1wire.Fields, also h1wire.Field) bool
	// ScannedType is the Content-Type values of the adopted map as the
	// writer's final WriteHeader found them, if it looked.
	ScannedType() ([]string, bool)
}

// adoptFields hands f, a lean response's fields (Direct.Fields), to the
// client's response writer whole, when the writer can take them: what
// copyFields would make of them is that map itself, every name in it
// canonical (the lean parser's, the trace header's, and those transforms
// and affinity set, canonicalised with their configuration), or the list
// the map would be made of. The writer that took them, or nil.
func (st *reqState) adoptFields(f *h1wire.Fields) fieldsAdopter {
	if f == nil {
		return nil
	}
	var also h1wire.Field
	if st.traceAside {
		also = h1wire.Field{Name: forwarded.TraceKey, Values: st.traceVal[:1:1]}
	}
	if a, ok := st.rw.w.(fieldsAdopter); ok && a.AdoptFields(f, also) {
		return a
	}
	return nil
}

// readsResponseFields: modifyResponseState reads or changes a response's
// fields (a transform, a hook, the WAF, affinity).
func (st *reqState) readsResponseFields(hk *testHooks) bool {
	return st.route.tf.HasResponse() || hk != nil && hk.onResponse != nil ||
		st.waf.InspectsResponses() || st.route.aff.SetsResponseFields(st.dec)
}

// canonicalName is textproto.CanonicalMIMEHeaderKey, without its walk over
// the name's bytes for the names responses usually carry, each canonical.
func canonicalName(k string) string {
	switch k {
	case "Content-Length", "Content-Type", "Date", "Server", "Set-Cookie", forwarded.TraceHeader,
		"Cache-Control", "Content-Encoding", "Etag", "Expires", "Last-Modified", "Location",
		"Vary", "Accept-Ranges", "Age", "Strict-Transport-Security", "X-Content-Type-Options":
		return k
	}
	return textproto.CanonicalMIMEHeaderKey(k)
}

var (
	teTrailers  = []string{"trailers"}
	noUserAgent = []string{""}
)

// write1xx forwards a 1xx response of a direct request, as ReverseProxy's
// Got1xxResponse hook: its fields go out with it and are then cleared.
func (st *reqState) write1xx(code int, header textproto.MIMEHeader) {
	h := st.rw.Header()
	for k, vs := range header {
		for _, v := range vs {
			h.Add(k, v)
		}
	}
	st.rw.WriteHeader(code)
	clear(h)
}

// copyBody is ReverseProxy's copyResponse: the shared buffers (a larger
// one for a body of known length over 32 KiB), a flush after every write
// when flush is set (an event stream, a body of unknown length), a read
// error logged and returned.
func (p *Proxy) copyBody(rw *respWriter, src io.Reader, flush bool, length int64) error {
	buf := p.buffers.getFor(length)
	defer p.buffers.Put(buf)
	for {
		nr, rerr := src.Read(buf)
		if rerr != nil && rerr != io.EOF && rerr != context.Canceled {
			p.errLog.Printf("httputil: ReverseProxy read error during body copy: %v", rerr)
		}
		if nr > 0 {
			nw, werr := rw.Write(buf[:nr])
			if werr != nil {
				return werr
			}
			if nw != nr {
				return io.ErrShortWrite
			}
			if flush {
				_ = rw.FlushError()
			}
		}
		if rerr != nil {
			if rerr == io.EOF {
				return nil
			}
			return rerr
		}
	}
}

// ownName: k is the name of a field of tether's own (reqState.aside),
// which replaces the client's: a forwarding field Set writes, or the
// trace context setTrace writes (Tracestate only when it drops the
// client's, whose traceparent was not valid).
func (st *reqState) ownName(k string) bool {
	switch k {
	case forwarded.XFPort, forwarded.OriginalHost, forwarded.OriginalURL, forwarded.TraceHeader, "Traceparent":
		return true
	case "Tracestate":
		return !st.trace.incoming
	}
	return false
}

// replayableMethod: the lean transport replays a request of method m on
// a stale pooled connection without a look at its fields
// (lean.Replayable).
func replayableMethod(m string) bool {
	switch m {
	case "", http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace:
		return true
	}
	return false
}

// clientForwarding: the forwarding fields ReverseProxy drops from the
// client's request before Rewrite.
func clientForwarding(k string) bool {
	switch k {
	case "Forwarded", "X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Proto":
		return true
	}
	return false
}

// plainQuery: ReverseProxy keeps the query as it is (no ';', every '%'
// a valid escape, not too many parameters).
func plainQuery(q string) bool {
	if len(q) >= 10000 && strings.Count(q, "&") >= 10000 {
		return false
	}
	for i := 0; i < len(q); i++ {
		switch q[i] {
		case ';':
			return false
		case '%':
			if i+2 >= len(q) || !ishex(q[i+1]) || !ishex(q[i+2]) {
				return false
			}
			i += 2
		}
	}
	return true
}

func ishex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

// eventStream is ReverseProxy's test for Server-Sent Events:
// mime.ParseMediaType's base type of the first Content-Type is
// text/event-stream (compared in ASCII, as ParseMediaType lower-cases).
func eventStream(ct []string) bool {
	if len(ct) == 0 {
		return false
	}
	base, _, _ := strings.Cut(ct[0], ";")
	base = strings.TrimSpace(base)
	const sse = "text/event-stream"
	if len(base) != len(sse) {
		return false
	}
	for i := 0; i < len(sse); i++ {
		c := base[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != sse[i] {
			return false
		}
	}
	return true
}
