// Package secrets owns a node's cluster secrets apart from the Raft state
// (store/secrets.go keeps their records, keyring.Secrets the secrets
// themselves):
//
//   - Load reads --cluster-secret-file, or makes and keeps the secret of a
//     node of its own (local-secret in the data dir, written whole with
//     mode 0600 through internal/atomicfile).
//   - Keeper keeps the secrets a node holds in cluster-secrets.json once
//     they differ from its secret file, and gives gossip their keys and
//     ids after every change.
//   - Rotation serves GET /v1/secrets and the secret writes (install, use,
//     remove) on the node's write path, which the node hands it (Writes).
//   - HandshakeV1Allowed is the policy for Raft handshake version 1.
//
// store/DESIGN.md, "Cluster secret rotation", has the rules; package node
// wires it (node/secrets.go).
package secrets
