// Package frontdoor owns a node's front door: the listeners that take
// clients' connections and serve them with any http.Handler. It binds the
// configured addresses (or reserves them first, refusing connections until
// the node is ready), caps the open connections, serves TLS (certificate
// files, self-signed, SNI selection, reload without restart), seals TLS
// session tickets with the cluster's shared keys (TicketKeySource), keys
// QUIC's address-validation tokens and stateless resets alike
// (QUICKeySource), serves the certificates and challenge answers of ACME
// (AcmeSource), answers redirect listeners and bounds request heads, and
// stops gracefully.
// HTTP/1.1 is served by the own loop (proxy/h1server) in front of
// net/http's server, HTTP/2 by the own server (proxy/h2server) or net/http's,
// chosen by an Option, HTTP/3 by quic-go's http3 server on a UDP socket
// of the listener's port. It knows nothing of routes or backends: the handler
// behind it is the proxy's (package proxy), and node wires the two.
package frontdoor
