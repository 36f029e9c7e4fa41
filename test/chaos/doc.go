// Package chaos holds tether's fault test, of the kind Jepsen runs: five
// `tether agent` processes (the built binary) on loopback, a nemesis that
// kills (-9), pauses (SIGSTOP), partitions, restarts, makes nodes leave and
// join again and moves a node to another address, while clients rotate,
// revoke, drain, undrain and push the cluster's config through random
// nodes' admin APIs and seal and open affinity cookies on every node's
// listener. Every operation is
// recorded (invoke, then ok, fail or info) with the status of every node
// polled four times a second, and a checker reads the history; see
// docs/OPERATIONS.md ("Fault test") for the rules, how to run it and its
// figures.
//
// The checker is a model check. With porcupine, each key of the keyring
// is an object with states (absent, installed, active or inactive,
// expired, revoked: a key is created installed, by a client's rotation or
// by the leader, activates, may expire, is revoked only by a revocation
// and never disappears within a run) and each destination's drain is a
// register; rotations, revocations, drains and undrains enter with their
// outcome (5xx and timeouts as operations of unknown outcome, which may
// take effect at any time after they were sent, or never; 4xx are left
// out), and reads of GET /v1/keyring and GET
// /v1/clusters/app/destinations with their results, when the node that
// answered was up and in the majority. Such a read may lag the leader by
// readLag (2 s): it enters as if sent that much earlier. Beside it:
//
//   - read-your-writes: after an acknowledged write, the client reads back
//     on the node that answered it; that read (and any later one there in
//     the same process) shows the write, and so must any read, on any node,
//     whose answer carries an X-Tether-Index at or past the write's;
//   - monotonic reads: a client's keyring reads on one node in one process,
//     or carrying indexes in order, never go back; each read sends the
//     highest X-Tether-Index the client saw, and an answer without an
//     X-Tether-Index, or with a lower one, is a violation;
//   - liveness: every acknowledged rotation is activated by the end; after
//     the last fault healed, a rotation is active on every node, and a
//     value sealed on each node opens on every node, within 5 s; every
//     committed key time lies within the run (a minute's slack; a day for
//     an installed key's activation), so automatic rotation keeps its
//     schedule, which counts from those times;
//   - revocation: once a revocation is acknowledged, values under the key
//     are refused by every node up and in the majority within 5 s;
//   - drains on the data path: a new session (a request without a cookie)
//     on a node up and in the majority never reaches a destination whose
//     drain was acknowledged 5 s before, and is never refused while one is
//     known undrained (an acknowledged undrain 5 s before, or no write);
//   - the cluster's config: the clients push two ReverseProxy sections in
//     turn (If-Match now and then), and every node's applied version (its
//     /v1/status config_version, polled) walks the committed versions
//     forward: never back within one process, never past what the pushes
//     sent by then could have made; acknowledged pushes keep the version
//     they were answered, one with If-Match N is N+1, and every node serves
//     the last version at the end;
//   - availability: at most 2% of the operations sent to nodes up and in
//     the majority end in a 5xx or a timeout.
//
// TestCheckRecordedHistory replays histories in testdata/ without a
// cluster: each shows a fault of the cluster as clients saw it and must be
// rejected; one recorded from a correct run must be accepted.
//
// Partitions need root: the test then runs itself in a private network
// namespace (unshare -n) where each node runs under its own uid and
// iptables drops, by owner, the packets between the two sides (Raft,
// gossip and admin ports). Without root, partitions are skipped and said
// so; the other faults run as they are.
package chaos
