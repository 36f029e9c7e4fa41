// Package apiclient is the client of a node's admin API, shared by the
// tether CLI's client commands and the tests. It sends one request, reads
// the answer, and turns what goes wrong on the way into errors that say
// what to check: nothing listening at the address, a port that does not
// speak HTTP, an answer that is not the admin API's JSON, or the API's own
// "error" text with the status code.
//
// It knows the API's conventions (bearer token, JSON bodies, the "error"
// field of a refusal); callers name the paths, except for the cluster's
// configuration (config.go), whose refusals carry more than a message:
// every validation error with its JSON path (400), the cluster's current
// version when an If-Match is stale (412).
// It imports nothing of tether, so the node, the CLI and the tests can all
// depend on it.
package apiclient
