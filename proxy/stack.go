package proxy

// An HTTP/2 request's handler runs on a goroutine net/http starts for its
// stream, with the smallest stack, which the request path then outgrows:
// each growth copies the stack so far, and at the depth the proxy reaches
// (context lookups under ServeHTTP's large frame) the copies, with the
// pointer adjustment of every frame, were a fifth of the CPU of an h2c
// request. growStack grows it once, at the top of the handler, where there
// is almost nothing to copy, to what the request path uses (the own
// HTTP/1.1 loop's goroutines keep theirs from one request to the next, so
// they never pay it).

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
