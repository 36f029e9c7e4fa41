// Package gate holds a node's proxy listeners closed until the node may
// serve. A node started to join a cluster (--join or --bootstrap-expect)
// with no cluster state of its own cannot open the cluster's affinity
// values: a session it took would move to another destination. Its proxy
// listeners are bound (the ports are held, a port in use fails the start)
// but do not accept until the node is in the cluster's Raft configuration
// and holds the active key: a client's connection is refused, and a client
// behind DNS tries another address. --serve-before-join opens them at
// start. A node with state from an earlier run serves from it at once,
// leader or not.
package gate
