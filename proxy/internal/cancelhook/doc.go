// Package cancelhook gives the own HTTP/1.1 loop's requests and the own
// HTTP/2 server's streams a context that runs one registered func when it
// is cancelled, without the child context, map entry and locks a
// context.AfterFunc costs per request (see Hook and Ctx).
package cancelhook
