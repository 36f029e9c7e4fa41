// Package store will own Raft (hashicorp/raft with raft-boltdb/v2 and file
// snapshots): the deterministic FSM that replicates the keyring and
// destination drain state, the log store, snapshots, transport and leader
// forwarding. It is empty until the Raft issue; nothing imports it yet.
package store
