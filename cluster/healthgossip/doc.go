// Package healthgossip owns destination health shared over gossip: each
// node's versioned probe verdicts about destinations, spread as broadcasts
// that every node relays once, healed by digests and pulls, and the same
// cluster view computed on every node: the majority of the destination's
// current probers, chosen by rendezvous hashing over alive members
// (Probers, ShouldProbe, View, Effective).
//
// It rides a gossip membership through the small Membership interface
// (cluster.Membership implements it) as one payload kind, and knows
// nothing of the proxy's probes: the node reports verdicts and acts on the
// view. See DESIGN.md.
package healthgossip
