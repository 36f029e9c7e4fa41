package h2server

import (
	"net/http"
	"net/url"
)

// streamScratch is what a stream's request and response are built in and
// the connection's later streams reuse once the handler has returned: the
// request's header map and URL, the response's header map. A handler
// does not hold on to r.Header, r.URL or w.Header() once it has returned,
// as tether's proxy never does (the own HTTP/1.1 loop asks the same);
// the strings they hold stay the request's own and may be kept.
type streamScratch struct {
	req, resp http.Header
	url       url.URL
}

// maxScratch bounds the containers a connection keeps; maxScratchFields,
// the fields of a map kept (one grown by a large head is dropped).
const (
	maxScratch       = 16
	maxScratchFields = 32
)

func (c *conn) takeScratchLocked() *streamScratch {
	if n := len(c.scratch); n > 0 {
		sc := c.scratch[n-1]
		c.scratch[n-1] = nil
		c.scratch = c.scratch[:n-1]
		return sc
	}
	return &streamScratch{}
}

func (c *conn) putScratchLocked(sc *streamScratch) {
	if len(c.scratch) >= maxScratch || c.closed {
		return
	}
	if len(sc.req) > maxScratchFields {
		sc.req = nil
	}
	if len(sc.resp) > maxScratchFields {
		sc.resp = nil
	}
	c.scratch = append(c.scratch, sc)
}

// reqHeader is the request's header map, empty, for n fields.
func (sc *streamScratch) reqHeader(n int) http.Header {
	if sc.req == nil {
		sc.req = make(http.Header, max(n, 8))
	} else {
		clear(sc.req)
	}
	return sc.req
}

// respHeader is the response's header map, empty.
func (sc *streamScratch) respHeader() http.Header {
	if sc.resp == nil {
		sc.resp = make(http.Header, 8)
	} else {
		clear(sc.resp)
	}
	return sc.resp
}
