// Package admin is the front of a node's admin API: its route table, the
// guards every route passes (the bearer token, the same-site rule against
// cross-site requests and DNS rebinding), the JSON and error answers, the
// cluster page at /ui/ with its embedded assets, and the live event stream
// of GET /v1/events: a bus (Bus) that keeps the recent events for replay
// after a Last-Event-ID and never waits for a slow reader (it cuts the
// reader off; the reader reconnects and is replayed what it missed).
//
// It does not import the node. The node publishes the events it sees to
// the bus and hands the package what else it needs: the handler of each
// endpoint (Handlers), the wrappers that make a read wait for the index a
// client asks for and send a write to the leader, the token and the host
// names it answers to (Config). The routes, JSON shapes, status codes and
// headers are the admin API's contract, described in docs/API.md.
package admin
