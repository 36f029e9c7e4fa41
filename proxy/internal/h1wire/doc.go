// Package h1wire owns the bytes of HTTP/1.1 heads on tether's fast paths:
// writing a body-less request head as Request.Write would, parsing the
// common response head as http.ReadResponse would, and the field-line
// reader, header containers and field writer that the server loop shares
// for request heads and response fields. Each writer and parser declines
// what it does not handle before it writes or consumes a byte, so that the
// caller hands the same bytes to the standard library instead.
package h1wire
