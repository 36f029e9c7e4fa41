// Package hygiene owns the checks and repairs a request gets before
// routing, so that tether never forwards what it cannot forward
// faithfully: Check refuses CONNECT, request targets with bytes no URI
// has, invalid hosts and upgrades and tunnels that would smuggle bytes;
// Sanitize drops h2c upgrade offers and closes the connection after a
// chunked HTTP/1 body; CleanPath removes dot segments, as Kestrel does
// before YARP sees a request. Each is a function of the request alone.
// RemoveHopByHop drops a request's or a response's hop-by-hop fields, as
// ReverseProxy does.
package hygiene
