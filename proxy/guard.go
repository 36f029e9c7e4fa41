package proxy

import (
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tether-proxy/tether/proxy/internal/monotime"
	"golang.org/x/net/http/httpguts"
)

// This file keeps clients from turning their own faults into backend
// faults: requests tether cannot forward faithfully are refused before
// routing, and a failing request body is blamed on the client, never on the
// destination (which passive health would then exclude).

// checkRequest refuses what tether must not forward, before routing. It
// returns 0 when the request may proceed.
func checkRequest(r *http.Request) int {
	if r.Method == http.MethodConnect {
		// tether is a reverse proxy: it does not tunnel.
		return http.StatusMethodNotAllowed
	}
	// The target goes into the backend's request line as it came: a
	// space would split that line, a raw byte above 0x7e is no URI's
	// (RFC 9112 section 3.2). HTTP/1's parsers refuse some of these, an
	// HTTP/2 :path may carry any; as Kestrel, both get 400.
	if !visibleASCII(r.RequestURI) {
		return http.StatusBadRequest
	}
	// HTTP/1 hosts are checked by net/http; HTTP/2's :authority is not:
	// the same check for both.
	if !httpguts.ValidHostHeader(r.Host) {
		return http.StatusBadRequest
	}
	// ReverseProxy refuses an upgrade to a protocol name that is not a
	// token only after a destination was chosen, as if the backend failed.
	if up, ok := r.Header["Upgrade"]; ok && httpguts.HeaderValuesContainsToken(r.Header["Connection"], "upgrade") {
		for _, v := range up {
			if !validUpgrade(v) {
				return http.StatusBadRequest
			}
		}
		// A tunnel that starts with a body of unknown length: nothing
		// legitimate does this, and it smuggles bytes either way.
		if len(r.TransferEncoding) > 0 {
			return http.StatusBadRequest
		}
	}
	return 0
}

// visibleASCII: every byte of s is a visible ASCII character (VCHAR).
func visibleASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c <= ' ' || c >= 0x7f {
			return false
		}
	}
	return true
}

// sanitize changes, before routing, what tether must not pass on as the
// client sent it:
//
//   - an h2c upgrade offer (and any HTTP2-Settings) is dropped (h2c smuggling: a backend that takes
//     it speaks HTTP/2 with the client over the upgraded connection, past
//     tether's routes, header rules and affinity); the request goes on as
//     plain HTTP/1.1, as it would to a server that does not speak h2c;
//   - an HTTP/1 request with a chunked body is answered with
//     "Connection: close". RFC 9112 §6.1 requires closing the connection
//     after a request with both Content-Length and Transfer-Encoding (a
//     smuggling attempt: a front end and a back end may disagree on where
//     the body ends). net/http drops such a Content-Length before any
//     handler runs, so tether cannot tell these from ordinary chunked
//     uploads and closes after all of them; without it, a request
//     pipelined behind the body would be served.
func sanitize(w http.ResponseWriter, r *http.Request) {
	if r.ProtoMajor != 1 {
		return // HTTP/2 and 3 have neither Upgrade nor Transfer-Encoding
	}
	if up, ok := r.Header["Upgrade"]; ok {
		dropH2C(r.Header, up)
	}
	// Connection-specific (RFC 9113 §3.2.1), meaningful only with an h2c
	// upgrade, which is never forwarded.
	delete(r.Header, "Http2-Settings")
	if len(r.TransferEncoding) > 0 {
		w.Header()["Connection"] = []string{"close"}
	}
}

// dropH2C removes h2c (and h2c/version) from the Upgrade header values up,
// and the header itself with HTTP2-Settings when nothing else is offered.
func dropH2C(h http.Header, up []string) {
	var keep []string
	changed := false
	for _, v := range up {
		var rest []string
		for tok := range strings.SplitSeq(v, ",") {
			name, _, _ := strings.Cut(strings.TrimSpace(tok), "/")
			if strings.EqualFold(strings.TrimSpace(name), "h2c") {
				changed = true
				continue
			}
			if strings.TrimSpace(tok) != "" {
				rest = append(rest, strings.TrimSpace(tok))
			}
		}
		if len(rest) > 0 {
			keep = append(keep, strings.Join(rest, ", "))
		}
	}
	if !changed {
		return
	}
	delete(h, "Http2-Settings")
	if len(keep) == 0 {
		delete(h, "Upgrade")
		return
	}
	h["Upgrade"] = keep
}

// validUpgrade accepts a comma-separated list of protocol[/version] tokens.
func validUpgrade(v string) bool {
	for i := 0; i < len(v); i++ {
		switch c := v[i]; {
		case c == ' ' || c == ',' || c == '/':
		case c < ' ' || c >= 0x7f || strings.IndexByte(`"():;<=>?@[\]{}`, c) >= 0:
			return false
		}
	}
	return true
}

// cleanPath removes "." and ".." segments (also percent-encoded ones) from
// r's path before routing, as Kestrel does before YARP sees a request, so
// "/public/../admin" cannot match a /public route. Like Kestrel it leaves
// what is not a dot segment on the wire alone: "..%2F" (one segment holding
// an encoded slash), "..;" and backslashes pass through encoded, so a
// backend that decodes them itself (nginx with %2F, Tomcat with ";", IIS
// with "\") must not be trusted to enforce path-based rules behind tether.
func cleanPath(r *http.Request) {
	esc := r.URL.EscapedPath()
	if !strings.Contains(esc, "/.") && !strings.Contains(esc, "%2e") && !strings.Contains(esc, "%2E") {
		return
	}
	segs := strings.Split(esc, "/")
	out := make([]string, 0, len(segs))
	for i, s := range segs {
		last := i == len(segs)-1
		switch dotSegment(s) {
		case 1: // "."
			if last {
				out = append(out, "")
			}
		case 2: // ".."
			if len(out) > 1 {
				out = out[:len(out)-1]
			}
			if last {
				out = append(out, "")
			}
		default:
			out = append(out, s)
		}
	}
	cleaned := strings.Join(out, "/")
	if cleaned == "" {
		cleaned = "/"
	}
	if cleaned == esc {
		return
	}
	// Never url.Parse the result: a cleaned "//x" would read as a host.
	if p, err := url.PathUnescape(cleaned); err == nil {
		r.URL.Path, r.URL.RawPath = p, cleaned
	}
}

// dotSegment is 1 for ".", 2 for "..", 0 otherwise (after decoding %2e).
func dotSegment(s string) int {
	n := 0
	for i := 0; i < len(s); {
		switch {
		case s[i] == '.':
			i++
		case len(s)-i >= 3 && s[i] == '%' && s[i+1] == '2' && (s[i+2] == 'e' || s[i+2] == 'E'):
			i += 3
		default:
			return 0
		}
		n++
	}
	if n > 2 {
		return 0
	}
	return n
}

// Client body failures, recorded by clientBody.
const (
	bodyOK int32 = iota
	bodyFailed
	bodyTimedOut
	// bodyTooSlow: slower than Limits.MinRequestBodyDataRate (rate.go).
	bodyTooSlow
)

// clientBody wraps the client's request body on its way to the backend: it
// records whether reading it failed (a malformed chunked body, a short
// HTTP/2 body) and extends an idle deadline on the client connection with
// every read, so a stalled upload cannot pin a backend connection for
// longer than the cluster's ActivityTimeout. It is allocated per request,
// apart from the pooled request state, because the transport may still read
// the body after the handler returned.
type clientBody struct {
	rc    io.ReadCloser
	ctl   *http.ResponseController
	idle  time.Duration
	state atomic.Int32

	// mu orders deadline changes against the handler's return: the
	// transport may still read after it, and a deadline set then would land
	// on the connection's next request.
	mu   sync.Mutex
	done bool
	// uploaded: the body reached EOF, so no deadline is needed any more.
	uploaded bool
	// armed is when the deadline was last pushed (UnixNano).
	armed atomic.Int64
	// h1: the request came over HTTP/1.x; eof: its body was read to the end.
	h1  bool
	eof atomic.Bool

	// rate is Limits.MinRequestBodyDataRate (none for an exempt request);
	// bytes read so far, the time spent in reads that have returned
	// (readNanos) and the start of the read in progress (readStart, 0
	// between reads), in monotime, for the heartbeat (rate.go).
	rate      dataRate
	bytes     atomic.Int64
	readNanos atomic.Int64
	readStart atomic.Int64
}

// mustClose reports whether the response to this request must close the
// connection: an HTTP/1 upload not read to its end when the response
// starts. net/http (golang/go#68560) would otherwise read the rest after
// the handler returned and, in full-duplex mode, start its background read
// too late, then panic reading the next request on the connection. Closing
// is also what net/http does without full duplex when it cannot swallow the
// rest, and what a client that is still uploading expects.
func (b *clientBody) mustClose() bool { return b.h1 && !b.eof.Load() }

// touch is activity in either direction (a response write, too): like
// YARP's ActivityTimeout, a full-duplex stream whose client pauses its
// upload while the response flows is not idle.
func (b *clientBody) touch() {
	now := time.Now()
	if now.UnixNano()-b.armed.Load() > int64(b.idle/8) {
		b.setDeadline(now.Add(b.idle))
	}
}

func (b *clientBody) Read(p []byte) (int, error) {
	if b.state.Load() == bodyTooSlow {
		return 0, errBodyTooSlow
	}
	timed := b.rate.on()
	if timed {
		b.readStart.Store(monotime.Now())
	}
	b.touch()
	n, err := b.rc.Read(p)
	if timed {
		b.bytes.Add(int64(n))
		end := monotime.Now()
		b.readNanos.Add(end - b.readStart.Swap(0))
	}
	if err == io.EOF {
		b.eof.Store(true)
		// Uploaded: a long response must not be cut by an upload deadline.
		b.setDeadline(time.Time{})
	}
	if err != nil && err != io.EOF {
		var mbe *http.MaxBytesError
		switch {
		case errors.As(err, &mbe):
			// classify answers 413 from the error itself.
		case errors.Is(err, os.ErrDeadlineExceeded):
			b.state.CompareAndSwap(bodyOK, bodyTimedOut) // or it was too slow
		default:
			b.state.CompareAndSwap(bodyOK, bodyFailed)
		}
	}
	return n, err
}

// errBodyTooSlow is a read of a body already found too slow.
var errBodyTooSlow = errors.New("request body slower than the minimum data rate")

func (b *clientBody) setDeadline(t time.Time) {
	if b.idle <= 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.done || b.uploaded {
		return
	}
	if t.IsZero() {
		b.uploaded = true
	}
	b.armed.Store(time.Now().UnixNano())
	_ = b.ctl.SetReadDeadline(t)
}

// finish is called as the handler returns: later reads (the transport may
// still be writing the body) leave the connection's deadline alone. A
// deadline already set stays, so net/http's discarding of an unread body
// after the handler cannot hang on a stalled client; net/http sets its own
// deadlines for the connection's next request.
func (b *clientBody) finish() {
	b.mu.Lock()
	b.done = true
	b.mu.Unlock()
}

func (b *clientBody) Close() error { return b.rc.Close() }

// idleConn is a backend connection with an idle read timeout: each read
// extends the deadline, so a backend that stops sending in the middle of a
// response is cut after the cluster's ActivityTimeout (YARP's meaning of it)
// instead of pinning the client and the connection forever.
type idleConn struct {
	net.Conn
	idle time.Duration
	// armed is when the deadline was last pushed (arm's clock): pushing it on
	// every read would cost a timer update per read.
	armed atomic.Int64
}

func (c *idleConn) Read(p []byte) (int, error) {
	c.arm()
	return c.Conn.Read(p)
}

// Write counts as activity too: a pooled connection picked for a new
// request gets a fresh idle window for its answer, even though the
// transport's read on it started long before.
func (c *idleConn) Write(p []byte) (int, error) {
	c.arm()
	return c.Conn.Write(p)
}

// arm pushes the read deadline to now+idle, at most every idle/8.
func (c *idleConn) arm() {
	now := monotime.Now()
	if now-c.armed.Load() > int64(c.idle/8) {
		c.armed.Store(now)
		_ = c.Conn.SetReadDeadline(time.Now().Add(c.idle))
	}
}

// NetConn is the connection underneath (the lean path reaches its socket
// through it).
func (c *idleConn) NetConn() net.Conn { return c.Conn }

// SetReadDeadline and SetDeadline let the transport and TLS set their own
// deadlines; the next read re-arms the idle deadline.
func (c *idleConn) SetReadDeadline(t time.Time) error {
	c.armed.Store(0)
	return c.Conn.SetReadDeadline(t)
}

func (c *idleConn) SetDeadline(t time.Time) error {
	c.armed.Store(0)
	return c.Conn.SetDeadline(t)
}
