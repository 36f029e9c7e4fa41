// Package cluster owns gossip membership (hashicorp/memberlist), the
// formation decision (BootstrapSet) and Raft voter reconciliation (Plan,
// Reconcile, Autopilot). Health gossip lives in cluster/healthgossip.
//
// Membership gossips each node's Meta (id, Raft and admin addresses,
// version, cluster id, formation and durability figures), encrypted with a
// key derived from the cluster secret, and keeps a table of every member
// (alive, suspect, dead, left) that one goroutine updates from memberlist's
// events and calls OnChange after. Handlers registered by tag carry other
// payloads over the same gossip (the destination health verdicts). Its
// gossip keys follow the node's cluster secrets (SetSecrets) while they
// rotate, and a guard reads every incoming stream's first frame within
// bounds before memberlist sees it (guard.go, StreamsRefused).
//
// Destination health verdicts are a payload kind of their own, owned by
// the sub-package healthgossip, which sees membership only through its
// Membership interface.
//
// Reconciliation talks to Raft through the small Raft interface declared
// here: this package never imports store/. See DESIGN.md.
package cluster
