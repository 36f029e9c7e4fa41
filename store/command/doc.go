// Package command is what the store's Raft log holds: the commands
// ([InstallKey], [ActivateKey], [RevokeKey], [PruneKeys], [SetDrain],
// [ClearDrain], [SetClusterID], [SetClock], [AcmeWrite], [ClusterSecret]),
// their entry format (a type byte, a body version, a JSON body; key
// material and secret ACME values wrapped with the cluster secret's KEK),
// the request id and binding every body carries, and the [CommandSet]s
// members gossip to say which types and versions they apply.
//
// [Encode] runs on the leader (wrapping reads randomness) and refuses to
// write what [Decode] would not read back; Decode reads no clock and no
// randomness, so the FSM may call it, and is written for untrusted input.
// The package knows nothing of Raft or of the state the commands change:
// store applies them and names them as its own.
package command
