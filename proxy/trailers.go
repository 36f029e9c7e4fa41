package proxy

import "net/http"

// keepTrailers lets a response's trailers reach an HTTP/1 client. An
// HTTP/2 backend may send Content-Length together with trailers (Go's own
// HTTP/2 server does for short bodies); copied to an HTTP/1 client that
// length rules out chunked encoding, and with it the trailers, which
// ReverseProxy then drops (gRPC status, checksums). Without the length the
// client gets a chunked body and the trailers; HTTP/2 clients see no
// difference. Runs after the trailer transforms declared what is sent.
func keepTrailers(resp *http.Response) {
	if len(resp.Trailer) == 0 || resp.StatusCode == http.StatusSwitchingProtocols {
		return
	}
	delete(resp.Header, "Content-Length")
	resp.ContentLength = -1
}
