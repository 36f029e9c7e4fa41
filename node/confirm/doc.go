// Package confirm makes a write's answer wait until every live member
// applied it.
//
// A drain (or undrain) answers once every live node applies it, not only
// the leader: a follower a moment behind would still send new sessions to
// the draining destination. After committing, the leader asks every other
// live member of the Raft configuration (gossip alive or suspect) directly
// over gossip's TCP messages to confirm the entry's index; a member waits
// until it applied that index and brought its data path in step, then
// answers with its id and the index. The leader waits for every answer,
// at most the bound the write gives (admin.ConfirmWait), and names the
// members that did not answer. Asking costs two small messages per member
// and write, and needs nothing kept in between (a new leader asks the same
// way); the members' own progress reports (gossip meta, the durable index)
// arrive a gossip round later.
package confirm
