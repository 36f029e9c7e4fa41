package hygiene

import (
	"net/http"
	"net/url"
	"strings"

	"golang.org/x/net/http/httpguts"
)

// Check refuses what tether must not forward, before routing. It
// returns 0 when the request may proceed.
func Check(r *http.Request) int {
	return check(r, true)
}

// CheckParsed is Check for a request whose head a parser refused with
// any Upgrade or Transfer-Encoding field (tether's own HTTP/1.1 loop's):
// the look for an upgrade, which would find none, is left out.
func CheckParsed(r *http.Request) int {
	return check(r, false)
}

func check(r *http.Request, upgrade bool) int {
	if r.Method == http.MethodConnect {
		// tether is a reverse proxy: it does not tunnel.
		return http.StatusMethodNotAllowed
	}
	// The target goes into the backend's request line as it came: a
	// space would split that line, a raw byte above 0x7e is no URI's
	// (RFC 9112 section 3.2). HTTP/1's parsers refuse some of these, an
	// HTTP/2 :path may carry any; as Kestrel, both get 400.
	if !VisibleASCII(r.RequestURI) {
		return http.StatusBadRequest
	}
	// HTTP/1 hosts are checked by net/http; HTTP/2's :authority is not:
	// the same check for both.
	if !httpguts.ValidHostHeader(r.Host) {
		return http.StatusBadRequest
	}
	// ReverseProxy refuses an upgrade to a protocol name that is not a
	// token only after a destination was chosen, as if the backend failed.
	if !upgrade {
		return 0
	}
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

// VisibleASCII: every byte of s is a visible ASCII character (VCHAR).
func VisibleASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c <= ' ' || c >= 0x7f {
			return false
		}
	}
	return true
}

// Sanitize changes, before routing, what tether must not pass on as the
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
func Sanitize(w http.ResponseWriter, r *http.Request) {
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

// CleanPath removes "." and ".." segments (also percent-encoded ones) from
// r's path before routing, as Kestrel does before YARP sees a request, so
// "/public/../admin" cannot match a /public route. Like Kestrel it leaves
// what is not a dot segment on the wire alone: "..%2F" (one segment holding
// an encoded slash), "..;" and backslashes pass through encoded, so a
// backend that decodes them itself (nginx with %2F, Tomcat with ";", IIS
// with "\") must not be trusted to enforce path-based rules behind tether.
func CleanPath(r *http.Request) {
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
