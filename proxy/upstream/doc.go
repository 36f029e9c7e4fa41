// Package upstream holds the runtime state of clusters and destinations that
// the data path's parts share: a destination's configuration plus small
// atomic state (in-flight count, probe health, passive exclusion, drain
// deadline) written by the health checkers and the admin API and read by
// load balancing and affinity on every request.
//
// Two questions decide where a request may go: AcceptsNew (healthy and not
// draining: new sessions and requests without affinity) and AcceptsExisting
// (healthy and before any drain deadline: requests of an existing
// affinitized session). Cluster.Available caches the AcceptsNew list so a
// request costs one atomic load, not a scan of the cluster.
//
// tls.go loads a cluster's backend TLS trust (CA bundle, client
// certificate) and dials TLS itself so that each connection's server name
// follows its destination's Host. protocol.go turns YARP's
// HttpRequest.Version, VersionPolicy and HttpClient.SslProtocols into the
// transport's protocols and TLS versions. dial.go bounds each connection
// attempt by ConnectTimeout, so an address that answers no SYN is a
// connect failure (and the request is retried elsewhere) in 2 s.
// CompileTLS turns a cluster's HttpClient TLS settings into its BackendTLS
// and each https destination's server name (compiletls.go).
package upstream
