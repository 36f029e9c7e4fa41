package frontdoor

import (
	"net/http"
	"strings"

	"github.com/tether-proxy/tether/proxy/internal/cancelhook"
)

// headerLimit answers 431 when the request line plus header block exceeds
// max bytes. net/http enforces MaxHeaderBytes with 4 KiB of slack; this
// makes the configured figure exact. ownH2: HTTP/2 is the own server's,
// whose handler goroutines have grown their stacks (below). acme, when not
// nil, answers its HTTP-01 validations (Server.acmeChallenge) among the
// requests within the limit before h: here rather than in a handler of
// its own, which every request would pass through for a path test.
func headerLimit(max int, ownH2 bool, acme *Server, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ProtoMajor >= 3 || r.ProtoMajor == 2 && !ownH2 {
			growStack() // a stream's goroutine may be new (below)
		}
		if p := cancelhook.Parsed(r.Context()); (p == "" || !ownHeadWithin(len("GET ")+len(p), max)) && headSize(r) > max {
			w.Header().Set("Connection", "close")
			http.Error(w, "request header fields too large", statusHeaderFieldsTooBig)
			return
		}
		if acme != nil && strings.HasPrefix(r.URL.Path, acmeChallengePath) && acme.acmeChallenge(w, r) {
			return
		}
		h.ServeHTTP(w, r)
	})
}

// headSize is r's request line and header block as headerLimit counts
// them: each line without its spaces around the value, with 4 for the
// separators.
func headSize(r *http.Request) int {
	n := len(r.Method) + len(r.RequestURI) + len(r.Proto) + 4
	for k, vs := range r.Header {
		for _, v := range vs {
			n += len(k) + len(v) + 4
		}
	}
	if r.Host != "" && r.Header["Host"] == nil {
		n += len("Host") + len(r.Host) + 4
	}
	return n
}

// ownHeadWithin says, from the size alone of a head the own HTTP/1.1
// loop parsed (cancelhook.Parsed: the head after "GET ", through its
// blank line), that headerLimit's count of it is within max; false means
// the count must be taken, over the header map. The loop's parser is
// strict (proxy/h1server/parser.go): the request line "GET " target
// " HTTP/1.1" CRLF counts exactly its bytes; a field line counts its
// name and its value without the spaces around it, plus 4, which is at
// most one more than its bytes (name, colon, CRLF), and has at least 4
// bytes ("X:" CRLF); the blank line counts nothing. So the count is at
// most size + size/4, and the Cache-Control the parser adds for
// "Pragma: no-cache" (net/http's fixPragmaCacheControl) counts 25 more.
// A head the loop takes is at most its 4 KiB buffer, far within the
// default 32 KiB: the map walk is left to heads of other servers and to
// limits lowered to near a head's size.
func ownHeadWithin(size, max int) bool {
	return size+size/4+len("Cache-Control")+len("no-cache")+4 <= max
}

// An HTTP/2 or HTTP/3 request's handler may run on a goroutine started for its
// stream, with the smallest stack, which the request path then outgrows:
// net/http's HTTP/2 server and quic-go's HTTP/3 server start one per
// stream, and the own HTTP/2 server (proxy/h2server) does when none of its
// kept handler goroutines is idle. Each growth copies the stack so far,
// and at the depth the proxy reaches (context lookups under ServeHTTP's
// large frame) the copies, with the pointer adjustment of every frame,
// were a fifth of the CPU of an h2c request. growStack grows it once, at
// the top of the handler, where there is almost nothing to copy, to what
// the request path uses; on a goroutine that has grown it already it
// costs the zeroing of its frame (8 KiB). The own HTTP/2 server grows
// its handler goroutines' stacks as it starts them, so its requests skip
// it; the own HTTP/1.1 loop's requests never take it.

// stackAhead is the frame growStack asks for: the runtime then doubles the
// stack until that frame fits, to stackGrownTo in one copy.
const (
	stackGrownTo = 16 << 10
	stackAhead   = stackGrownTo / 2
)

// growStack grows the calling goroutine's stack to stackGrownTo.
//
//go:noinline
func growStack() {
	var frame [stackAhead]byte
	keepFrame(frame[:])
}

//go:noinline
func keepFrame([]byte) {}
