// Package keyring owns tether's encryption keys: the AES-256-GCM keys that
// seal affinity values (the Cookie, CustomHeader and envelope policies) and
// their life cycle: installed, active, inactive, expired, revoked (docs/API.md,
// "Client commands").
//
// The package knows nothing of Raft or HTTP. It is split so that the Raft FSM
// can replicate it deterministically:
//
//   - [GenerateKey] and [NewTicketSeed] are the only places that read
//     randomness; GenerateKey takes the clock as an argument. The leader
//     (or a standalone node) calls them.
//   - [Ring] holds the keys. Its state changes ([Ring.Install],
//     [Ring.Activate], [Ring.Revoke], [Ring.RevokeAndInstall],
//     [Ring.Remove], [Ring.Prune], [Ring.Restore]) read no
//     clock, no randomness and do no I/O, so an FSM may call them in Apply.
//     [Ring.Snapshot] returns the keys in a deterministic order.
//   - [Ring.Seal] and [Ring.Open] are the hot path (they satisfy
//     affinity.Keyring). They read the ring's clock to pick the active key
//     and to enforce expiry; they are safe for concurrent use and lock-free.
//   - [WrapKeys] and [UnwrapKeys] encrypt key material with a key-encryption
//     key derived from the cluster secret ([DeriveKEK]), for the Raft log,
//     snapshots and the keyring file; [WrapBlob] and [UnwrapBlob] do the
//     same for other secrets (ACME private keys), bound to a purpose.
//   - [Ring.TicketKeysWith] derives TLS session ticket keys (HKDF, a
//     purpose of their own), one per key and UTC day, from the key and
//     the day's random [TicketSeed]: the active key's of the day seals,
//     those of the last seven days of every key that still decrypts open,
//     so a ticket resumes on every node for at most [TicketKeyLifetime].
//     [TicketSeeds] holds the seeds in memory only (never in a snapshot,
//     backup or file) and erases them after seven days, so the keyring
//     keys alone (a backup and the cluster secret) yield no ticket key.
//     [Ring.TicketKeys] derives from the keys alone, the scheme of releases
//     before seeds, kept for clusters that still run one.
//   - [Secrets] holds the cluster secrets a node has while the secret
//     rotates (primary, installed, retired) and derives their KEKs: new
//     state wraps under the primary, peers' data opens under any accepted
//     secret, the node's own older state under any it still holds.
//   - [FileStore] keeps a ring in a file (atomic replace, mode 0600), and
//     [Manager] is the standalone node's convenience: load, ensure an active
//     key, rotate, revoke, prune, and save each change before reporting it.
//
// Key selection: the key that encrypts is the non-revoked, non-expired key
// with the latest activation time not after now (ties: later creation, then
// greater id). Exactly one key is "active": the one that encrypts, reported
// by [Ring.ActiveKeyID]. [Ring.List] calls the other activated, unexpired
// keys "inactive" (superseded, still decrypting); [Key.State] looks at one
// key alone and cannot tell the two apart. Every known, non-revoked key
// decrypts until its expiry plus the retention period (default 30 days), including keys installed but
// not yet active: a rotation therefore never causes a decrypt failure as long
// as a new key is installed everywhere before it activates. Revoked keys stop
// decrypting at once.
//
// Sealed value wire format, base64url without padding (strict decoding):
//
//	version (1 byte, 1) | id length (1 byte) | key id | nonce (12) | ciphertext+tag
//
// The AEAD's additional data is version | id length | key id | purpose, so a
// value is bound to its key and to its purpose (policy, cluster id, key name;
// see [Purpose]): a value from one cluster or policy does not open in
// another. Nonces are random (96 bits), so the number of values sealed with
// one key must stay well under 2^32: callers that seal the same plaintext
// often (the affinity engine, once per new session) reuse a sealed value
// while ActiveKeyID is unchanged instead of sealing per request.
//
// At rest: with a cluster secret, key material is wrapped with AES-256-GCM
// under a key derived with HKDF-SHA256. Without one, a standalone node keeps
// the material in PLAINTEXT in a file of mode 0600 in its data dir; anyone
// who can read that file can forge and read affinity values. Warning the
// operator about this is the caller's job.
//
// Key material never appears in String, Format, JSON, slog output or in any
// error of this package.
package keyring
