// Package proxy owns the data path of one tether node (SPEC §2.1-§2.3, §6,
// §7): the http.Handler that matches a request to a route, resolves session
// affinity, picks a destination and forwards the request through Go's
// httputil.ReverseProxy (with Rewrite, never Director), and the listeners
// that serve it. A request without a body to an http:// destination takes
// the direct path instead (direct.go): the same hooks in ReverseProxy's
// order, without its per-request copies, over lean.go's pool of HTTP/1.1
// connections with leanwire.go's request writer and response parser for
// the common case (the standard library's for the rest). On cleartext
// HTTP/1.1 listeners, plain GETs are read and answered by a server loop of
// tether's own (h1.go), which hands a connection to net/http's server at
// its first other request, parks a connection that has made few requests
// on a goroutine of the smallest stack while it is idle, and waits for a
// kept-alive connection's next request on a second descriptor of its
// socket (h1wait.go), so that a request costs one read, not a peek and a
// read; cancelhook.go lets that loop's requests close
// their backend connection on cancel without a context.AfterFunc each.
// Every TCP connection the proxy accepts or dials is a sockConn
// (sockio.go), whose reads and writes are raw system calls, so a slow
// loopback write does not hand the scheduler's P to another thread; on
// one P each write first yields, so that a round's writes leave together
// and wake the other CPU once (writeYield).
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
// accesslog.go, server.go (listeners, TLS, redirects, limits, shutdown),
// guard.go (what is refused or changed before routing: h2c, chunked
// HTTP/1 closes, dot segments, client body faults), xforwarded.go (YARP's
// X-Forwarded and Forwarded transforms), backendtls.go (CA bundle, client
// certificate, SNI), bounds.go (bounded waits, response header size,
// passive health at the end of a body), retry.go (one retry after a
// connect failure), validate.go (Compile registered with config.Parse),
// listener.go (Kestrel endpoint settings: protocols, TLS versions, client
// certificates, the self-signed stand-in certificate, the connection cap),
// tlsticket.go (TLS session tickets sealed with the cluster's keys, so a
// session resumes on any node), acme.go (listeners whose certificate comes
// from ACME, and the HTTP-01 and TLS-ALPN-01 answers, from an AcmeSource),
// timeout.go (route Timeout), refusal.go (the Return503Error body),
// lean.go, leanwire.go, direct.go, h1.go, h1wait.go, cancelhook.go and
// sockio.go (the fast path above), warmdns.go (destination names looked up
// when a configuration is in place), keepalive_linux.go (client TCP keep-alive set once on the
// listening socket, which accepted sockets inherit).
package proxy
