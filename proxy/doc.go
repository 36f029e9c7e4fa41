// Package proxy owns the data path of one tether node (SPEC §2.1-§2.3, §6,
// §7): the http.Handler that matches a request to a route, resolves session
// affinity, picks a destination and forwards the request through Go's
// httputil.ReverseProxy (with Rewrite, never Director), and the listeners
// that serve it.
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
// Files: proxy.go (Proxy, ServeHTTP and the ReverseProxy hooks), runtime.go
// (building snapshots), compile.go (config checks), forwarded.go (forwarded
// headers and trace ids), errors.go (error mapping and bodies), metrics.go,
// accesslog.go, server.go (listeners, TLS, redirects, limits, shutdown).
package proxy
