package lean

import (
	"bufio"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/textproto"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/tether-proxy/tether/proxy/internal/cancelhook"
	"github.com/tether-proxy/tether/proxy/internal/h1wire"
	"github.com/tether-proxy/tether/proxy/internal/monotime"
	"github.com/tether-proxy/tether/proxy/internal/sockio"
	"golang.org/x/net/http/httpguts"
)

// Transport is the HTTP/1.1 path to cleartext backends for requests
// without a body: a pool of persistent connections on which the calling
// goroutine writes the request (the standard library's Request.Write) and
// reads the response (http.ReadResponse, which http.Transport itself uses)
// with no hand-off to a connection's reader and writer goroutines.
//
// What it does not cover goes to the cluster's http.Transport unchanged,
// so every guarantee stays the Transport's: requests with a body (the
// Transport streams an upload while it reads the response, full duplex),
// upgrades, Expect: 100-continue, https and h2c destinations, clusters
// with MaxConnectionsPerServer, and any request the Transport would refuse
// (an invalid method, header name or value: it answers with its error).
//
// It keeps what the Transport does for the requests it takes: the dial is
// the Transport's own DialContext (DNS cache, connect timeout, the
// activity deadline on reads, dial errors marked for the retry), 1xx
// responses reach ReverseProxy's Got1xxResponse hook, the response headers
// are bounded by MaxResponseHeaderBytes, gzip is asked for and undone when
// the client did not ask for an encoding, a request on a pooled connection
// that fails before any byte of the response came back is sent again on a
// new connection (when its method allows a replay, as the Transport's
// rule), a cancelled request closes its connection, and a connection is
// pooled again only after a complete response with nothing unread after it.
type Transport struct {
	fallback *http.Transport
	dial     func(ctx context.Context, network, addr string) (net.Conn, error)
	maxIdle  int
	idleFor  time.Duration
	maxHdr   int64
	onTrip   func() // Options.OnTrip

	mu    sync.Mutex
	idle  map[string]*idleList // entries stay: each leanConn holds its key's
	prune *time.Timer
	// pruneArmed: prune is pending, due when the oldest idle connection
	// expires; a put leaves it alone then (a timer reset per request
	// would touch the runtime's timer heap for nothing).
	pruneArmed bool
	closed     bool
}

// Options are a Transport's settings beyond its http.Transport's.
type Options struct {
	// OnTrip, when set, is called for each request the lean path takes
	// (tests count them with it); nil in production.
	OnTrip func()
}

// idleConnTimeout is http.Transport's IdleConnTimeout when tr sets none.
const idleConnTimeout = 90 * time.Second

// New wraps tr; nil when tr cannot use the lean path for any request
// (h2c, a connection limit, a custom dialer missing).
func New(tr *http.Transport, opts Options) *Transport {
	if tr.DialContext == nil || tr.MaxConnsPerHost > 0 || tr.DisableKeepAlives || tr.Proxy != nil {
		return nil
	}
	if ps := tr.Protocols; ps != nil && (ps.UnencryptedHTTP2() || !ps.HTTP1()) {
		return nil
	}
	t := &Transport{fallback: tr, dial: tr.DialContext, maxIdle: tr.MaxIdleConnsPerHost,
		idleFor: tr.IdleConnTimeout, maxHdr: tr.MaxResponseHeaderBytes, onTrip: opts.OnTrip, idle: map[string]*idleList{}}
	if t.maxIdle <= 0 {
		t.maxIdle = http.DefaultMaxIdleConnsPerHost
	}
	if t.idleFor <= 0 {
		t.idleFor = idleConnTimeout
	}
	if t.maxHdr <= 0 {
		t.maxHdr = 1 << 20
	}
	t.prune = time.AfterFunc(time.Hour, t.pruneIdle)
	t.prune.Stop()
	return t
}

// Covers says whether the lean path takes req; see Transport.
func (t *Transport) Covers(req *http.Request) bool {
	return coversRequest(req) && h1wire.ValidFields(req.Header)
}

// coversRequest is Covers but for the fields.
func coversRequest(req *http.Request) bool {
	if req.URL == nil || req.URL.Scheme != "http" || req.URL.Host == "" ||
		(req.Body != nil && req.Body != http.NoBody) || req.ContentLength > 0 || len(req.TransferEncoding) > 0 ||
		req.Header == nil || req.Trailer != nil {
		return false
	}
	return req.Method == "" || req.Method == http.MethodGet || validMethod(req.Method)
}

// PrepareDirect is Covers for the request the caller's direct path sends
// next with RoundTripDirect and d, fused with the writing of its head:
// one walk of its fields checks them and writes them into d, from where
// RoundTripDirect sends them. Nothing is sent or changed when it says no.
// loop is the client's request's context: when the own HTTP/1.1 loop
// made it (cancelhook.Loop), a value of req that lies in the head the
// loop parsed passed the loop's parser, whose rule is stricter, and is
// not checked again, and the loop's reading of the clock at the
// request's start is the pool's "now" (nothing waits in between).
// beside are fields of the request kept out of its map
// (h1wire.AppendRequestHead): when the head is left to Request.Write,
// they are put in the map first.
func (t *Transport) PrepareDirect(req *http.Request, d *Direct, loop context.Context, beside h1wire.Beside) bool {
	d.req = nil
	parsed, at := cancelhook.Loop(loop)
	var start int64
	if !at.IsZero() {
		start = monotime.Of(at)
	}
	if !coversRequest(req) {
		return false
	}
	d.trace = httptrace.ContextClientTrace(req.Context())
	if !h1wire.TraceWantsWrites(d.trace) {
		b, res := h1wire.AppendRequestHead(d.head[:0], req, true, parsed, beside, &d.host)
		switch res {
		case h1wire.HeadInvalid:
			return false
		case h1wire.HeadWritten, h1wire.HeadGzip:
			d.req, d.head, d.gz, d.start = req, b, res == h1wire.HeadGzip, start
			return true
		}
	}
	beside.Map(req.Header)
	if !h1wire.ValidFields(req.Header) {
		return false
	}
	d.req, d.head, d.gz, d.start = req, d.head[:0], wantGzip(req), start // roundTrip writes the head
	return true
}

// wantGzip: as the Transport, the lean path asks for gzip when the
// client asked for no encoding (and no range), and decodes the answer.
func wantGzip(req *http.Request) bool {
	return req.Method != http.MethodHead && req.Header["Accept-Encoding"] == nil && req.Header["Range"] == nil
}

// validMethod: a method is an RFC 9110 token.
func validMethod(m string) bool {
	for i := 0; i < len(m); i++ {
		if !httpguts.IsTokenRune(rune(m[i])) {
			return false
		}
	}
	return m != ""
}

// idleList is the idle connections to one address, the newest last.
type idleList struct{ conns []*leanConn }

// leanConn is one pooled backend connection.
type leanConn struct {
	t    *Transport
	key  string
	list *idleList // key's in t.idle
	conn net.Conn
	br   *bufio.Reader
	bw   *bufio.Writer
	// head, when not nil, is the request's head as PrepareDirect wrote
	// it, which the flush writes as it is instead of what bw holds.
	head []byte
	// limit is what may still be read before the response headers are
	// complete (MaxResponseHeaderBytes); < 0 while a body is read.
	limit int64
	// got counts bytes read since the request was written.
	got    int64
	reused bool
	idleAt int64 // monotime.Now
	// nw is conn as a NowWriter, if it is one; now, when not 0, is the
	// pool's reading of the clock for lc's head's write (flush).
	nw  NowWriter
	now int64
	// raw: the socket's; idle: lc came from the pool and is to be
	// checked before the write (awaitFd, or intact); peek, peekBuf,
	// peekOK: the non-blocking peek that checks it.
	raw     syscall.RawConn
	idle    bool
	peek    func(fd uintptr) bool
	peekBuf [1]byte
	peekOK  bool
	// closeConn is lc.conn.Close as a func built once, for AfterFunc.
	closeConn func()
	// await, flushed, werr: flushAwait's write-then-wait; fd, inWait:
	// the socket the wait's callback may read (Read) while inWait.
	await   func(fd uintptr) bool
	flushed bool
	werr    error
	fd      uintptr
	inWait  bool
	// rerr is the connection's first read error, returned by every later
	// read.
	rerr error
}

// Read is the bufio.Reader's source: it bounds the response headers and
// counts what came back.
func (c *leanConn) Read(p []byte) (int, error) {
	if c.limit == 0 {
		return 0, fmt.Errorf("net/http: response headers exceed %d bytes", c.t.maxHdr)
	}
	if c.limit > 0 && int64(len(p)) > c.limit {
		p = p[:c.limit]
	}
	if c.rerr != nil {
		return 0, c.rerr
	}
	var n int
	var err error
	if c.inWait {
		// Inside flushAwait's wait, whose RawConn.Read holds the socket: a
		// read through the conn would wait for that very call.
		var e syscall.Errno
		if n, e = sockio.ReadFd(c.fd, p); e == syscall.EAGAIN {
			return 0, sockio.ErrNotYet
		}
		if e != 0 || n == 0 {
			n, err = 0, c.readError(e)
		}
	} else {
		n, err = c.conn.Read(p)
	}
	c.got += int64(n)
	if c.limit > 0 {
		c.limit -= int64(n)
	}
	if err != nil {
		c.rerr = err // a connection's read error is its last (readResponseHead relies on it)
	}
	return n, err
}

var errStaleConn = errors.New("lean: pooled connection closed before the response")

// RoundTrip sends req on the lean path when Covers says it takes it, else
// through the http.Transport.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	if !t.Covers(req) {
		return t.fallback.RoundTrip(req)
	}
	return t.roundTrip(req, new(leanResp), nil, nil)
}

// NowWriter is a connection whose writes note the time (an idle
// deadline's bookkeeping): WriteNow is Write with the caller's reading of
// the clock (monotime.Now). A pooled connection's head is written with the
// reading the pool's look took, as nothing waited since.
type NowWriter interface {
	WriteNow(p []byte, now int64) (int, error)
}

// Direct is what a caller's own forwarding path keeps for the requests it
// sends with RoundTripDirect, one after another: where a response's parts
// live (reused once the caller is done with the response, so a response
// costs no allocation of its own), and where 1xx responses go when the
// request carries no client trace to forward them.
type Direct struct {
	resp leanResp
	// Got1xx receives each 1xx response of a request without a client
	// trace; nil: they are dropped.
	Got1xx func(code int, header textproto.MIMEHeader)
	// ListFields: RoundTripDirect leaves a lean head's fields as a list
	// when it may (Fields).
	ListFields bool
	// req is the request PrepareDirect took; head is its head (empty
	// when Request.Write is to write it), gz whether it asks for gzip,
	// trace its context's client trace.
	req   *http.Request
	head  []byte
	gz    bool
	trace *httptrace.ClientTrace
	// start is the loop's clock reading at the request's start
	// (monotime.Now; 0: none), for the pool's first look only: a retry
	// comes after a wait.
	start int64
	// host is the host of the last head PrepareDirect wrote for d: its
	// caller's requests mostly go to one destination.
	host h1wire.HostMemo
}

// HopByHop says whether res, the response RoundTripDirect gave for d,
// may hold hop-by-hop fields: false only for a lean head that had none.
func (d *Direct) HopByHop(res *http.Response) bool {
	return res != &d.resp.wire.Response || d.resp.wire.HopByHop
}

// Fields is the container of res's fields when res is the lean response
// RoundTripDirect gave for d and its Header is still that container's
// map, or nil while the container holds them as a list, else nil. Until
// res.Body is closed the caller may Trade the map and its value slots (or
// TradeList the list and its slots) for an empty pair of its own, which
// the container then takes to its next response.
//
// With d.ListFields, RoundTripDirect leaves a lean head's fields as a
// list when it may (h1wire.Fields.KeepList): the caller makes res.Header
// with the container's Map before anything reads it.
func (d *Direct) Fields(res *http.Response) *h1wire.Fields {
	if res != &d.resp.wire.Response {
		return nil
	}
	if fs := d.resp.body.fields; fs != nil && (fs.Holds(res.Header) || res.Header == nil && fs.Listed()) {
		return fs
	}
	return nil
}

// Kept is what a Direct keeps from one request to the next: its Got1xx
// and the room of its head.
type Kept struct {
	got1xx func(code int, header textproto.MIMEHeader)
	head   []byte
	host   h1wire.HostMemo
}

// Kept is what d keeps for the caller's next request (Reuse).
func (d *Direct) Kept() Kept { return Kept{d.Got1xx, d.head[:0], d.host} }

// Reuse sets up an empty d with what a Direct kept.
func (d *Direct) Reuse(k Kept) { d.Got1xx, d.head, d.host = k.got1xx, k.head, k.host }

// RoundTripDirect is RoundTrip for the caller's direct path: req was
// taken by PrepareDirect (or checked by Covers) already, and its
// response's parts are d's.
func (t *Transport) RoundTripDirect(req *http.Request, d *Direct) (*http.Response, error) {
	pre := d
	if d.req != req {
		pre = nil
	}
	d.resp.list = d.ListFields
	return t.roundTrip(req, &d.resp, d.Got1xx, pre)
}

// RetryDirect sends a retry's clone of a direct request (to another
// destination): it is checked here, and when the lean path does not take
// it the http.Transport sends it, its 1xx still going to d.Got1xx.
func (t *Transport) RetryDirect(req *http.Request, d *Direct) (*http.Response, error) {
	if t.Covers(req) {
		return t.roundTrip(req, new(leanResp), d.Got1xx, nil)
	}
	if d.Got1xx != nil && httptrace.ContextClientTrace(req.Context()) == nil {
		// The Transport takes it (an https destination): its 1xx reach
		// the client as the direct path's own do, since no ReverseProxy
		// trace is there to forward them.
		got := d.Got1xx
		req = req.WithContext(httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{
			Got1xxResponse: func(code int, h textproto.MIMEHeader) error {
				got(code, h)
				return nil
			},
		}))
	}
	return t.fallback.RoundTrip(req)
}

// roundTrip sends a covered req on a pooled or new connection, its
// response's parts into's, its 1xx to got1xx when it has no client trace;
// pre, when not nil, is what PrepareDirect made of req.
func (t *Transport) roundTrip(req *http.Request, into *leanResp, got1xx func(int, textproto.MIMEHeader), pre *Direct) (*http.Response, error) {
	if t.onTrip != nil {
		t.onTrip()
	}
	ctx := req.Context()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	key := canonicalAddr(req)
	for attempt := 0; ; {
		var lc *leanConn
		if attempt == 0 {
			var now int64
			if pre != nil {
				now, pre.start = pre.start, 0
			}
			if lc = t.get(key, now); lc != nil {
				lc.now = now
			}
		}
		if lc == nil {
			c, err := t.dial(ctx, "tcp", key)
			if err != nil {
				return nil, err
			}
			lc = t.wrap(key, c)
		}
		resp, err := lc.roundTrip(req, into, got1xx, pre)
		if err == nil {
			return resp, nil
		}
		if err == errNotIntact {
			continue // nothing was sent: the next pooled connection
		}
		// Retry once on a new connection: a pooled connection the backend
		// had closed, nothing of a response came back, and the method
		// allows sending it again (the Transport's rule, as no body is
		// involved). A backend that stayed silent for the activity timeout
		// did not close anything: its request has had its whole window.
		if !lc.reused || lc.got > 0 || attempt > 0 || ctx.Err() != nil || !Replayable(req) ||
			errors.Is(err, os.ErrDeadlineExceeded) {
			return nil, err
		}
		attempt++
	}
}

// Replayable is the Transport's rule for a request without a body.
func Replayable(req *http.Request) bool {
	switch req.Method {
	case "", http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace:
		return true
	}
	_, a := req.Header["Idempotency-Key"]
	_, b := req.Header["X-Idempotency-Key"]
	return a || b
}

// canonicalAddr is the URL's host:port, port 80 when none (the URL's own
// Host, without an allocation, when it has a port).
func canonicalAddr(req *http.Request) string {
	if hasPort(req.URL.Host) {
		return req.URL.Host
	}
	host, port := req.URL.Hostname(), req.URL.Port()
	if port == "" {
		port = "80"
	}
	return net.JoinHostPort(host, port)
}

// hasPort: the last ':' of h comes after any ']' (one scan from the end,
// which a port ends after a few bytes).
func hasPort(h string) bool {
	for i := len(h) - 1; i >= 0; i-- {
		switch h[i] {
		case ':':
			return true
		case ']':
			return false
		}
	}
	return false
}

func (t *Transport) wrap(key string, c net.Conn) *leanConn {
	lc := &leanConn{t: t, key: key, conn: c, list: t.listOf(key)}
	lc.closeConn = func() { lc.conn.Close() }
	lc.br = bufio.NewReaderSize(lc, 4<<10)
	lc.bw = bufio.NewWriterSize(c, 4<<10)
	lc.nw, _ = c.(NowWriter)
	if raw := sockio.RawConnOf(c); raw != nil {
		lc.raw, lc.peek, lc.await = raw, lc.peekFd, lc.awaitFd
	}
	return lc
}

// leanResp holds a response's parts in one allocation: the wire's
// Response and length-delimited body, and the lean connection's wrapper
// around the body.
type leanResp struct {
	wire h1wire.Resp
	body leanBody
	// list: a lean head's fields are left as a list (RoundTripDirect).
	list bool
}

// acceptGzip is the Accept-Encoding the Transport adds (and then undoes).
var acceptGzip = []string{"gzip"}

// roundTrip writes req and reads its response on lc; a lean response's
// parts are into's; 1xx responses go to the client trace, else to got1xx;
// pre, when not nil, holds req's head and trace (PrepareDirect).
func (lc *leanConn) roundTrip(req *http.Request, into *leanResp, got1xx func(int, textproto.MIMEHeader), pre *Direct) (*http.Response, error) {
	ctx := req.Context()
	// A cancelled request (client gone, route timeout) closes the
	// connection, which ends a blocked read or write.
	stop := cancelhook.OnCancel(ctx, lc.closeConn)
	fail := func(err error) (*http.Response, error) {
		stop.Stop()
		lc.conn.Close()
		if cerr := ctx.Err(); cerr != nil {
			return nil, cerr
		}
		if lc.reused && lc.got == 0 && ConnBroke(err) {
			return nil, fmt.Errorf("%w: %w", errStaleConn, err)
		}
		return nil, err
	}
	lc.got = 0
	if lc.idle && (pre == nil || len(pre.head) == 0) && !lc.intact() {
		return fail(errNotIntact)
	}
	var gz bool
	var trace *httptrace.ClientTrace
	var err error
	if pre != nil && len(pre.head) > 0 {
		gz, trace = pre.gz, pre.trace
		lc.head = pre.head
	} else {
		// As the Transport: ask for gzip when the client asked for no
		// encoding, and decode the answer, so the client gets what it can
		// read. The outgoing request is ReverseProxy's own copy, only this
		// goroutine uses it while RoundTrip runs; the header is put back.
		if pre != nil {
			gz, trace = pre.gz, pre.trace
		} else {
			gz, trace = wantGzip(req), httptrace.ContextClientTrace(ctx)
		}
		if gz {
			req.Header["Accept-Encoding"] = acceptGzip
		}
		var ok bool
		ok, err = h1wire.WriteRequestHead(lc.bw, req)
		if !ok && err == nil {
			err = req.Write(lc.bw)
		}
		if gz {
			delete(req.Header, "Accept-Encoding")
		}
	}
	if err == nil {
		lc.limit = lc.t.maxHdr // flushAwait may read the head's first bytes
		err = lc.flushAwait()
	}
	if err != nil {
		return fail(err)
	}
	var resp *http.Response
	var lr *h1wire.Resp
	var fs *h1wire.Fields // the fields of a lean head, back in leanFields at Close
	for n1xx := 0; ; n1xx++ {
		if n1xx > 0 {
			lc.limit = lc.t.maxHdr
		}
		if fs == nil {
			fs = leanFields.Get().(*h1wire.Fields)
		}
		if into.list {
			fs.KeepList()
		}
		if lr, err = h1wire.ReadHead(lc.br, req, fs, &into.wire); lr != nil {
			resp = &lr.Response
		} else if err == nil {
			resp, err = http.ReadResponse(lc.br, req)
		}
		if err != nil {
			return fail(err)
		}
		code := resp.StatusCode
		if code < 100 || code > 199 {
			break
		}
		if code == http.StatusSwitchingProtocols {
			// Upgrades go to the Transport; an unasked-for 101 is the
			// backend's protocol error.
			return fail(errors.New("lean: 101 Switching Protocols to a request without Upgrade"))
		}
		if n1xx >= 5 {
			return fail(errors.New("net/http: too many 1xx informational responses"))
		}
		switch {
		case trace != nil && trace.Got1xxResponse != nil:
			if err := trace.Got1xxResponse(code, textproto.MIMEHeader(resp.Header)); err != nil {
				return fail(err)
			}
		case trace == nil && got1xx != nil:
			got1xx(code, textproto.MIMEHeader(resp.Header))
		}
	}
	lc.limit = -1
	body := &into.body
	*body = leanBody{lc: lc, rc: resp.Body, stop: stop, close: resp.Close}
	if lr != nil {
		body.fields, fs = fs, nil
	}
	if fs != nil {
		leanFields.Put(fs) // unused: the head was net/http's to read
	}
	if resp.Body == http.NoBody {
		body.release(true)
		return resp, nil
	}
	resp.Body = body
	// The response's names are canonical (either parser's): Get's own
	// canonicalisation is not needed.
	if ce := resp.Header["Content-Encoding"]; gz && len(ce) > 0 && strings.EqualFold(ce[0], "gzip") {
		resp.Header.Del("Content-Encoding")
		resp.Header.Del("Content-Length")
		resp.ContentLength = -1
		resp.Uncompressed = true
		resp.Body = &leanGzip{body: body}
	}
	return resp, nil
}

// ConnBroke reports an error of a connection the peer closed or reset
// (the lean path's stale-connection test and a caller's retry rule share
// it).
func ConnBroke(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// leanBody is a response body on a lean connection: its end returns the
// connection to the pool, an early Close or an error closes it.
type leanBody struct {
	lc    *leanConn
	rc    io.ReadCloser
	stop  cancelhook.Reg
	close bool
	mu    sync.Mutex
	done  bool
	eof   bool
	// fields holds the response's Header; Close gives it back to
	// leanFields. A body read to its end frees the connection at once
	// (the WAF reads bodies before the fields are copied), so the fields
	// are the response's own until Close, which the proxy calls after it
	// is done with them, as ReverseProxy does.
	fields *h1wire.Fields
}

// leanFields: response header maps, reused from one Close to the next
// response.
var leanFields = sync.Pool{New: func() any { return new(h1wire.Fields) }}

func (b *leanBody) Read(p []byte) (int, error) {
	b.mu.Lock()
	done, eof := b.done, b.eof
	b.mu.Unlock()
	switch {
	case eof:
		return 0, io.EOF // as a body read to its end keeps answering
	case done:
		return 0, errors.New("http: read on closed response body")
	}
	n, err := b.rc.Read(p)
	switch {
	case err == io.EOF:
		b.release(true)
	case err != nil:
		b.release(false)
	}
	return n, err
}

func (b *leanBody) Close() error {
	b.release(false) // before EOF: the rest is not read, the connection goes
	b.mu.Lock()
	fs := b.fields
	b.fields = nil
	b.mu.Unlock()
	if fs != nil {
		leanFields.Put(fs)
	}
	return nil
}

// release ends the exchange once: complete (the connection may be pooled
// again) or not (it is closed).
func (b *leanBody) release(complete bool) {
	b.mu.Lock()
	if b.done {
		b.mu.Unlock()
		return
	}
	b.done, b.eof = true, complete
	b.mu.Unlock()
	fired := !b.stop.Stop()
	lc := b.lc
	if !complete || fired || b.close || lc.br.Buffered() > 0 {
		// Bytes after a complete response were never asked for: a
		// backend that sends them is not trusted with the next request.
		lc.conn.Close()
		return
	}
	lc.t.put(lc)
}

// leanGzip decodes a gzip body the lean path asked for, lazily as the
// Transport's gzipReader.
type leanGzip struct {
	body *leanBody
	zr   *gzip.Reader
	err  error
}

func (g *leanGzip) Read(p []byte) (int, error) {
	if g.err != nil {
		return 0, g.err
	}
	if g.zr == nil {
		zr, err := gzip.NewReader(g.body)
		if err != nil {
			g.err = err
			return 0, err
		}
		g.zr = zr
	}
	n, err := g.zr.Read(p)
	if err != nil {
		g.err = err
	}
	return n, err
}

func (g *leanGzip) Close() error { return g.body.Close() }

// get takes the most recently used idle connection to key that has not
// been idle for too long; the write's wait checks that it is intact
// (awaitFd).
func (t *Transport) get(key string, now int64) *leanConn {
	for {
		lc, fresh := t.pop(key, now)
		if lc == nil {
			return nil
		}
		if fresh {
			lc.reused, lc.idle = true, lc.raw != nil
			return lc
		}
		lc.conn.Close()
	}
}

// pop removes the newest idle connection to key; fresh is false when it
// was idle for longer than IdleConnTimeout at now (monotime.Now; 0: read
// here).
func (t *Transport) pop(key string, now int64) (lc *leanConn, fresh bool) {
	t.mu.Lock()
	l := t.idle[key]
	if l == nil || len(l.conns) == 0 {
		t.mu.Unlock()
		return nil, false
	}
	n := len(l.conns) - 1
	lc = l.conns[n]
	l.conns[n] = nil
	l.conns = l.conns[:n]
	t.mu.Unlock()
	if now == 0 {
		now = monotime.Now()
	}
	return lc, now-lc.idleAt < int64(t.idleFor)
}

// listOf is key's idleList, made at the first connection to key.
func (t *Transport) listOf(key string) *idleList {
	t.mu.Lock()
	defer t.mu.Unlock()
	l := t.idle[key]
	if l == nil {
		l = new(idleList)
		t.idle[key] = l
	}
	return l
}

// errNotIntact: a pooled connection was found closed by the backend, or
// holding bytes nobody asked for, before anything was written on it.
var errNotIntact = errors.New("lean: pooled connection not intact")

// intact is awaitFd's check of a pooled connection on a RawConn.Read of
// its own, for a head that may leave before flushAwait (bw's, when larger
// than bw): false when the backend closed it or sent something nobody
// asked for.
func (lc *leanConn) intact() bool {
	lc.idle, lc.peekOK = false, false
	return lc.raw.Read(lc.peek) == nil && lc.peekOK
}

// peekFd is lc.peek: built once per connection, so a reuse allocates
// nothing.
func (lc *leanConn) peekFd(fd uintptr) bool {
	lc.peekOK = sockio.NothingToRead(fd, lc.peekBuf[:])
	return true // never wait for readiness
}

// flushAwait sends the buffered request and returns once the connection
// is readable (or the wait failed: the read that follows reports why, as
// it would have). A plain read right after the write would find nothing
// yet, fail with EAGAIN and only then wait for the poller; one syscall per
// request is saved by writing inside RawConn.Read, whose readiness state is
// reset before the callback runs, so the answer's arrival, which follows
// the write, is never missed.
//
// A pooled connection is checked first, in the same call (awaitFd), so
// what the backend sends or closes after the check wakes the wait.
func (lc *leanConn) flushAwait() error {
	if lc.raw == nil {
		return lc.flush()
	}
	lc.flushed, lc.werr = false, nil
	err := lc.raw.Read(lc.await)
	if err != nil && lc.flushed && lc.werr == nil && lc.rerr == nil {
		// The wait for the answer failed (the connection's read deadline,
		// a close): that is the read's outcome. A read through the conn
		// would ask the wrappers again, and the activity guard's would push
		// its deadline a second window ahead.
		var oe *net.OpError
		if errors.As(err, &oe) {
			err = oe.Err // RawConn's own ("raw-read")
		}
		lc.rerr = lc.readOpError(err)
	}
	if !lc.flushed {
		// RawRead failed before the callback (a cancellation closed the
		// connection, or the deadline of a pooled one has passed):
		// nothing was sent.
		if lc.idle {
			lc.idle = false
			return errNotIntact
		}
		return lc.flush()
	}
	return lc.werr
}

// flush sends the request's head: PrepareDirect's, or what bw holds.
func (lc *leanConn) flush() error {
	now := lc.now
	lc.now = 0
	if h := lc.head; h != nil {
		lc.head = nil
		var err error
		if now != 0 && lc.nw != nil {
			_, err = lc.nw.WriteNow(h, now)
		} else {
			_, err = lc.conn.Write(h)
		}
		return err
	}
	return lc.bw.Flush()
}

// awaitFd is lc.await: the first call checks a pooled connection and
// writes; a call after readiness reads what came into lc.br, and ends the
// wait unless nothing had come (a wake-up with nothing to read waits
// again). The head then usually needs no RawConn.Read of its own.
func (lc *leanConn) awaitFd(fd uintptr) bool {
	if !lc.flushed {
		if lc.idle {
			// One recv(MSG_PEEK|MSG_DONTWAIT): bytes or an EOF on an
			// idle connection, which http.Transport's reader goroutine
			// would have seen while it sat in the pool, and the
			// connection is not used.
			lc.idle = false
			if lc.peekFd(fd); !lc.peekOK {
				lc.werr = errNotIntact
				lc.flushed = true
				return true
			}
		}
		lc.flushed = true
		lc.werr = lc.flush()
		return lc.werr != nil
	}
	if lc.br.Buffered() > 0 {
		return true
	}
	lc.fd, lc.inWait = fd, true
	_, err := lc.br.Peek(1)
	lc.inWait = false
	return err != sockio.ErrNotYet
}

// readError is what a read through the conn returns for what recv(2)
// on its socket returned (Read inside awaitFd): io.EOF for nothing, else
// e as net.TCPConn and sockio.Conn report it. What the wrappers between
// would do on a read is done already: the one the data path dials under
// (the activity deadline) arms its deadline on the write just made.
func (c *leanConn) readError(e syscall.Errno) error {
	if e == 0 {
		return io.EOF
	}
	return c.readOpError(os.NewSyscallError("read", e))
}

// readOpError is err as a read of the conn reports it (net.TCPConn's and
// sockio.Conn's form).
func (c *leanConn) readOpError(err error) error {
	return &net.OpError{Op: "read", Net: "tcp", Source: c.conn.LocalAddr(), Addr: c.conn.RemoteAddr(), Err: err}
}

// put pools lc, unless the pool is full or closed.
func (t *Transport) put(lc *leanConn) {
	now := monotime.Now()
	l := lc.list
	t.mu.Lock()
	if t.closed || len(l.conns) >= t.maxIdle {
		t.mu.Unlock()
		lc.conn.Close()
		return
	}
	lc.idleAt = now
	l.conns = append(l.conns, lc)
	if !t.pruneArmed {
		t.pruneArmed = true
		t.prune.Reset(t.idleFor)
	}
	t.mu.Unlock()
}

// pruneIdle closes connections idle for longer than IdleConnTimeout.
func (t *Transport) pruneIdle() {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := monotime.Now()
	next := int64(-1) // when the oldest connection left expires
	for _, l := range t.idle {
		cs := l.conns
		keep := cs[:0]
		for _, lc := range cs {
			exp := lc.idleAt + int64(t.idleFor)
			if now >= exp {
				lc.conn.Close()
				continue
			}
			keep = append(keep, lc)
			if next < 0 || exp < next {
				next = exp
			}
		}
		clear(cs[len(keep):])
		l.conns = keep
	}
	t.pruneArmed = next >= 0 && !t.closed
	if t.pruneArmed {
		t.prune.Reset(time.Duration(next - now))
	}
}

// CloseIdleConnections closes the pooled connections (and the
// Transport's); connections in use close when their response ends.
func (t *Transport) CloseIdleConnections() {
	t.mu.Lock()
	for _, l := range t.idle {
		for _, lc := range l.conns {
			lc.conn.Close()
		}
		clear(l.conns)
		l.conns = l.conns[:0]
	}
	t.mu.Unlock()
	t.fallback.CloseIdleConnections()
}
