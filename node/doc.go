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
// The admin API (its routes, guards, handlers, write forwarding, events and
// page) lives in package node/admin, behind the interfaces it declares;
// admin.go builds it over the node's store and proxy, and adminwire.go
// adapts the node to it. A drain's wait for every live member to apply it
// lives in node/confirm.
//
// node/gate: a node started to join with no state binds its proxy
// listeners without accepting until it is in the Raft configuration and
// holds the active key (--serve-before-join opens them at start);
// readiness.go says what it waits for.
// lock.go: the data dir's flock. idconflict.go: a live claim on this
// node's id stops the node that holds no state. members.go: the members'
// view (gossip joined with the Raft configuration); durable.go: the
// members' durable-index reports to the leader; addrs.go: the addresses
// this node advertises. node/DESIGN.md lists these types.
//
// Keys and TLS session ticket seeds move between nodes in package
// node/keyshare, which keyshare.go opens with gossip.
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
