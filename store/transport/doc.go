// Package transport is the Raft stream layer of tether's store: a
// raft.StreamLayer over TCP in which every connection is TLS 1.3 and both
// ends prove knowledge of the cluster secret (and, in handshake version 2,
// their cluster id) bound to that TLS session. With [TLSFiles] the
// certificates must also chain to the cluster CA; the files are read again
// at every handshake, so replacing them rotates certificates.
//
// It owns the handshake's wire format, the refusal reasons ([Layer.Refused],
// logged once per reason every 30 s) and cutting connections: those made
// with a secret the node no longer accepts, and all of them at shutdown
// ([Layer.CloseAll]). It knows the cluster secrets only through
// keyring.Secrets and nothing of raft's log or FSM: store opens it and hands
// it to raft's network transport.
package transport
