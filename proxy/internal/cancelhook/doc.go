// Package cancelhook gives the own HTTP/1.1 loop's requests and the own
// HTTP/2 server's streams a context that runs one registered func when it
// is cancelled, without the child context, map entry and locks a
// context.AfterFunc costs per request (see Hook and Ctx). The loop's
// context also carries the string the request's head was parsed from
// (Parsed), so that the lean transport need not check again what the
// loop's parser checked.
package cancelhook
