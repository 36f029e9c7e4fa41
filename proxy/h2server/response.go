package h2server

import (
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/tether-proxy/tether/proxy/internal/httpdate"
	"golang.org/x/net/http2"
)

// responseWriter is a stream's http.ResponseWriter. Its methods run on the
// handler's goroutine; what they share with the connection is under its mu.
type responseWriter struct {
	st          *stream
	hdr         http.Header
	snap        []field // hdr as WriteHeader found it: what is sent
	hasDate     bool    // hdr had a Date key (even without a value)
	hasType     bool    // and a Content-Type key
	status      int
	wroteHeader bool
	sentHeader  bool
	buf         []byte // body written, not sent
	written     int64
	clen        int64 // the Content-Length set, -1 if none
	trailers    []string
	// refuse is the status to answer without the handler, refuseMsg its
	// body (net/http's HTTP/2 server's answers).
	refuse    int
	refuseMsg string
}

func (w *responseWriter) Header() http.Header {
	if w.hdr == nil {
		if sc := w.st.sc; sc != nil {
			w.hdr = sc.respHeader()
		} else {
			w.hdr = make(http.Header, 8) // after the handler returned
		}
	}
	return w.hdr
}

func bodyAllowed(status int) bool {
	return !(status >= 100 && status <= 199 || status == 204 || status == 304)
}

func (w *responseWriter) isHead() bool { return w.st.req.Method == http.MethodHead }

func (w *responseWriter) WriteHeader(code int) {
	if code < 100 || code > 999 {
		panic("invalid WriteHeader code " + strconv.Itoa(code))
	}
	if w.wroteHeader {
		w.st.c.s.logf("http2: superfluous response.WriteHeader call")
		return
	}
	if code >= 100 && code <= 199 && code != http.StatusSwitchingProtocols {
		c := w.st.c
		c.mu.Lock()
		if !w.st.closed {
			c.writeHeadersLocked(w.st, code, appendFields(nil, w.hdr), false)
			c.flushLocked()
		}
		c.mu.Unlock()
		return
	}
	w.wroteHeader = true
	w.status = code
	w.clen = -1
	// The handler may change its map, or what its slices hold, once
	// WriteHeader has returned: what is sent is a copy, a flat list of
	// fields rather than a map (the map's clone was most of the cost of
	// a small response's head).
	w.snap = w.st.fieldArr[:0]
	for k, vv := range w.hdr {
		switch k {
		case "Date":
			w.hasDate = true
		case "Content-Type":
			w.hasType = true
		case "Content-Length":
			if len(vv) > 0 {
				n, err := strconv.ParseInt(vv[0], 10, 64)
				if err != nil || n < 0 {
					continue // not sent
				}
				w.clen = n
			}
		case "Trailer":
			for _, v := range vv {
				for _, k := range strings.Split(v, ",") {
					if k = http.CanonicalHeaderKey(textTrim(k)); k != "" {
						w.trailers = append(w.trailers, k)
					}
				}
			}
		}
		for _, v := range vv {
			w.snap = append(w.snap, field{k: k, v: v})
		}
	}
}

// field is one response field as sent; valid: one the server made, whose
// value needs no check.
type field struct {
	k, v  string
	valid bool
}

// appendFields appends h's fields to dst.
func appendFields(dst []field, h http.Header) []field {
	for k, vv := range h {
		for _, v := range vv {
			dst = append(dst, field{k: k, v: v})
		}
	}
	return dst
}

func (w *responseWriter) Write(p []byte) (int, error) {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	if !bodyAllowed(w.status) {
		return 0, http.ErrBodyNotAllowed
	}
	if w.clen >= 0 && w.written+int64(len(p)) > w.clen {
		return 0, http.ErrContentLength
	}
	w.written += int64(len(p))
	if w.sentHeader && w.isHead() {
		return len(p), nil
	}
	if len(w.buf)+len(p) <= respBufSize {
		if w.buf == nil {
			w.buf = getBuf()
		}
		w.buf = append(w.buf, p...)
		return len(p), nil
	}
	c := w.st.c
	c.mu.Lock()
	defer c.mu.Unlock()
	w.sendHeaderLocked(false)
	if w.isHead() {
		return len(p), nil
	}
	if len(w.buf) > 0 {
		err := c.writeDataLocked(w.st, w.buf, false)
		w.buf = w.buf[:0]
		if err != nil {
			return 0, err
		}
	}
	if err := c.writeDataLocked(w.st, p, w.endsHere()); err != nil {
		return 0, err
	}
	return len(p), nil
}

// endsHere reports whether the body written so far ends the response: its
// declared length is all written and no trailers can follow (none
// declared, none set with http.TrailerPrefix so far). The frame that
// sends its last bytes then carries END_STREAM, before the handler
// returns: a response needs no empty frame of its own to end.
func (w *responseWriter) endsHere() bool {
	if w.clen < 0 || w.written != w.clen || len(w.trailers) > 0 || w.isHead() || !bodyAllowed(w.status) {
		return false
	}
	for k := range w.hdr {
		if strings.HasPrefix(k, http.TrailerPrefix) {
			return false
		}
	}
	return true
}

func (w *responseWriter) WriteString(s string) (int, error) {
	if len(w.buf)+len(s) <= respBufSize && w.wroteHeader && bodyAllowed(w.status) && w.clen < 0 && !w.sentHeader {
		if w.buf == nil {
			w.buf = getBuf()
		}
		w.buf = append(w.buf, s...)
		w.written += int64(len(s))
		return len(s), nil
	}
	return w.Write([]byte(s))
}

// sendHeaderLocked sends the response's HEADERS frame once.
func (w *responseWriter) sendHeaderLocked(end bool) {
	if w.sentHeader {
		return
	}
	w.sentHeader = true
	if !w.hasDate {
		w.snap = append(w.snap, field{"Date", httpdate.String(), true})
	}
	if len(w.buf) > 0 && bodyAllowed(w.status) && !w.hasType {
		w.snap = append(w.snap, field{"Content-Type", http.DetectContentType(w.buf), true})
	}
	w.st.c.writeHeadersLocked(w.st, w.status, w.snap, end)
}

// trailerFields are the trailers to send: declared ones with a value and
// those set with http.TrailerPrefix; nil if none.
func (w *responseWriter) trailerFields() http.Header {
	var t http.Header
	for _, k := range w.trailers {
		if vv := w.hdr[k]; len(vv) > 0 {
			if t == nil {
				t = http.Header{}
			}
			t[k] = vv
		}
	}
	for k, vv := range w.hdr {
		if strings.HasPrefix(k, http.TrailerPrefix) && len(vv) > 0 {
			if t == nil {
				t = http.Header{}
			}
			t[http.CanonicalHeaderKey(k[len(http.TrailerPrefix):])] = vv
		}
	}
	return t
}

// finish ends the response as the handler returns.
func (w *responseWriter) finish() {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	st := w.st
	c := st.c
	c.mu.Lock()
	defer c.mu.Unlock()
	defer c.handlerDoneLocked()
	if st.closed {
		return
	}
	var trailers http.Header
	if !st.localDone {
		trailers = w.trailerFields()
	}
	if !w.sentHeader {
		if w.clen < 0 && bodyAllowed(w.status) && trailers == nil && (len(w.buf) > 0 || !w.isHead()) {
			w.snap = append(w.snap, field{"Content-Length", c.lengthText(len(w.buf)), true})
		}
		end := trailers == nil && (len(w.buf) == 0 || w.isHead())
		w.sendHeaderLocked(end)
	}
	if !st.localDone {
		var err error
		if w.isHead() {
			err = c.writeDataLocked(st, nil, trailers == nil)
		} else {
			err = c.writeDataLocked(st, w.buf, trailers == nil)
		}
		if err == nil && trailers != nil {
			c.writeHeadersLocked(st, 0, appendFields(nil, trailers), true)
		}
	}
	putBuf(w.buf)
	w.buf = nil
	if st.closed {
		c.flushLocked()
		return
	}
	if !st.remoteDone {
		// The handler is done with a body still coming: as net/http,
		// the stream is reset with NO_ERROR.
		c.resetLocked(st.id, http2.ErrCodeNo)
	} else {
		st.forgetLocked()
	}
	c.flushLocked()
}

// Flush sends the headers and the body written so far.
func (w *responseWriter) Flush() { _ = w.FlushError() }

// FlushError is Flush for http.ResponseController.
func (w *responseWriter) FlushError() error {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	c := w.st.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if w.st.err != nil {
		return w.st.err
	}
	end := !w.st.localDone && w.endsHere()
	w.sendHeaderLocked(end && len(w.buf) == 0)
	if len(w.buf) > 0 && !w.isHead() && !w.st.localDone {
		err := c.writeDataLocked(w.st, w.buf, end)
		w.buf = w.buf[:0]
		if err != nil {
			return err
		}
	}
	c.flushLocked()
	return c.writeErr
}

// EnableFullDuplex: an HTTP/2 stream reads its body while it answers.
func (w *responseWriter) EnableFullDuplex() error { return nil }

// SetReadDeadline bounds the handler's reads of the request body: once
// t has passed they fail with os.ErrDeadlineExceeded.
func (w *responseWriter) SetReadDeadline(t time.Time) error {
	st := w.st
	c := st.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if st.readTimer != nil {
		st.readTimer.Stop()
	}
	st.readPast = false
	if t.IsZero() {
		return nil
	}
	d := time.Until(t)
	if d <= 0 {
		st.readPast = true
		st.wake.Broadcast()
		return nil
	}
	st.readTimer = time.AfterFunc(d, func() {
		c.mu.Lock()
		st.readPast = true
		st.wake.Broadcast()
		c.mu.Unlock()
	})
	return nil
}

// SetWriteDeadline bounds the response's writes: once t has passed the
// stream is reset (INTERNAL_ERROR, as net/http's HTTP/2 server does) and
// its writes fail. A socket write under way then has a second more to
// finish, after which the connection is cut: a client whose windows let
// frames through but that reads nothing holds the connection's writer.
func (w *responseWriter) SetWriteDeadline(t time.Time) error {
	st := w.st
	c := st.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if st.writeTimer != nil {
		st.writeTimer.Stop()
	}
	st.writePast = false
	if t.IsZero() {
		return nil
	}
	expire := func() {
		st.writePast = true
		if c.writing && !c.writeBound {
			// A socket write is under way, perhaps to a client that
			// reads nothing: it gets a second more, then the
			// connection is cut.
			c.writeBound = true
			_ = c.nc.SetWriteDeadline(time.Now().Add(time.Second))
		}
		if !st.closed {
			c.resetLocked(st.id, http2.ErrCodeInternal)
			c.flushLocked()
		}
		st.wake.Broadcast()
	}
	d := time.Until(t)
	if d <= 0 {
		expire()
		return nil
	}
	st.writeTimer = time.AfterFunc(d, func() {
		c.mu.Lock()
		expire()
		c.mu.Unlock()
	})
	return nil
}

var bufPool sync.Pool

// getBuf is an empty response buffer of respBufSize. The pool holds
// array pointers: a *[]byte would be boxed anew at each put.
func getBuf() []byte {
	if b, ok := bufPool.Get().(*[respBufSize]byte); ok {
		return b[:0]
	}
	return make([]byte, 0, respBufSize)
}

func putBuf(b []byte) {
	if cap(b) == respBufSize {
		bufPool.Put((*[respBufSize]byte)(b[:respBufSize]))
	}
}

// lower is a response field name as HTTP/2 sends it.
func lower(k string) string {
	if l, ok := commonLower[k]; ok {
		return l
	}
	for i := 0; i < len(k); i++ {
		if c := k[i]; 'A' <= c && c <= 'Z' {
			return strings.ToLower(k)
		}
	}
	return k
}

var commonLower = map[string]string{}
var commonCanonical = map[string]string{}

func init() {
	for _, k := range []string{
		"accept", "accept-charset", "accept-encoding", "accept-language", "accept-ranges", "age",
		"access-control-allow-credentials", "access-control-allow-headers", "access-control-allow-methods",
		"access-control-allow-origin", "access-control-expose-headers", "access-control-max-age",
		"access-control-request-headers", "access-control-request-method", "allow", "authorization",
		"cache-control", "content-disposition", "content-encoding", "content-language", "content-length",
		"content-location", "content-range", "content-type", "cookie", "date", "etag", "expect", "expires",
		"from", "host", "if-match", "if-modified-since", "if-none-match", "if-unmodified-since",
		"last-modified", "link", "location", "max-forwards", "origin", "proxy-authenticate",
		"proxy-authorization", "range", "referer", "refresh", "retry-after", "server", "set-cookie",
		"strict-transport-security", "trailer", "transfer-encoding", "user-agent", "vary", "via",
		"www-authenticate", "x-forwarded-for", "x-forwarded-host", "x-forwarded-proto", "x-forwarded-port",
		"x-original-host", "x-original-url", "x-tether-trace-id", "x-request-id", "traceparent", "tracestate",
		"grpc-status", "grpc-message", "grpc-encoding", "grpc-accept-encoding", "grpc-timeout", "te",
		"x-content-type-options", "x-frame-options", "keep-alive", "connection", "upgrade", "priority",
	} {
		ck := http.CanonicalHeaderKey(k)
		commonLower[ck] = k
		commonCanonical[k] = ck
	}
}
