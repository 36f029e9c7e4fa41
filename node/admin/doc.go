// Package admin is the front of a node's admin API: its route table, the
// guards every route passes (the bearer token, the same-site rule against
// cross-site requests and DNS rebinding), the JSON and error answers, and
// the cluster page at /ui/ with its embedded assets.
//
// It does not import the node. The node hands it what it needs: the
// handler of each endpoint (Handlers), the wrappers that make a read wait
// for the index a client asks for and send a write to the leader, the
// token and the host names it answers to (Config). The routes, JSON shapes,
// status codes and headers are the admin API's contract, described in
// README.md, "Admin API and client commands".
package admin
