// Package keyshare owns moving keys and TLS session ticket seeds between
// nodes over gossip, apart from the Raft log:
//
//   - DataKeys is the keyring the data path sees: for a value under a key
//     id this node does not hold, a bounded wait for the log to bring the
//     key or the leader to send it, before the value is treated as invalid
//     (counted by reason, logged at once and then once a minute).
//   - Transfer asks the leader for every key this node lacks and answers
//     such requests when this node leads; the keys travel wrapped under a
//     KEK derived from the cluster secret (keyring.InfoTransfer).
//   - Seeder keeps the TLS session ticket seeds: the leader makes one per
//     UTC day of the cluster time, in memory only; members ask it for them
//     (HMAC-authenticated requests, answers sealed under a one-time X25519
//     agreement), and the listeners' ticket keys (TicketSource) come from
//     the keyring keys and the day's seed.
//
// Both exchanges are one gossip request/reply pair each (gossip.go): a
// request queues for one server goroutine, a reply reaches the asker
// waiting under its nonce. The package knows the store and gossip only
// through the small Store and Gossip interfaces; package node wires them
// (node/keyshare.go) and runs Transfer.Serve and Seeder.Run with its
// background work. node/DESIGN.md, "Keys and ticket seeds between nodes",
// has the rules.
package keyshare
