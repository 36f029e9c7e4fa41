// Package errpage owns the answers tether writes itself when a request
// fails: a fixed plain-text page per status (never an address, an error
// string or a stack trace), and, for a gRPC call (IsGRPC), a trailers-only
// gRPC status mapped as gRPC's own HTTP-to-gRPC table maps it, which a
// gRPC client reads where it would take a text/plain answer for a
// transport failure.
package errpage
