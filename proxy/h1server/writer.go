package h1server

import (
	"bufio"
	"fmt"
	"net/http"
	"net/textproto"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/tether-proxy/tether/proxy/internal/h1wire"
	"github.com/tether-proxy/tether/proxy/internal/httpdate"
	"github.com/tether-proxy/tether/proxy/internal/swar"
	"golang.org/x/net/http/httpguts"
)

// h1Writer is the http.ResponseWriter of Server's requests, reused by
// the connection. It writes what net/http's response writer writes for
// the same handler calls, for a GET in HTTP/1.1 with keep-alives on.
type h1Writer struct {
	c      *h1Conn
	req    *http.Request
	header http.Header
	// snap is the header as it was at WriteHeader, when the head is
	// written later (net/http's clone); nil when the head went out at
	// WriteHeader already or the handler never touched the header.
	snap http.Header
	// vals are the value slots of a header map taken with AdoptFields:
	// the writer's until it trades them on with the map. With list, the
	// header is the fields names[i]: vals[i] (in the head's order, a name
	// maybe more than once) and the map is empty, until Header puts them
	// in it.
	vals  []string
	names []string
	list  bool
	// parsed is the lean parser's string of the adopted fields
	// (h1wire.Fields.Head), kept alive here while the head is written: a
	// value in it has no line break to replace.
	parsed string
	// also is AdoptFields' field beside the map, a head's field in place
	// of the map's of its name; no name when there is none.
	also h1wire.Field
	// ctype is the Content-Type values the final WriteHeader's walk of the
	// header found, when typeScanned (ScannedType).
	ctype         []string
	typeScanned   bool
	wroteHeader   bool // a final status was set
	committed     bool // the head is in the connection's buffer
	chunking      bool
	handlerDone   bool
	closeAfter    bool
	status        int
	contentLength int64
	written       int64
	trailers      []string
	// pending holds the body written before the head is committed, as
	// net/http's 2 KiB buffer in front of its chunk writer; pbuf is its
	// array, from pendingBufs while a response needs one (a response
	// whose head went out at WriteHeader never does).
	pending []byte
	pbuf    *[bufferBeforeChunking]byte
	werr    error
	scratch [64]byte
	sbuf    [8]byte
}

const bufferBeforeChunking = 2048

func (w *h1Writer) reset(req *http.Request) {
	hdr := w.header
	if hdr == nil || len(hdr) > 64 {
		hdr = make(http.Header, 16)
	}
	*w = h1Writer{c: w.c, req: req, header: hdr, vals: w.vals, names: w.names, contentLength: -1, trailers: w.trailers[:0]}
}

// AdoptFields takes f's map and value slots as the response's header,
// giving f the writer's empty ones, when the handler has set no field and
// no status yet: a proxy's backend fields need no copy. Their names must
// be canonical already, as a copy through Header.Add would make them.
// When f holds its fields as a list (h1wire.Fields.Listed), the writer
// takes the list and its slots, and writes the head from it; Header puts
// them in the map first.
//
// also, when it has a name, is one more field of the header, kept beside
// the map: the head has it in place of a field of its name in the map, as
// if it had been assigned to the map, which spares the assignment.
func (w *h1Writer) AdoptFields(f *h1wire.Fields, also h1wire.Field) bool {
	if w.wroteHeader || len(w.header) != 0 {
		return false
	}
	w.parsed = f.Head()
	if f.Listed() {
		w.names, w.vals = f.TradeList(w.names, w.vals)
		w.list = true
	} else {
		w.header, w.vals = f.Trade(w.header, w.vals)
	}
	w.also = also
	return true
}

// unlist puts the listed fields in the header's map, as Map does.
func (w *h1Writer) unlist() {
	w.list = false
	h := w.header
	for i, k := range w.names {
		if old, ok := h[k]; ok {
			h[k] = append(old, w.vals[i]) // old's capacity ends at its slot, or is its own
		} else {
			h[k] = w.vals[i : i+1 : i+1]
		}
	}
}

// ScannedType is the header's Content-Type values as the final
// WriteHeader found them in its walk (of a list: the first alone), and
// whether it made that walk: a caller that changed nothing in the header
// since (a proxy deciding, after the head, whether to flush an event
// stream) needs no look-up of its own.
func (w *h1Writer) ScannedType() ([]string, bool) { return w.ctype, w.typeScanned }

var pendingBufs = sync.Pool{New: func() any { return new([bufferBeforeChunking]byte) }}

// release returns the pending buffer at the response's end.
func (w *h1Writer) release() {
	if w.pbuf != nil {
		pendingBufs.Put(w.pbuf)
		w.pbuf, w.pending = nil, nil
	}
}

func (w *h1Writer) Header() http.Header {
	if w.list {
		w.unlist()
	}
	if w.snap == nil && w.wroteHeader && !w.committed {
		w.snap = w.header.Clone()
	}
	return w.header
}

func (w *h1Writer) WriteHeader(code int) {
	if w.wroteHeader {
		w.c.s.logf("http: superfluous response.WriteHeader call")
		return
	}
	if code < 100 || code > 999 {
		panic(fmt.Sprintf("invalid WriteHeader code %v", code))
	}
	if code >= 100 && code <= 199 && code != http.StatusSwitchingProtocols {
		if w.list {
			w.unlist()
		}
		bw := w.c.bw
		writeStatus(bw, code, w.sbuf[:])
		writeFields(bw, w.header, excludeNoBody, w.c)
		bw.WriteString("\r\n")
		w.noteErr(bw.Flush())
		return
	}
	w.wroteHeader = true
	w.status = code
	// The walk commit makes also finds the fields decided on here.
	var s headScan
	if w.list {
		w.scanList(&s)
	} else {
		w.scanHead(&s, w.header)
	}
	w.ctype, w.typeScanned = s.ctype, true
	cl := s.cl
	if cl != "" {
		if v, err := strconv.ParseInt(cl, 10, 64); err == nil && v >= 0 {
			w.contentLength = v
		}
	}
	// When nothing written later can change the head (a length, a type
	// or an encoding, no Transfer-Encoding), it goes out now: the same
	// bytes as later, without net/http's clone of the header.
	if w.contentLength != -1 && s.te == "" && (s.haveType || s.ce != "" || !bodyAllowedForStatus(code)) {
		w.commitScanned(nil, &s)
		return
	}
	clear(s.keys)
	w.c.rq.keys = s.keys[:0]
	if w.list {
		w.unlist() // commit walks the snapshot's map
	}
	w.snap = w.header.Clone()
	if cl != "" && w.contentLength == -1 {
		// As net/http: dropped from the handler's map, not from the
		// snapshot taken just before.
		w.c.s.logf("http: invalid Content-Length of %q", cl)
		delete(w.header, "Content-Length")
	}
}

func (w *h1Writer) bodyAllowed() bool { return bodyAllowedForStatus(w.status) }

func (w *h1Writer) Write(p []byte) (int, error) {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	if len(p) == 0 {
		return 0, nil
	}
	if !w.bodyAllowed() {
		return 0, http.ErrBodyNotAllowed
	}
	w.written += int64(len(p))
	if w.contentLength != -1 && w.written > w.contentLength {
		return 0, http.ErrContentLength
	}
	if w.committed && len(w.pending) == 0 && !w.chunking {
		return w.c.bw.Write(p)
	}
	// net/http's bufio.Writer of 2 KiB: what does not fit flushes it.
	if w.pbuf == nil {
		w.pbuf = pendingBufs.Get().(*[bufferBeforeChunking]byte)
		w.pending = w.pbuf[:0]
	}
	n := 0
	for len(p) > cap(w.pending)-len(w.pending) {
		if len(w.pending) == 0 {
			w.out(p)
			return n + len(p), w.werr
		}
		k := copy(w.pending[len(w.pending):cap(w.pending)], p)
		w.pending = w.pending[:len(w.pending)+k]
		n += k
		p = p[k:]
		w.flushPending()
	}
	w.pending = append(w.pending, p...)
	return n + len(p), w.werr
}

// out sends body bytes to the chunk writer: commit first, then a chunk.
func (w *h1Writer) out(p []byte) {
	if !w.committed {
		w.commit(p)
	}
	bw := w.c.bw
	if w.chunking {
		bw.Write(strconv.AppendInt(w.scratch[:0], int64(len(p)), 16))
		bw.WriteString("\r\n")
	}
	_, err := bw.Write(p)
	if w.chunking && err == nil {
		_, err = bw.WriteString("\r\n")
	}
	w.noteErr(err)
}

func (w *h1Writer) flushPending() {
	if len(w.pending) > 0 {
		w.out(w.pending)
		w.pending = w.pending[:0]
	}
}

func (w *h1Writer) noteErr(err error) {
	if err != nil && w.werr == nil {
		w.werr = err
		_ = w.c.rwc.Close()
	}
}

// FlushError sends what was written so far (http.ResponseController).
func (w *h1Writer) FlushError() error {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	w.flushPending()
	if !w.committed {
		w.commit(nil)
	}
	w.noteErr(w.c.bw.Flush())
	return w.werr
}

func (w *h1Writer) Flush() { _ = w.FlushError() }

// SetWriteDeadline sets the connection's write deadline, as net/http's
// response does for http.ResponseController; it may be called from another
// goroutine while the handler runs (a deadline in the past ends a write
// blocked on a client that does not read).
func (w *h1Writer) SetWriteDeadline(t time.Time) error { return w.c.rwc.SetWriteDeadline(t) }

// finish ends the response as net/http's finishRequest does.
func (w *h1Writer) finish() {
	w.handlerDone = true
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	w.flushPending()
	if !w.committed {
		w.commit(nil)
	}
	if w.chunking {
		bw := w.c.bw
		bw.WriteString("0\r\n")
		w.writeTrailers(bw)
		bw.WriteString("\r\n")
	}
}

func (w *h1Writer) writeTrailers(bw *bufio.Writer) {
	var t http.Header
	for k, vv := range w.header {
		if kk, found := strings.CutPrefix(k, http.TrailerPrefix); found {
			if t == nil {
				t = make(http.Header)
			}
			t[kk] = vv
		}
	}
	for _, k := range w.trailers {
		if t == nil {
			t = make(http.Header)
		}
		for _, v := range w.header[k] {
			t.Add(k, v)
		}
	}
	if t != nil {
		writeFields(bw, t, nil, w.c)
	}
}

// commit writes the status line and fields, deciding the framing, as
// net/http's chunkWriter.writeHeader does for a GET in HTTP/1.1; p is the
// first body bytes, sniffed for a Content-Type when none is set. One walk
// of the header map finds the fields the decisions read and the names to
// write (net/http walks it, then looks each of those up, then copies and
// sorts it).
func (w *h1Writer) commit(p []byte) {
	header := w.header
	if w.snap != nil {
		header = w.snap
	}
	var s headScan
	w.scanHead(&s, header)
	w.commitScanned(p, &s)
}

// headScan is one walk of a response's header: the fields of its head
// (in the connection's scratch slice) and those the framing reads.
type headScan struct {
	keys                                 []headerKV
	te, ce, conn, cl                     string
	haveCL, haveType, haveDate, trailers bool
	declared, ctype                      []string
}

// scanHead walks header into s.
func (w *h1Writer) scanHead(s *headScan, header http.Header) {
	keys := w.c.rq.keys[:0]
	also := w.also.Name
	for k, vs := range header {
		if also != "" && k == also {
			continue // replaced by w.also, added below
		}
		if strings.HasPrefix(k, http.TrailerPrefix) {
			s.trailers = true // a trailer, never a field of the head
			continue
		}
		switch k {
		case "Transfer-Encoding":
			s.te = first(vs)
		case "Content-Length":
			s.haveCL = true
			s.cl = first(vs)
		case "Content-Type":
			s.haveType = true
			s.ctype = vs
		case "Content-Encoding":
			s.ce = first(vs)
		case "Connection":
			s.conn = first(vs)
		case "Date":
			s.haveDate = true
		case "Trailer":
			s.declared = vs
		}
		keys = append(keys, headerKV{k, vs})
	}
	if also != "" {
		// Not a name the walk decides on: the caller's own field (a
		// proxy's trace id), never a framing one.
		keys = append(keys, headerKV{also, w.also.Values})
	}
	s.keys = keys
}

// scanList is scanHead for a listed header: one key per field, a name's
// in the head's order (sortKeys keeps it). A list holds none of the
// framing fields but Content-Length, Content-Type and Date
// (h1wire.Fields.Listed).
func (w *h1Writer) scanList(s *headScan) {
	keys := w.c.rq.keys[:0]
	also := w.also.Name
	vals := w.vals
	for i, k := range w.names {
		if also != "" && k == also {
			continue // replaced by w.also, added below
		}
		vs := vals[i : i+1 : i+1]
		switch k {
		case "Content-Length":
			s.haveCL = true
			s.cl = vs[0]
		case "Content-Type":
			if !s.haveType {
				s.haveType = true
				s.ctype = vs
			}
		case "Date":
			s.haveDate = true
		}
		keys = append(keys, headerKV{k, vs})
	}
	if also != "" {
		keys = append(keys, headerKV{also, w.also.Values})
	}
	s.keys = keys
}

// commitScanned is commit with the head's header walked into s already.
func (w *h1Writer) commitScanned(p []byte, s *headScan) {
	w.committed = true
	header := w.header
	if w.snap != nil {
		header = w.snap
	}
	c := w.c
	rq := c.rq
	keys, trailers := s.keys, s.trailers
	te, ce, conn := s.te, s.ce, s.conn
	haveCL, haveType, haveDate := s.haveCL, s.haveType, s.haveDate
	declared := s.declared
	for _, v := range declared {
		trailers = true
		for f := range strings.SplitSeq(v, ",") {
			if f = textproto.TrimString(f); f != "" {
				if k := http.CanonicalHeaderKey(f); httpguts.ValidTrailerHeader(k) {
					w.trailers = append(w.trailers, k)
				}
			}
		}
	}
	del := func(k string) {
		if i := slices.IndexFunc(keys, func(f headerKV) bool { return f.k == k }); i >= 0 {
			keys = slices.Delete(keys, i, i+1)
		}
	}
	hasTE := te != ""
	var clen []byte
	code := w.status
	if w.handlerDone && !trailers && !hasTE && bodyAllowedForStatus(code) && !haveCL {
		w.contentLength = int64(len(p))
		clen = strconv.AppendInt(w.scratch[:0], int64(len(p)), 10)
	}
	hasCL := w.contentLength != -1
	closing := c.s.closing.Load()
	if w.req.Close || conn == "close" || closing {
		w.closeAfter = true
	}
	var ctype, connection, tenc string
	if bodyAllowedForStatus(code) {
		if ce == "" && !haveType && !hasTE && len(p) > 0 {
			ctype = http.DetectContentType(p)
		}
	} else {
		del("Content-Length")
		del("Transfer-Encoding")
		if code == http.StatusNotModified {
			del("Content-Type")
		}
	}
	var date []byte
	if !haveDate {
		date = httpdate.Bytes()
	}
	if hasCL && hasTE && te != "identity" {
		c.s.logf("http: WriteHeader called with both Transfer-Encoding of %q and a Content-Length of %d", te, w.contentLength)
		del("Content-Length")
		hasCL = false
	}
	switch {
	case !bodyAllowedForStatus(code) || code == http.StatusNoContent:
		del("Transfer-Encoding")
	case hasCL:
		del("Transfer-Encoding")
	case hasTE && te == "identity":
		w.chunking = false
		w.closeAfter = true
		del("Transfer-Encoding")
	default:
		w.chunking = true
		tenc = "chunked"
		if hasTE && te == "chunked" {
			del("Transfer-Encoding")
		}
	}
	if w.chunking {
		del("Content-Length")
	}
	switching := code == http.StatusSwitchingProtocols && header.Get("Upgrade") != "" &&
		httpguts.HeaderValuesContainsToken(header["Connection"], "Upgrade")
	if w.closeAfter && (closing || !hasToken(conn, "close")) && !switching {
		del("Connection")
		connection = "close"
	}
	bw := c.bw
	writeStatus(bw, code, w.sbuf[:])
	writeKeys(bw, keys, w.parsed)
	w.parsed = ""
	clear(keys)
	rq.keys = keys[:0]
	if date != nil {
		bw.WriteString("Date: ")
		bw.Write(date)
		bw.WriteString("\r\n")
	}
	if clen != nil {
		bw.WriteString("Content-Length: ")
		bw.Write(clen)
		bw.WriteString("\r\n")
	}
	for i, v := range [...]string{ctype, connection, tenc} {
		if v != "" {
			bw.WriteString(extraKeys[i])
			bw.WriteString(v)
			bw.WriteString("\r\n")
		}
	}
	bw.WriteString("\r\n")
}

func first(vs []string) string {
	if len(vs) > 0 {
		return vs[0]
	}
	return ""
}

var extraKeys = [...]string{"Content-Type: ", "Connection: ", "Transfer-Encoding: "}

var excludeNoBody = map[string]bool{"Content-Length": true, "Transfer-Encoding": true}

// hasToken is net/http's: whether token appears in v, case-insensitively,
// at a token boundary.
func hasToken(v, token string) bool {
	if len(token) > len(v) || token == "" {
		return false
	}
	if v == token {
		return true
	}
	for sp := 0; sp <= len(v)-len(token); sp++ {
		if b := v[sp]; b != token[0] && b|0x20 != token[0] {
			continue
		}
		if sp > 0 && !isTokenBoundary(v[sp-1]) {
			continue
		}
		if endPos := sp + len(token); endPos != len(v) && !isTokenBoundary(v[endPos]) {
			continue
		}
		if strings.EqualFold(v[sp:sp+len(token)], token) {
			return true
		}
	}
	return false
}

func isTokenBoundary(b byte) bool { return b == ' ' || b == ',' || b == '\t' }

func bodyAllowedForStatus(status int) bool {
	return !(status >= 100 && status <= 199 || status == 204 || status == 304)
}

// writeStatus is net/http's status line for HTTP/1.1.
func writeStatus(bw *bufio.Writer, code int, scratch []byte) {
	bw.WriteString("HTTP/1.1 ")
	if text := http.StatusText(code); text != "" {
		bw.Write(strconv.AppendInt(scratch[:0], int64(code), 10))
		bw.WriteByte(' ')
		bw.WriteString(text)
		bw.WriteString("\r\n")
	} else {
		fmt.Fprintf(bw, "%03d status code %d\r\n", code, code)
	}
}

// writeFields is Header.WriteSubset: sorted by name, invalid names
// dropped, CR and LF in values turned to spaces, values trimmed. The
// sort uses the connection's scratch slice.
func writeFields(bw *bufio.Writer, h http.Header, exclude map[string]bool, c *h1Conn) {
	rq := c.rq
	keys := rq.keys[:0]
	for k, vs := range h {
		if !exclude[k] {
			keys = append(keys, headerKV{k, vs})
		}
	}
	writeKeys(bw, keys, "")
	clear(keys)
	rq.keys = keys[:0]
}

// headerKV is a field of a header map: its name and values.
type headerKV struct {
	k  string
	vs []string
}

// writeKeys writes the fields, which it sorts by name, as net/http does
// (the fields of one name, when more than one key has it, in the keys'
// order).
// A value without CR, LF or spaces and tabs at its ends (what the lean
// parser and tether's own fields give) goes out as it is; any other takes
// WriteSubset's steps. Each line is one append to the buffer.
//
// parsed is the lean parser's string of the fields (h1wire.Fields.Head)
// or "": a value that lies in it holds no CR or LF, so only its ends are
// looked at, and a name of knownNames is a token without a look.
func writeKeys(bw *bufio.Writer, keys []headerKV, parsed string) {
	sortKeys(keys)
	for _, f := range keys {
		k := f.k
		if !h1wire.KnownName(k) && !httpguts.ValidHeaderFieldName(k) {
			continue
		}
		for _, v := range f.vs {
			if h1wire.Within(parsed, v) {
				if n := len(v); n > 0 && (v[0] == ' ' || v[0] == '\t' || v[n-1] == ' ' || v[n-1] == '\t') {
					v = textproto.TrimString(v) // a re-sliced value
				}
			} else if !plainValue(v) {
				if strings.ContainsAny(v, "\r\n") {
					v = headerNewlineToSpace.Replace(v)
				}
				v = textproto.TrimString(v)
			}
			h1wire.WriteField(bw, k, v)
		}
	}
}

// sortKeys sorts fields by name: an insertion sort for the few fields of
// a usual head, without the comparison function's call per step.
func sortKeys(keys []headerKV) {
	if len(keys) > 12 {
		// Stable: a list's fields of one name stay in their order.
		slices.SortStableFunc(keys, func(a, b headerKV) int { return strings.Compare(a.k, b.k) })
		return
	}
	for i := 1; i < len(keys); i++ {
		for j := i; j > 0 && nameLess(keys[j].k, keys[j-1].k); j-- {
			keys[j], keys[j-1] = keys[j-1], keys[j]
		}
	}
}

// nameLess is a < b, deciding by the first bytes where they differ (most
// pairs of a head's names) without a call to the runtime's compare.
func nameLess(a, b string) bool {
	if len(a) > 0 && len(b) > 0 && a[0] != b[0] {
		return a[0] < b[0]
	}
	return a < b
}

// plainValue: v has no CR or LF and no space or tab at either end, so
// WriteSubset would write it unchanged.
func plainValue(v string) bool {
	if v == "" {
		return true
	}
	if c := v[0]; c == ' ' || c == '\t' {
		return false
	}
	if c := v[len(v)-1]; c == ' ' || c == '\t' {
		return false
	}
	// Eight bytes at a time: a zero byte of x^'\r' or of x^'\n' is a CR
	// or an LF (exact as to whether there is one), then the last bytes.
	i := 0
	for ; i+8 <= len(v); i += 8 {
		if x := swar.Word(v[i:]); swar.Has(x, '\r')|swar.Has(x, '\n') != 0 {
			return false
		}
	}
	for ; i < len(v); i++ {
		if c := v[i]; c == '\r' || c == '\n' {
			return false
		}
	}
	return true
}

var headerNewlineToSpace = strings.NewReplacer("\n", " ", "\r", " ")
