// Package lean owns tether's second backend transport: an
// http.RoundTripper for HTTP/1.1 requests without a body to cleartext
// destinations, which writes the request and reads its response on the
// calling goroutine over a LIFO pool of persistent connections dialled by
// the cluster's http.Transport, and hands everything else to that
// Transport unchanged. RoundTripDirect (and RetryDirect for a retry's
// clone) is the entry of a caller's own forwarding path: the request was
// checked with Covers already, and the caller keeps the response's parts
// and the target of its 1xx responses in a Direct that it reuses request
// after request.
package lean
