// Package proxy owns the data path of one tether node: the http.Handler
// that matches a request to a route, resolves session affinity, picks a
// destination and forwards the request. The listeners that serve it (TLS,
// ACME, limits, graceful shutdown) are package proxy/frontdoor's, which
// takes any http.Handler; node puts this one behind it. Forwarding goes
// through Go's httputil.ReverseProxy (with Rewrite, never Director) and one
// shared transport per cluster; a request without a body to an http://
// destination takes the direct path instead: ReverseProxy's steps in its
// order, through the same hooks, on the handler's pooled request state,
// sent by the lean transport (package proxy/lean) with its explicit
// direct-path call. Every rule of the contract in DESIGN.md (forwarded
// headers and trust, the one retry, errors, affinity, passive health,
// metrics, the access log, the WAF) is kept here or in the package named
// for it.
//
// Everything a request needs lives in one immutable runtime snapshot (route
// table, per-cluster destinations, load balancer, affinity providers, one
// shared transport and ReverseProxy per cluster, health checkers, pre-bound
// metrics) behind an atomic pointer. Update builds a new snapshot, reusing
// the upstream.Destination objects whose configuration is unchanged so that
// health, drain state and in-flight counts survive a reload, swaps it in,
// and only then stops the old health checkers and closes the old
// transports' idle connections; in-flight requests finish on the old ones.
//
// The parts it uses have packages of their own: the forwarding headers
// and trust (proxy/forwarded), the checks before routing (proxy/hygiene),
// the error answers (proxy/errpage), the access log's writer
// (proxy/accesslog), route timeouts (proxy/routetimeout), the lean
// backend transport (proxy/lean), and the
// route table, load balancing, affinity, health, transforms, WAF, DNS
// cache and tracing under proxy/. DESIGN.md walks one request through
// them.
package proxy
