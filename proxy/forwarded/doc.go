// Package forwarded owns what a proxied request says about its client:
// which peers are trusted (TrustedProxies), the client's address, scheme
// and trace id, and the forwarding headers written on the way to the
// backend (X-Forwarded-*, X-Original-*, X-Tether-Trace-Id, and RFC 7239's
// Forwarded), by tether's defaults or a route's X-Forwarded and Forwarded
// transforms (YARP's). What a client sends in their place is replaced,
// never trusted, unless the peer is trusted; spoofable fields and
// underscore spellings of framing and forwarding fields are dropped. The
// rules are proxy/DESIGN.md's "Forwarded headers and trust".
package forwarded
