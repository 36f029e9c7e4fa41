// Package admin is a node's admin API: its route table, the guards every
// route passes (the bearer token, the same-site rule against cross-site
// requests and DNS rebinding), the endpoints' handlers and their JSON and
// error answers, the cluster page at /ui/ with its embedded assets, and
// the live event stream of GET /v1/events.
//
// It does not import the node. API holds the handlers and reaches the node
// through the interfaces it declares (Store, Proxy, Gossip, Node), as
// rqlite's HTTP service reaches its store; the node fills them and serves
// API.Handler.
//
// The write path (forward.go, reads.go): a read waits for the index a
// client asks for (AtIndex, X-Tether-Index); a write runs on the leader,
// forwarded from a follower in one hop to the leader's admin address from
// gossip, retried once with the same request id when leadership is lost
// (Writes.OnLeader), and its failure answered by WriteApplyError. A
// follower answers a forwarded write once it applied the index of the
// leader's answer.
//
// Events (watch.go, events.go): a watcher compares the node's view
// (leader, members, keys, drains, health) after every change and publishes
// the differences to a bus (Bus) that keeps the recent events for replay
// after a Last-Event-ID and never waits for a slow reader (it cuts the
// reader off; the reader reconnects and is replayed what it missed).
//
// The routes, JSON shapes, status codes and headers are the admin API's
// contract, described in docs/API.md.
package admin
