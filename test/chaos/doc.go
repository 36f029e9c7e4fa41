// Package chaos holds tether's fault test, of the kind Jepsen runs: five
// `tether agent` processes (the built binary) on loopback, a nemesis that
// kills (-9), pauses (SIGSTOP), partitions, restarts, makes nodes leave and
// join again and moves a node to another address, while clients rotate,
// revoke, drain and undrain through random nodes' admin APIs and seal and
// open affinity cookies on every node's listener. Every operation is
// recorded (invoke, then ok, fail or info) with the status of every node
// polled four times a second, and a checker reads the history; see
// docs/OPERATIONS.md ("Fault test") for the rules, how to run it and its
// figures.
//
// Partitions need root: the test then runs itself in a private network
// namespace (unshare -n) where each node runs under its own uid and
// iptables drops, by owner, the packets between the two sides (Raft,
// gossip and admin ports). Without root, partitions are skipped and said
// so; the other faults run as they are.
package chaos
