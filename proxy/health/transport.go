package health

import (
	"net/http"
)

// Probes never share the data path's connection pool: a cluster whose
// MaxConnectionsPerServer is filled by long requests would otherwise make a
// probe wait for a slot until its timeout, and mark a live destination
// unhealthy. NewActive therefore gives each checker its own small transport,
// cloned from the cluster's (same dialer, DNS cache, TLS settings, client
// certificate and server names), with no connection limit, one idle
// connection per destination and no response-header timeout of its own (the
// probe Timeout bounds the whole probe). Stop closes its idle connections.

// probeIdleConnsPerHost keeps one warm connection per destination between
// rounds: probes of one destination never overlap.
const probeIdleConnsPerHost = 1

// ProbeTransport returns the small transport a checker probes with, built
// from the cluster's data-path transport base; base itself is not changed.
func ProbeTransport(base *http.Transport) *http.Transport {
	t := base.Clone()
	t.MaxConnsPerHost = 0
	t.MaxIdleConnsPerHost = probeIdleConnsPerHost
	t.MaxIdleConns = 0
	t.ResponseHeaderTimeout = 0
	t.DisableCompression = true
	return t
}

// probeTransport is what NewActive probes with: its own copy of an
// *http.Transport (owned, closed at Stop), any other RoundTripper (a test
// fake) as it is, and http.DefaultTransport's copy for nil.
func probeTransport(rt http.RoundTripper) (http.RoundTripper, *http.Transport) {
	switch t := rt.(type) {
	case nil:
		own := ProbeTransport(http.DefaultTransport.(*http.Transport))
		return own, own
	case *http.Transport:
		own := ProbeTransport(t)
		return own, own
	default:
		return rt, nil
	}
}
