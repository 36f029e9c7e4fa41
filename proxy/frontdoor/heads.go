package frontdoor

import "net/http"

// headerLimit answers 431 when the request line plus header block exceeds
// max bytes. net/http enforces MaxHeaderBytes with 4 KiB of slack; this
// makes the configured figure exact. ownH2: HTTP/2 is the own server's,
// whose handler goroutines have grown their stacks (below).
func headerLimit(max int, ownH2 bool, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ProtoMajor >= 3 || r.ProtoMajor == 2 && !ownH2 {
			growStack() // a stream's goroutine may be new (below)
		}
		n := len(r.Method) + len(r.RequestURI) + len(r.Proto) + 4
		for k, vs := range r.Header {
			for _, v := range vs {
				n += len(k) + len(v) + 4
			}
		}
		if r.Host != "" && r.Header["Host"] == nil {
			n += len("Host") + len(r.Host) + 4
		}
		if n > max {
			w.Header().Set("Connection", "close")
			http.Error(w, "request header fields too large", statusHeaderFieldsTooBig)
			return
		}
		h.ServeHTTP(w, r)
	})
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
