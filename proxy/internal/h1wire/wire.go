package h1wire

import (
	"bufio"
	"bytes"
	"io"
	"math/bits"
	"net/http"
	"net/http/httptrace"
	"net/textproto"
	"runtime"
	"strings"
	"sync"
	"unsafe"

	"github.com/tether-proxy/tether/proxy/internal/swar"
	"golang.org/x/net/http/httpguts"
)

// The wire format of HTTP/1.1 heads, for the common case only. WriteRequestHead
// writes what Request.Write writes for a request without a body, and
// ReadResponseHead parses what http.ReadResponse parses for a plain
// HTTP/1.1 response with one Content-Length, each without the standard
// library's general machinery (a transfer writer, sorted header copies, a
// textproto reader, a header block copied line by line). Anything outside
// that case is left to the standard library, byte for byte: the writer
// says so before writing anything, the parser before consuming anything,
// so the same bytes go to Request.Write or http.ReadResponse instead.
// Differential tests and fuzz targets hold both to the standard library's
// result.

// WriteRequestHead writes req's request line and header block to bw as
// Request.Write would for a body-less request whose method, field names
// and field values are valid (the lean transport's Covers).
// It writes nothing and returns false for what it does not handle (a host
// needing punycode or an IPv6 zone removed, an opaque URL, a trace that
// wants each written header, ...).
func WriteRequestHead(bw *bufio.Writer, req *http.Request) (bool, error) {
	if TraceWantsWrites(httptrace.ContextClientTrace(req.Context())) {
		return false, nil
	}
	b, res := AppendRequestHead(bw.AvailableBuffer(), req, false, "", Beside{}, nil)
	if res == HeadDeclined {
		return false, nil
	}
	_, err := bw.Write(b)
	return true, err
}

// TraceWantsWrites: trace has a hook for each written header or the
// request's end, which only Request.Write calls.
func TraceWantsWrites(trace *httptrace.ClientTrace) bool {
	return trace != nil && (trace.WroteHeaderField != nil || trace.WroteHeaders != nil || trace.WroteRequest != nil)
}

// Head is what AppendRequestHead did.
type Head uint8

const (
	// HeadDeclined: nothing appended; Request.Write is to write it.
	HeadDeclined Head = iota
	// HeadWritten: the head is appended.
	HeadWritten
	// HeadGzip: the head is appended with "Accept-Encoding: gzip" added.
	HeadGzip
	// HeadInvalid: nothing appended; a field fails the lean transport's
	// check.
	HeadInvalid
)

// AppendRequestHead appends to b the head WriteRequestHead writes (whose
// caller checks the client trace). With lean it also does, in the same
// walk of the fields, what the lean transport does around it: each field
// is held to its rule (a token name, neither Expect nor Upgrade, values
// without a control byte but HTAB), HeadInvalid when one fails, and
// "Accept-Encoding: gzip" is added when the request asks for no encoding
// and no range (HeadGzip). The result is b unchanged unless the head was
// appended.
//
// parsed is the string a request head was parsed from whose every value
// a parser held to a rule at least as strict (a request of the own
// HTTP/1.1 loop's), or "": a value that lies in it is not checked again
// (fieldSpan.holds says why that is sound), and neither is a name that
// lies in knownNames.
//
// beside are fields written as if they were in req's map, after its
// own (Beside). memo, when not nil, is the host of an earlier head of the
// caller's, which is not checked again (HostMemo).
func AppendRequestHead(b []byte, req *http.Request, lean bool, parsed string, beside Beside, memo *HostMemo) ([]byte, Head) {
	u := req.URL
	if u.Opaque != "" || req.Method == http.MethodConnect || req.Close || req.Trailer != nil || len(req.TransferEncoding) > 0 {
		return b, HeadDeclined
	}
	host := req.Host
	if host == "" {
		host = u.Host
	}
	if memo == nil || host != memo.host {
		for i := 0; i < len(host); i++ {
			if c := host[i]; c >= 0x80 || c == '%' {
				return b, HeadDeclined // punycode, or an IPv6 zone to remove
			}
		}
		if !httpguts.ValidHostHeader(host) {
			return b, HeadDeclined
		}
		if memo != nil {
			memo.host = host
		}
	}
	path := u.Path
	if u.RawPath != "" || !plainPath(path) {
		path = u.EscapedPath()
	}
	if path == "" {
		path = "/"
	}
	if ctlByte(path) || ctlByte(u.RawQuery) {
		return b, HeadDeclined // Request.Write's error
	}
	method := req.Method
	if method == "" {
		method = http.MethodGet
	}
	b0 := b
	b = append(b, method...)
	b = append(b, ' ')
	b = append(b, path...)
	if u.ForceQuery || u.RawQuery != "" {
		b = append(b, '?')
		b = append(b, u.RawQuery...)
	}
	b = append(b, " HTTP/1.1\r\nHost: "...)
	b = append(b, host...)
	b = append(b, "\r\n"...)
	ua := "Go-http-client/1.1" // Request.Write's default
	vs, ok := req.Header["User-Agent"]
	if fs := beside.Fields; !ok && len(fs) > 0 && fs[len(fs)-1].Name == "User-Agent" {
		vs, ok = fs[len(fs)-1].Values, true
	}
	if ok {
		ua = ""
		if len(vs) > 0 {
			ua = vs[0]
		}
	}
	// As Request.Write: an empty value drops the field, but one of only
	// spaces is written, trimmed to nothing.
	if ua != "" {
		b = appendField(b, "User-Agent", textproto.TrimString(ua))
	}
	// Field names are valid: the caller checked them (as
	// http.Transport does; Request.Write would drop an invalid one).
	switch method {
	case http.MethodPost, http.MethodPut, http.MethodPatch:
		b = append(b, "Content-Length: 0\r\n"...) // as the transfer writer
	}
	encoded := false // an Accept-Encoding or a Range with values: no gzip
	checked := spanOf(parsed)
	for k, vs := range req.Header {
		if lean {
			if !validFieldIn(k, vs, checked) {
				return b0, HeadInvalid
			}
			if (k == "Accept-Encoding" || k == "Range") && vs != nil {
				encoded = true
			}
		}
		switch k {
		case "Host", "User-Agent", "Content-Length", "Transfer-Encoding", "Trailer":
			continue
		}
		for _, v := range vs {
			// textproto.TrimString has nothing to trim unless the first
			// or the last byte is ASCII space, as almost no value's is.
			if n := len(v); n > 0 && (v[0] <= ' ' || v[n-1] <= ' ') {
				v = textproto.TrimString(v)
			}
			b = appendField(b, k, v)
		}
	}
	fs := beside.Fields
	for i := range fs {
		k, vs := fs[i].Name, fs[i].Values
		write := true
		switch k {
		case "Host", "User-Agent", "Content-Length", "Transfer-Encoding", "Trailer":
			write = false
		}
		if lean {
			// validFieldIn, inlined: its call was most of the cost of a
			// field of the client's, whose name and values are mostly
			// taken on trust.
			if (len(k) == 0 || !knownSpan.holds(k)) && !validNameBytes(k) {
				return b0, HeadInvalid
			}
			if (k == "Accept-Encoding" || k == "Range") && vs != nil {
				encoded = true
			}
		}
		for _, v := range vs {
			// Each value is checked where it is written, a field not
			// written too.
			if lean && !checked.holds(v) && !ValidFieldValue(v) {
				return b0, HeadInvalid
			}
			if !write {
				continue
			}
			// textproto.TrimString has nothing to trim unless the first
			// or the last byte is ASCII space, as almost no value's is.
			if n := len(v); n > 0 && (v[0] <= ' ' || v[n-1] <= ' ') {
				v = textproto.TrimString(v)
			}
			b = appendField(b, k, v)
		}
	}
	own := beside.Own
	for i := range own {
		k, vs := own[i].Name, own[i].Values
		if lean && (len(k) == 0 || !knownSpan.holds(k)) && !validNameBytes(k) { // as validFieldIn
			return b0, HeadInvalid
		}
		for _, v := range vs {
			// Each value is checked where it is written: an Own field is
			// never skipped, so no value goes unchecked.
			if lean && !checked.holds(v) && !ValidFieldValue(v) {
				return b0, HeadInvalid
			}
			if n := len(v); n > 0 && (v[0] <= ' ' || v[n-1] <= ' ') {
				v = textproto.TrimString(v) // as above
			}
			b = appendField(b, k, v)
		}
	}
	runtime.KeepAlive(parsed) // checked's values stay where they are
	res := HeadWritten
	if lean && !encoded && method != http.MethodHead {
		b = append(b, "Accept-Encoding: gzip\r\n"...)
		res = HeadGzip
	}
	return append(b, "\r\n"...), res
}

// HostMemo is the last host AppendRequestHead took for a caller: the
// host a request is sent with is mostly its destination's, the same
// string request after request, and a host equal to one that passed the
// checks passes them again. The zero value holds nothing.
type HostMemo struct{ host string }

// Field is a field a caller writes beside a request's map (Beside).
type Field struct {
	Name   string
	Values []string
}

// Beside are fields AppendRequestHead writes as if they were in the
// request's map: a caller that has them at hand (a proxy's copy of its
// client's fields, its forwarding fields) spares the map assignments, the
// walk over them, and their clearing afterwards. Names are canonical, each
// once, none of them in the map.
type Beside struct {
	// Fields are held to the rules of the map's, and a User-Agent among
	// them is the last one.
	Fields []Field
	// Own are only checked: none is a Host, User-Agent, Content-Length,
	// Transfer-Encoding, Trailer, Accept-Encoding or Range.
	Own []Field
}

// Map puts b's fields in h.
func (b Beside) Map(h http.Header) {
	for _, f := range b.Fields {
		h[f.Name] = f.Values
	}
	for _, f := range b.Own {
		h[f.Name] = f.Values
	}
}

// validField is the lean transport's rule for a request field: a token
// name, neither Expect nor Upgrade (http.Transport's to handle), values
// without a control byte but HTAB.
func validField(k string, vs []string) bool {
	return validFieldIn(k, vs, fieldSpan{})
}

// validFieldIn is validField, which the values that lie in checked and a
// name that lies in knownNames pass without a look at their bytes.
func validFieldIn(k string, vs []string, checked fieldSpan) bool {
	if (len(k) == 0 || !knownSpan.holds(k)) && !validNameBytes(k) {
		return false
	}
	for _, v := range vs {
		if !checked.holds(v) && !ValidFieldValue(v) {
			return false
		}
	}
	return true
}

// validNameBytes is the lean rule for a name (a token, neither Expect nor
// Upgrade) by a look at its bytes. A non-empty name that lies in
// knownNames passes it without the look: no slice of knownNames but the
// empty one fails it (TestKnownNamesTakeNoCheck). Kept out of line: the
// head writer's walks inline only the look at knownNames, which takes
// most names.
//
//go:noinline
func validNameBytes(k string) bool {
	switch len(k) {
	case 6:
		if k == "Expect" {
			return false
		}
	case 7:
		if k == "Upgrade" {
			return false
		}
	}
	return httpguts.ValidHeaderFieldName(k)
}

// fieldSpan is where a string lies that holds only bytes a field's value
// may (no control byte but HTAB), or a name's (token bytes): a string in
// it is a slice of it, so its bytes are too. That holds for a string
// that lies in the span as long as the span's own string is alive (which
// the caller keeps, runtime.KeepAlive): no other object can overlap its
// bytes, and Go makes a string only by slicing one or by copying bytes
// into new memory (unsafe.String aside, which nothing aims at a head's
// string or knownNames). For a parsed head the span holds more than values (the
// request line, colons, line ends), but each string a parser hands out
// (the target, a name, a value) lies within one line and holds no
// control byte, so each slice of one does not either. What a slice need
// not be is trimmed: AppendRequestHead still trims every value.
type fieldSpan struct{ lo, n uintptr }

func spanOf(s string) fieldSpan {
	return fieldSpan{uintptr(unsafe.Pointer(unsafe.StringData(s))), uintptr(len(s))}
}

// holds: s lies in f.
func (f fieldSpan) holds(s string) bool {
	off := uintptr(unsafe.Pointer(unsafe.StringData(s))) - f.lo
	return off < f.n && uintptr(len(s)) <= f.n-off
}

// ValidFields: every field of h passes the lean transport's rule.
func ValidFields(h http.Header) bool {
	for k, vs := range h {
		if !validField(k, vs) {
			return false
		}
	}
	return true
}

func appendField(b []byte, k, v string) []byte {
	b = append(b, k...)
	b = append(b, ": "...)
	b = append(b, v...)
	return append(b, "\r\n"...)
}

// WriteField writes "k: v\r\n" as one append to bw's buffer.
func WriteField(bw *bufio.Writer, k, v string) {
	if n := len(k) + len(v) + 4; n > bw.Available() && n <= bw.Size() {
		_ = bw.Flush() // an error stays in bw, as WriteString's would
	}
	b := bw.AvailableBuffer()
	b = append(b, k...)
	b = append(b, ": "...)
	b = append(b, v...)
	b = append(b, "\r\n"...)
	_, _ = bw.Write(b)
}

func ctlByte(s string) bool {
	for i := 0; i < len(s); i++ {
		if b := s[i]; b < ' ' || b == 0x7f {
			return true
		}
	}
	return false
}

// ReadResponseHead parses a response head from br as http.ReadResponse
// would, for the case it handles: "HTTP/1.1", a final status other than
// 204 and 304, to a request other than HEAD, CRLF line ends, token field
// names, valid field values, no folded line, no Transfer-Encoding, Trailer
// or Pragma field, and exactly one Content-Length, all of it within br's
// buffer. It returns nil, consuming nothing, for anything else (and when
// the connection failed before a whole head came). The body reads as
// http.ReadResponse's does: io.ErrUnexpectedEOF when the connection ends
// early, io.EOF with the last bytes.
func ReadResponseHead(br *bufio.Reader, req *http.Request) (*http.Response, error) {
	lr, err := ReadHead(br, req, nil, nil)
	if lr == nil {
		return nil, err
	}
	return &lr.Response, err
}

// Resp holds a response's parts in one allocation: the Response and its
// length-delimited body.
type Resp struct {
	Response http.Response
	lb       lengthBody
	// HopByHop: the head had a hop-by-hop field (RFC 2616's list, as
	// ReverseProxy's; a Connection field ReadHead removed counts), so a
	// proxy has some to remove; false, it has none.
	HopByHop bool
}

// Fields is a header map and the slots of its values that lean
// responses and requests reuse, one after another; a response's strings
// stay its own.
type Fields struct {
	h    http.Header
	vals []string
	// names is ReadHead's scratch: the name of the field in each slot
	// (slices of the head, as the values are).
	names []string
	// head is the string ReadHead parsed the map's fields from, "" when
	// the map is not a parsed head's (Head).
	head string
	// list: ReadHead is to leave the next head's fields as a list when
	// it may (KeepList); listed: it did, names[:n] and vals[:n] are the
	// fields in the head's order, and the map holds none of them.
	list, listed bool
	n            int
}

// KeepList asks ReadHead to leave the next head's fields in s as a list
// (Listed), without the map, unless the head has a field a holder of a
// response removes or changes as a rule (a hop-by-hop one, a
// Content-Encoding the lean transport may undo): a caller that hands
// the fields to a writer as they are spares the map's assignments, its
// walk and its clearing. The caller makes the map (Map) before anything
// else reads the response's fields.
func (s *Fields) KeepList() { s.list = true }

// Listed: s holds a head's fields as a list (KeepList), which List and
// TradeList give and Map puts in the map. None of them is a hop-by-hop
// field, a Transfer-Encoding, Trailer or Content-Encoding, and one is
// the Content-Length; a name may come more than once. Safe on a nil s.
func (s *Fields) Listed() bool { return s != nil && s.listed }

// List is the listed fields: names[i]'s value is values[i].
func (s *Fields) List() (names, values []string) {
	if !s.listed {
		return nil, nil
	}
	return s.names[:s.n], s.vals[:s.n]
}

// Map puts the listed fields in s's map, as ReadHead would have, and
// returns it (the response's Header from then on).
func (s *Fields) Map() http.Header {
	h := s.h
	if h == nil || len(h) > MaxFields {
		h = make(http.Header, s.n)
		s.h = h
	} else {
		clear(h)
	}
	s.listed = false
	names, vals := s.names[:s.n], s.vals[:s.n]
	// Each field a new name in its own slot (slot i is field i) until a
	// name comes again: the map's size tells it, whose assignment
	// replaced the name's values. They are gathered from the slots, and
	// from then on each name is looked up.
	repeated := false
	for i, k := range names {
		if repeated {
			if old := h[k]; old != nil {
				h[k] = append(old, vals[i]) // old's capacity ends at its slot, or is its own
				continue
			}
			h[k] = vals[i : i+1 : i+1]
			continue
		}
		h[k] = vals[i : i+1 : i+1]
		if len(h) == i {
			repeated = true
			var vs []string
			for j, n := range names[:i+1] {
				if n == k {
					vs = append(vs, vals[j])
				}
			}
			h[k] = vs
		}
	}
	return h
}

// TradeList gives s's listed fields and their slots to the caller, for
// names and vals, slots nothing else refers to: a writer of the fields
// takes them whole instead of copying them, and s goes on with the other
// pair. s holds no fields afterwards.
func (s *Fields) TradeList(names, vals []string) ([]string, []string) {
	on, ov := s.List()
	s.names, s.vals, s.head, s.listed, s.n = names, vals, "", false, 0
	return on, ov
}

// Head is the string whose slices are the values ReadHead put in s's map,
// each holding no CR, LF or other control byte but HTAB, or "" when the
// map holds no parsed head: a writer of the map's fields takes a value
// that lies in it (Within) as clean of line breaks. A value a transform
// re-sliced may still have a space at either end.
func (s *Fields) Head() string { return s.head }

// Within: v lies in head, so it is a slice of one of the strings a parser
// handed out of head (fieldSpan.holds says why), as long as the caller
// keeps head alive while it asks.
func Within(head, v string) bool { return spanOf(head).holds(v) }

// KnownName: k is a non-empty slice of knownNames, so a valid field name.
func KnownName(k string) bool { return len(k) > 0 && knownSpan.holds(k) }

// nameSlots is n slots for ReadHead's names, s's own when they will do.
func (s *Fields) nameSlots(n int) []string {
	if cap(s.names) < n {
		s.names = make([]string, max(n, 8))
	}
	return s.names[:n]
}

// requestHeaders holds the field maps of parked connections' request
// heads (Park), for their next heads.
var requestHeaders sync.Pool

// Park lets go of s's map (to requestHeaders, unless a large head grew
// it) and of the strings its value slots hold, while its connection
// waits; Get takes a map from the pool again.
func (s *Fields) Park() {
	if s.h != nil && len(s.h) <= MaxFields {
		clear(s.h)
		requestHeaders.Put(s.h)
	}
	s.h, s.head = nil, ""
	clear(s.vals)
}

// Holds says whether h is s's map.
func (s *Fields) Holds(h http.Header) bool {
	return s.h != nil && mapPointer(s.h) == mapPointer(h)
}

// mapPointer is h's identity (a map value is a pointer).
func mapPointer(h http.Header) unsafe.Pointer { return *(*unsafe.Pointer)(unsafe.Pointer(&h)) }

// Trade gives s's map and value slots to the caller for h and vals, an
// empty map and slots nothing else refers to: a holder of a response's
// fields takes them whole instead of copying them, and s goes on with
// the other pair.
func (s *Fields) Trade(h http.Header, vals []string) (http.Header, []string) {
	oh, ov := s.h, s.vals
	s.h, s.vals, s.head = h, vals, ""
	return oh, ov
}

// Get is an empty map and n value slots, s's own when they will do.
func (s *Fields) Get(n int) (http.Header, []string) {
	if s == nil {
		return make(http.Header, n), make([]string, n)
	}
	s.head, s.listed = "", false
	if s.h == nil && cap(s.vals) >= n {
		// Parked (Park): a map from the pool.
		if h, ok := requestHeaders.Get().(http.Header); ok {
			s.h = h
			return s.h, s.vals[:n]
		}
	}
	if s.h == nil || len(s.h) > MaxFields || cap(s.vals) < n {
		s.h, s.vals = make(http.Header, n), make([]string, max(n, 8))
	} else {
		clear(s.h)
	}
	return s.h, s.vals[:n]
}

// ReadHead is ReadResponseHead returning the response's Resp
// (into, when it is not nil), its fields in s's containers when s is not
// nil: in its map, or as a list when s was asked to keep one (KeepList),
// then the Response's Header is nil until the caller makes it (Map).
func ReadHead(br *bufio.Reader, req *http.Request, s *Fields, into *Resp) (*Resp, error) {
	list := false
	if s != nil {
		list, s.list, s.listed = s.list, false, false // asked for this head alone, taken or not
	}
	if req.Method == http.MethodHead {
		return nil, nil
	}
	head, n := peekHead(br)
	if head == nil {
		return nil, nil
	}
	// Status line: "HTTP/1.1 DDD[ reason]".
	eol := bytes.IndexByte(head, '\n')
	if eol < 1 || head[eol-1] != '\r' {
		return nil, nil
	}
	line := head[:eol-1]
	if len(line) < 12 || string(line[:9]) != "HTTP/1.1 " || (len(line) > 12 && line[12] != ' ') {
		return nil, nil
	}
	code := 0
	for _, c := range line[9:12] {
		if c < '0' || c > '9' {
			return nil, nil
		}
		code = code*10 + int(c-'0')
	}
	if code < 200 || code == http.StatusNoContent || code == http.StatusNotModified || ctlBytes(line) {
		return nil, nil
	}
	all := head[eol+1:]
	if s == nil {
		s = new(Fields)
	}
	s.head = ""
	names := s.nameSlots(n)
	if cap(s.vals) < n {
		s.vals = make([]string, max(n, 8))
	}
	vals := s.vals[:n]
	// One string holds every field of the head; names and values are
	// slices of it (one allocation, where textproto makes one per value).
	var blk string
	if n > 0 {
		blk = string(all)
	}
	var clv string
	haveCL, closing, hop, conn, encoded := false, false, false, false, false
	fr := FieldReader{all: all, blk: blk}
	nf := 0 // the fields, each in its slot of names and vals
	for ; ; nf++ {
		key, value, done, ok := fr.Next(false)
		if !ok {
			return nil, nil
		}
		if done {
			break
		}
		switch key {
		case "Transfer-Encoding", "Trailer", "Pragma":
			return nil, nil
		case "Content-Length":
			if haveCL {
				return nil, nil
			}
			clv, haveCL = value, true
		case "Content-Encoding":
			encoded = true
		case "Connection":
			hop, conn = true, true
		case "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization", "Te", "Upgrade":
			hop = true
		}
		names[nf], vals[nf] = key, value
	}
	if len(clv) == 0 || len(clv) > 18 {
		return nil, nil // none (a body to the connection's end), or too long for ParseUint's 63 bits
	}
	var length int64
	for _, c := range []byte(clv) {
		if c < '0' || c > '9' {
			return nil, nil
		}
		length = length*10 + int64(c-'0')
	}
	s.n = nf
	var h http.Header
	if list && !hop && !encoded {
		s.listed = true
	} else {
		h = s.Map()
	}
	if conn && httpguts.HeaderValuesContainsToken(h["Connection"], "close") {
		delete(h, "Connection") // as shouldClose removes it
		closing = true
	}
	lr := into
	if lr == nil {
		lr = new(Resp)
	}
	*lr = Resp{Response: http.Response{
		Status: statusText(line[9:]), StatusCode: code,
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: h, ContentLength: length, Close: closing, Request: req,
	}, HopByHop: hop}
	if _, err := br.Discard(len(head)); err != nil {
		return nil, err
	}
	if length == 0 {
		lr.Response.Body = http.NoBody
	} else {
		lr.lb = lengthBody{br: br, n: length}
		lr.Response.Body = &lr.lb
	}
	s.head = blk // every field line read: each value held to valueEnd's rule
	return lr, nil
}

// FieldReader walks the field lines of a head (all: after the start line,
// through the blank line) as both lean parsers take them: CRLF line ends,
// token names canonicalised as textproto does, values trimmed of spaces
// and tabs, each name and value a slice of blk, where blk[off+i] is
// all[i].
type FieldReader struct {
	all []byte
	blk string
	off int
	pos int
}

// maxName is the longest field name FieldReader takes.
const maxName = 64

// next is the next field, or done at the blank line; ok is false for a
// line neither parser takes (a bare LF, no colon, a name that is not a
// token or is longer than 64 bytes, a value byte it refuses: a control
// byte other than HTAB, and with ascii also any byte above 0x7e).
//
// It walks each line once: the name up to its first byte that is not a
// token byte, which must be the colon, then the value up to its first
// byte the rule refuses, which must be the CR of the line's CRLF (a value
// holds no CR or LF, so that is where the line ends).
func (f *FieldReader) Next(ascii bool) (key, value string, done, ok bool) {
	all := f.all
	start := f.pos
	if start >= len(all)-2 {
		return "", "", true, true
	}
	key = knownName(all[start:])
	n, canonical := len(key), true
	if n == 0 {
		n, canonical = nameWalk(all[start:])
	}
	colon := start + n
	if n == 0 || n > maxName || colon >= len(all) || all[colon] != ':' {
		return "", "", false, false
	}
	end := valueEnd(all, colon+1, ascii)
	if end < 0 {
		return "", "", false, false
	}
	f.pos = end + 2
	b := f.off
	switch {
	case key != "":
	case canonical:
		key = f.blk[b+start : b+colon]
	default:
		key = canonicalCopy(all[start:colon])
	}
	vs, ve := colon+1, end
	for vs < ve && (all[vs] == ' ' || all[vs] == '\t') {
		vs++
	}
	for ve > vs && (all[ve-1] == ' ' || all[ve-1] == '\t') {
		ve--
	}
	return key, f.blk[b+vs : b+ve], false, true
}

// AddField appends value to h[key], taking a one-value slice from vals
// (the head's values share one array); it returns what is left of vals.
func AddField(h http.Header, vals []string, key, value string) []string {
	if old := h[key]; old != nil {
		h[key] = append(old, value)
		return vals
	}
	vals[0] = value
	h[key] = vals[:1:1]
	return vals[1:]
}

// FieldLines is at least the number of field lines in all (a head after
// its start line, through the blank line): its line ends less the blank
// line's, exact when every line ends in CRLF, and more than the fields
// FieldReader takes otherwise. A single byte is what bytes.Count counts
// without a search per match.
func FieldLines(all []byte) int {
	return bytes.Count(all, lf) - 1
}

var lf = []byte{'\n'}

// PeekHead returns the buffered bytes of a whole response head (through
// its blank line) without consuming them; nil when the head does not fit
// in br's buffer or the connection failed before it was complete. The
// failure is not lost: the connection's reader keeps returning it, so
// http.ReadResponse, reading the same bytes, reports it as it would have.
func PeekHead(br *bufio.Reader) []byte {
	head, _ := peekHead(br)
	return head
}

// peekHead is PeekHead and the head's FieldLines, from the same scan.
func peekHead(br *bufio.Reader) ([]byte, int) {
	want := 1
	for {
		buf, err := br.Peek(want)
		if len(buf) > 0 {
			buf, _ = br.Peek(br.Buffered())
			if i, n := HeadLines(buf); i >= 0 {
				if i < 4 || string(buf[i-4:i]) != "\r\n\r\n" {
					return nil, 0 // a bare LF ends the head: http.ReadResponse reads it
				}
				return buf[:i], n
			}
		}
		if err != nil || br.Buffered() >= br.Size() {
			return nil, 0
		}
		want = br.Buffered() + 1 // wait for more
	}
}

var CRLFCRLF = []byte("\r\n\r\n")

// HeadEnd is the length of the head (a request's or a response's) at the
// start of buf, through the first empty line as net/http finds it (LF or
// CRLF line ends); -1 when buf holds no empty line yet. Looking for
// CRLFCRLF alone waited for a head a backend had already ended with bare
// LFs, until the activity timeout.
func HeadEnd(buf []byte) int {
	end, _ := HeadLines(buf)
	return end
}

// HeadLines is HeadEnd and the head's FieldLines (of what follows its
// start line), counted in the same scan: the line ends it passes are
// the ones FieldLines would count again with bytes.Count.
func HeadLines(buf []byte) (end, fields int) {
	start, lines := 0, 0
	for {
		i := bytes.IndexByte(buf[start:], '\n')
		if i < 0 {
			return -1, 0
		}
		if i == 0 || i == 1 && buf[start] == '\r' {
			return start + i + 1, lines - 1
		}
		start += i + 1
		lines++
	}
}

// Classes of a name's bytes (keyClass): a letter in either case, a dash,
// any token byte; 0 is a byte that is not a token's.
const (
	kLower = 1 << iota
	kUpper
	kDash
	kToken
)

var keyClass = func() (t [256]uint8) {
	for c := range 256 {
		if !httpguts.IsTokenRune(rune(c)) {
			continue
		}
		t[c] = kToken
		switch {
		case 'a' <= c && c <= 'z':
			t[c] |= kLower
		case 'A' <= c && c <= 'Z':
			t[c] |= kUpper
		case c == '-':
			t[c] |= kDash
		}
	}
	return t
}()

// nameWalk is the length of the run of token bytes at the start of b, and
// whether it is canonical as textproto makes it (a letter upper case at
// the start and after each dash, lower case elsewhere).
func nameWalk(b []byte) (int, bool) {
	// The case that is wrong at the next byte: lower at the start and
	// after a dash, upper elsewhere (kDash>>2 is 1).
	wrong, bad := uint8(kLower), uint8(0)
	for i, c := range b {
		k := keyClass[c]
		if k == 0 {
			return i, bad == 0
		}
		bad |= k & wrong
		wrong = kUpper >> (k & kDash >> 2)
	}
	return len(b), bad == 0
}

// knownNames holds every name knownName returns, each a slice of it, so
// any slice of it is made of token bytes: a request field's name that
// lies in it is not checked again (fieldSpan.holds). The names the proxy
// itself sets on every request follow (TableName).
var knownNames = parserNames + ownNames

const (
	parserNames = "Accept-EncodingAccept-LanguageAuthorizationAcceptContent-EncodingContent-LengthCache-ControlContent-TypeConnectionCookieDateExpiresEtagHostIf-None-MatchKeep-AliveLast-ModifiedLocationOriginRefererSet-CookieServerTraceparentUser-AgentVaryX-Forwarded-For"
	ownNames    = "X-Forwarded-ProtoX-Forwarded-HostX-Forwarded-PortX-Original-HostX-Original-UrlX-Tether-Trace-Id"
)

var knownSpan = spanOf(knownNames)

// TableName is knownNames' slice that reads n, for a package that sets a
// field of that name on every request or response: a map key made of it
// is taken on trust as a valid name where a head is written (KnownName).
// It panics when n is not in the table, so a caller learns it at init.
func TableName(n string) string {
	i := strings.Index(knownNames, n)
	if i < 0 || n == "" {
		panic("h1wire: " + n + " is not in the table of known names")
	}
	return knownNames[i : i+len(n)]
}

// name is knownNames' slice that reads n.
func name(n string) string {
	i := strings.Index(knownNames, n)
	return knownNames[i : i+len(n)]
}

var (
	nameAcceptEncoding  = name("Accept-Encoding")
	nameAcceptLanguage  = name("Accept-Language")
	nameAuthorization   = name("Authorization")
	nameAccept          = name("Accept")
	nameContentEncoding = name("Content-Encoding")
	nameContentLength   = name("Content-Length")
	nameCacheControl    = name("Cache-Control")
	nameContentType     = name("Content-Type")
	nameConnection      = name("Connection")
	nameCookie          = name("Cookie")
	nameDate            = name("Date")
	nameExpires         = name("Expires")
	nameEtag            = name("Etag")
	nameHost            = name("Host")
	nameIfNoneMatch     = name("If-None-Match")
	nameKeepAlive       = name("Keep-Alive")
	nameLastModified    = name("Last-Modified")
	nameLocation        = name("Location")
	nameOrigin          = name("Origin")
	nameReferer         = name("Referer")
	nameSetCookie       = name("Set-Cookie")
	nameServer          = name("Server")
	nameTraceparent     = name("Traceparent")
	nameUserAgent       = name("User-Agent")
	nameVary            = name("Vary")
	nameXForwardedFor   = name("X-Forwarded-For")
)

// knownName is the common canonical name b starts with when its colon
// follows it, "" for any other (which nameWalk then reads). Each is
// compared with a constant in a few words, where the walk takes each
// byte, and returned as its slice of knownNames.
func knownName(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	switch b[0] {
	case 'A':
		if len(b) > 15 && b[15] == ':' && string(b[:15]) == "Accept-Encoding" {
			return nameAcceptEncoding
		}
		if len(b) > 15 && b[15] == ':' && string(b[:15]) == "Accept-Language" {
			return nameAcceptLanguage
		}
		if len(b) > 13 && b[13] == ':' && string(b[:13]) == "Authorization" {
			return nameAuthorization
		}
		if len(b) > 6 && b[6] == ':' && string(b[:6]) == "Accept" {
			return nameAccept
		}
	case 'C':
		if len(b) > 16 && b[16] == ':' && string(b[:16]) == "Content-Encoding" {
			return nameContentEncoding
		}
		if len(b) > 14 && b[14] == ':' && string(b[:14]) == "Content-Length" {
			return nameContentLength
		}
		if len(b) > 13 && b[13] == ':' && string(b[:13]) == "Cache-Control" {
			return nameCacheControl
		}
		if len(b) > 12 && b[12] == ':' && string(b[:12]) == "Content-Type" {
			return nameContentType
		}
		if len(b) > 10 && b[10] == ':' && string(b[:10]) == "Connection" {
			return nameConnection
		}
		if len(b) > 6 && b[6] == ':' && string(b[:6]) == "Cookie" {
			return nameCookie
		}
	case 'D':
		if len(b) > 4 && b[4] == ':' && string(b[:4]) == "Date" {
			return nameDate
		}
	case 'E':
		if len(b) > 7 && b[7] == ':' && string(b[:7]) == "Expires" {
			return nameExpires
		}
		if len(b) > 4 && b[4] == ':' && string(b[:4]) == "Etag" {
			return nameEtag
		}
	case 'H':
		if len(b) > 4 && b[4] == ':' && string(b[:4]) == "Host" {
			return nameHost
		}
	case 'I':
		if len(b) > 13 && b[13] == ':' && string(b[:13]) == "If-None-Match" {
			return nameIfNoneMatch
		}
	case 'K':
		if len(b) > 10 && b[10] == ':' && string(b[:10]) == "Keep-Alive" {
			return nameKeepAlive
		}
	case 'L':
		if len(b) > 13 && b[13] == ':' && string(b[:13]) == "Last-Modified" {
			return nameLastModified
		}
		if len(b) > 8 && b[8] == ':' && string(b[:8]) == "Location" {
			return nameLocation
		}
	case 'O':
		if len(b) > 6 && b[6] == ':' && string(b[:6]) == "Origin" {
			return nameOrigin
		}
	case 'R':
		if len(b) > 7 && b[7] == ':' && string(b[:7]) == "Referer" {
			return nameReferer
		}
	case 'S':
		if len(b) > 10 && b[10] == ':' && string(b[:10]) == "Set-Cookie" {
			return nameSetCookie
		}
		if len(b) > 6 && b[6] == ':' && string(b[:6]) == "Server" {
			return nameServer
		}
	case 'T':
		if len(b) > 11 && b[11] == ':' && string(b[:11]) == "Traceparent" {
			return nameTraceparent
		}
	case 'U':
		if len(b) > 10 && b[10] == ':' && string(b[:10]) == "User-Agent" {
			return nameUserAgent
		}
	case 'V':
		if len(b) > 4 && b[4] == ':' && string(b[:4]) == "Vary" {
			return nameVary
		}
	case 'X':
		if len(b) > 15 && b[15] == ':' && string(b[:15]) == "X-Forwarded-For" {
			return nameXForwardedFor
		}
	}
	return ""
}

// canonicalCopy is textproto.CanonicalMIMEHeaderKey for a token name that
// is not canonical: interned when it is one of the common names, else a
// new string.
func canonicalCopy(name []byte) string {
	var kb [maxName]byte
	buf := kb[:0]
	upper := true
	for _, c := range name {
		switch {
		case upper && 'a' <= c && c <= 'z':
			c -= 'a' - 'A'
		case !upper && 'A' <= c && c <= 'Z':
			c += 'a' - 'A'
		}
		buf = append(buf, c)
		upper = c == '-'
	}
	if s, ok := commonKeys[string(buf)]; ok {
		return s
	}
	return string(buf)
}

var commonKeys = func() map[string]string {
	m := map[string]string{}
	for _, k := range []string{
		"Accept-Ranges", "Age", "Cache-Control", "Connection", "Content-Encoding",
		"Content-Language", "Content-Length", "Content-Type", "Date", "Etag",
		"Expires", "Keep-Alive", "Last-Modified", "Location", "Server", "Set-Cookie",
		"Strict-Transport-Security", "Vary", "Via", "Www-Authenticate", "X-Powered-By",
		"Access-Control-Allow-Origin", "X-Content-Type-Options", "X-Frame-Options",
		"X-Request-Id", "Traceparent",
	} {
		m[k] = k
	}
	return m
}()

// statusText is the response's Status ("200 OK"), interned for the
// common ones.
func statusText(s []byte) string {
	switch string(s) {
	case "200 OK":
		return "200 OK"
	case "404 Not Found":
		return "404 Not Found"
	}
	return string(s)
}

// validFieldValueByte is textproto's rule: VCHAR, SP, HTAB, obs-text.
func validFieldValueByte(c byte) bool {
	return c >= 0x20 && c != 0x7f || c == '\t'
}

// ctlBytes reports a control byte other than HTAB (the status line's
// reason phrase is otherwise free text).
func ctlBytes(b []byte) bool {
	for _, c := range b {
		if c < 0x20 && c != '\t' || c == 0x7f {
			return true
		}
	}
	return false
}

// lengthBody is a Content-Length body read from the connection's reader.
type lengthBody struct {
	br  *bufio.Reader
	n   int64
	err error
}

func (b *lengthBody) Read(p []byte) (int, error) {
	if b.err != nil {
		return 0, b.err
	}
	if b.n <= 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > b.n {
		p = p[:b.n]
	}
	n, err := b.br.Read(p)
	b.n -= int64(n)
	switch {
	case err == io.EOF:
		err = io.ErrUnexpectedEOF
	case err == nil && b.n == 0:
		err = io.EOF
	}
	if err != nil {
		b.err = err
	}
	return n, err
}

func (b *lengthBody) Close() error { return nil }

// MaxFields: a map grown past this by one large head is not kept.
const MaxFields = 64

// NewFieldReader reads the field lines all, whose bytes blk holds from
// off (blk[off+i] is all[i]).
func NewFieldReader(all []byte, blk string, off int) FieldReader {
	return FieldReader{all: all, blk: blk, off: off}
}

// valueEnd is the index of the CR of the CRLF that ends the field value
// starting at b[i]: the first byte from i the value's rule refuses
// (validFieldValueByte, and with ascii none above 0x7e), when it is a CR
// before an LF; -1 when it is any other. Eight bytes at a time: the
// lowest byte a word's test flags is exactly the first such byte (the
// tests' borrows run upwards only), and a tab there goes on after it.
func valueEnd(b []byte, i int, ascii bool) int {
	for i < len(b) {
		if i+8 <= len(b) {
			x := swar.WordBytes(b[i:])
			bad := swar.Below(x, 0x20) | swar.Has(x, 0x7f)
			if ascii {
				bad |= swar.NonASCII(x)
			}
			if bad == 0 {
				i += 8
				continue
			}
			i += bits.TrailingZeros64(bad) >> 3
		}
		switch c := b[i]; {
		case c == '\t' || 0x20 <= c && c < 0x7f || c >= 0x80 && !ascii:
			i++
		case c == '\r' && i+1 < len(b) && b[i+1] == '\n':
			return i
		default:
			return -1
		}
	}
	return -1
}

// ValidFieldValue is httpguts.ValidHeaderFieldValue (no control byte but
// HTAB), eight bytes at a time: a word with no byte below 0x20 and none
// equal to 0x7f is valid as a whole; a word with one goes byte by byte
// from there, where a tab is told from the others. The bytes after the
// last whole word are the last eight bytes' word (overlapping the one
// before), and a value of four to seven bytes is one word of its first
// and its last four: most values are short, and a byte at a time was
// most of their cost.
func ValidFieldValue(v string) bool {
	n, i := len(v), 0
	switch {
	case n >= 8:
		for ; i+8 <= n; i += 8 {
			if x := swar.Word(v[i:]); swar.Below(x, 0x20)|swar.Has(x, 0x7f) != 0 {
				break
			}
		}
		if i == n {
			return true
		}
		if x := swar.Word(v[n-8:]); i > n-8 && swar.Below(x, 0x20)|swar.Has(x, 0x7f) == 0 {
			return true
		}
		i = min(i, n-8)
	case n >= 4:
		x := uint64(swar.Word32(v)) | uint64(swar.Word32(v[n-4:]))<<32
		if swar.Below(x, 0x20)|swar.Has(x, 0x7f) == 0 {
			return true
		}
	}
	for ; i < n; i++ {
		if !validFieldValueByte(v[i]) {
			return false
		}
	}
	return true
}
