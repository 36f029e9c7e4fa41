// Package h2server is tether's own HTTP/2 server: it serves the HTTP/2
// connections of an http.Server (ALPN h2 over TLS, and h2c with prior
// knowledge) with that server's handler, in the place of net/http's bundled
// HTTP/2 server.
//
// Framing and header compression are golang.org/x/net/http2's Framer and
// hpack; a request's header block (HEADERS and CONTINUATION frames) is
// decoded by the server into containers the connection reuses, with the
// checks, the header list limit and the errors of the Framer's
// ReadMetaHeaders; a HEADERS frame that holds a whole block and fits in the
// read buffer is parsed from that buffer rather than by the Framer, which
// allocates each HEADERS frame it reads. The connection's one goroutine reads and acts on frames; each
// stream's handler runs on a goroutine of its own (one kept from an
// earlier stream when one waits) and writes its frames itself, under the
// connection's lock, into the connection's one write buffer, so a
// response without a body larger than the buffer leaves in one write and
// no frame goes through a scheduler or a channel. What it keeps, as
// net/http's server keeps it:
//
//   - SETTINGS and their acknowledgement, PING, connection and stream flow
//     control in both directions (a request body is read by the handler
//     with backpressure: the window is given back as the handler reads);
//   - stream states, MaxConcurrentStreams (a stream beyond it is refused
//     with REFUSED_STREAM) and RST_STREAM in both directions;
//   - the header list limit (a block over it gets 431; one far over it, or
//     a CONTINUATION flood, fails the connection, as the Framer bounds it);
//   - rapid reset: handlers run at most MaxConcurrentStreams at a time, the
//     rest wait, and a client that makes more than four times that many
//     wait gets GOAWAY ENHANCE_YOUR_CALM;
//   - GOAWAY on shutdown, the streams in flight finishing first, and on the
//     idle timeout;
//   - trailers both ways, 1xx responses, Expect: 100-continue, and
//     http.ResponseController's Flush, SetReadDeadline and SetWriteDeadline.
//
// A response whose declared Content-Length is all written ends with the
// frame that carries its last bytes (END_STREAM), when the handler sends
// them (a flush, or a write past the buffer) rather than with an empty
// DATA frame once it returns, unless trailers may follow: a "Trailer"
// field declared before WriteHeader, or a field with http.TrailerPrefix
// set by then. A trailer first set with http.TrailerPrefix after such a
// response has ended is not sent.
//
// One difference a handler must keep to, as with the own HTTP/1.1 loop:
// a connection's streams reuse the request's header map and URL and the
// response's header map once the handler has returned (streamScratch), so
// the handler does not hold on to r.Header, r.URL or w.Header() after it
// returns, as tether's proxy never does (the strings they hold stay the
// request's own and may be kept).
package h2server
