// Package node owns one tether node's lifecycle: it loads the configuration,
// opens the keyring in the data directory, builds the data path, binds the
// proxy listeners and the admin listener, watches the configuration for
// reloads, and stops everything again in the reverse order.
//
// Start-up order: config, keyring, data path (health checkers start here),
// admin API, proxy listeners. Shutdown order: proxy listeners (stop
// accepting, let in-flight requests finish within the shutdown timeout),
// reload watcher, admin API, data path, keyring.
//
// The admin API's routes, guards and page live in package node/admin; the
// node hands it the endpoints' handlers (admin.go builds it): /readyz,
// /metrics, /v1/status, the keyring endpoints and destination drain, and
// GET /v1/events (events.go): a watcher compares the node's view (leader, members, keys,
// drains, health) after every change and publishes the differences to the
// admin package's bus, which replays its recent events and never waits for
// a slow reader.
//
// readiness.go: a node started to join with no state binds its proxy
// listeners without accepting until it is in the Raft configuration and
// holds the active key (--serve-before-join opens them at start).
// confirm.go: a drain answers once every live member confirmed, over
// gossip's direct messages, that it applied the drain's index to its data
// path (at most 2 s; the answer names the others). lock.go: the data dir's
// flock. idconflict.go: a live claim on this node's id stops the node that
// holds no state.
// ticketseed.go: the leader makes a random TLS session ticket seed per
// UTC day of the cluster time, held in memory only; members ask it for
// them over gossip (HMAC-authenticated requests, answers sealed under a
// one-time X25519 agreement and a key from the cluster secret), a new
// leader first takes the seeds the members hold, and the listeners'
// ticket keys (tlsticket.go) come from the keyring keys and the day's seed.
//
// The leader's duties (rotation, activation, revocation, pruning, voter
// reconciliation, the command-set gate, ACME orders) live in node/leader,
// which leader.go builds; the cluster time in node/clustertime. leave.go
// takes this node out of the cluster.
// Package cmd only wires flags into Config and calls Start and Shutdown;
// the demo (node/demo) and the admin API client (node/apiclient) are
// packages of their own. node/DESIGN.md draws the packages and the
// leader's rules.
package node
