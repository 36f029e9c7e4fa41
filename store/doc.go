// Package store owns Raft for tether: one [Store] type behind
// which hashicorp/raft runs with raft-boltdb/v2 as log and stable store
// (behind a log cache), file snapshots, and a stream layer of its own
// (store/transport).
//
// What it replicates is small: the keyring (installed into a shared
// keyring.Ring the data path reads), destination drains, the cluster id,
// the ACME state (named values the node's ACME manager writes: account,
// certificates with their keys, pending challenges, status) and the recent
// request ids that make a retried write a no-op. Writes go through
// [Store.Apply] on the leader as typed commands ([InstallKey],
// [ActivateKey], [RevokeKey], [PruneKeys], [SetDrain], [ClearDrain],
// [SetClusterID], [AcmeWrite], ...: store/command defines them and their
// log entry format); reads ([Store.ClusterID], [Store.Drains],
// [Store.Acme], the Ring) are local and never wait on Raft.
//
// The FSM is deterministic: a one-byte command type, a versioned body, no
// clock, randomness or I/O in Apply (the leader puts its clock in the
// command and generates keys itself; committed times never go backwards).
// An entry this binary cannot apply is skipped only when its command says
// older nodes may ignore it; otherwise the FSM stops applying there and
// names the version it needs ([Store.Stopped]), never counting the entry as
// held. Snapshots name their format and the command set applied into them
// and decode strictly: one this binary cannot fully understand stops the
// FSM the same way. Members advertise their [CommandSet] and the node's gate
// ([Store.SetCommandGate]) keeps the leader from writing a command some
// member does not apply. Key material, and the ACME state's private keys,
// are wrapped in the log and in snapshots with a key derived from the
// cluster secret (keyring.DeriveKEK, keyring.InfoRaft). The cluster secret
// rotates through the log ([ClusterSecret]): the node's keyring.Secrets
// follow the replicated records, and state wraps under the primary and
// opens under any secret the node holds.
//
// Every Raft connection is TLS 1.3 in which both ends prove knowledge of
// the cluster secret and their cluster id, bound to the TLS session (peers
// of two clusters that share a secret refuse each other); with [TLSFiles] the
// certificates must also chain to the cluster CA. Host names are resolved
// on every dial. Refused connections are counted by reason ([Store.Refused])
// and logged once per reason every 30 s; handshake version 1 follows the
// node's policy ([Store.SetLegacyHandshake]).
//
// After every state change a snapshot is taken off the Apply path, so a
// node restarted without a quorum (raft then restores only its last
// snapshot) still has every key and drain it had applied; [Store.DurableIndex]
// reports how far that goes, and [Store.PersistFailure] whether the disk
// takes them. DESIGN.md explains the request path, the
// formats, the timings and the trade-offs. Raft's own log lines go through
// store/raftlog.
//
// The package knows nothing of memberlist or HTTP: node/ wires it.
package store
