package cluster

import (
	"crypto/hkdf"
	"crypto/sha256"
	"errors"
)

// gossipKeyInfo separates the gossip key from every other key derived from
// the cluster secret (Raft TLS, keyring wrapping use their own info strings).
const gossipKeyInfo = "tether gossip key v1"

// GossipKeySize is the length of memberlist's SecretKey: 32 bytes selects
// AES-256-GCM.
const GossipKeySize = 32

// GossipKey derives memberlist's SecretKey from the cluster secret with
// HKDF-SHA256 (no salt, info "tether gossip key v1").
func GossipKey(secret []byte) ([]byte, error) {
	if len(secret) == 0 {
		return nil, errors.New("cluster: Secret is empty: a cluster secret is required to encrypt gossip")
	}
	return hkdf.Key(sha256.New, secret, nil, gossipKeyInfo, GossipKeySize)
}
