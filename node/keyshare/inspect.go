package keyshare

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/ecdh"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/tether-proxy/tether/keyring"
)

// What the node's tests look at from outside: the seed exchange's tags, a
// request made with a given secret, whether this node accepts one, and
// whether recorded exchanges open to someone who holds the secret.

// Gossip tags of the seed exchange.
const (
	SeedRequestTag = seedRequestTag
	SeedAnswerTag  = seedAnswerTag
)

// ErrSeedAuth is a seed request signed with a secret this node does not
// accept (or altered).
var ErrSeedAuth = errSeedAuth

// NewSeedRequest is a seed request from node from of cluster to node to,
// signed with secret, as it goes on gossip.
func NewSeedRequest(secret []byte, from, to, cluster string) ([]byte, error) {
	c, err := newSeedCrypto(secret)
	if err != nil {
		return nil, err
	}
	a, err := c.newRequest(from, to, cluster)
	if err != nil {
		return nil, err
	}
	return a.msg, nil
}

// CheckRequest reads a seed request as this node would answer it: nil
// when it accepts it.
func (s *Seeder) CheckRequest(msg []byte) error {
	if s.crypto == nil {
		return errors.New("this node exchanges no seed")
	}
	_, _, err := s.crypto.openRequest(msg)
	return err
}

// Recorded is a seed message as it went on gossip.
type Recorded struct {
	Tag byte
	Msg []byte
}

// Eavesdrop plays one who recorded the seed messages between asker and
// answerer and holds the cluster secret: it reads every request asker sent
// and tries to open the answers to them. It returns how many exchanges it
// tried, and an error when a request does not read with the secret or an
// answer opens.
func Eavesdrop(secret []byte, msgs []Recorded, asker, answerer string) (tried int, err error) {
	thief, err := newSeedCrypto(secret)
	if err != nil {
		return 0, err
	}
	requests := map[string][]byte{}
	for _, m := range msgs {
		if m.Tag != seedRequestTag {
			continue
		}
		req, _, err := thief.openRequest(m.Msg)
		if err != nil {
			return 0, fmt.Errorf("a recorded request does not read with the secret: %w", err)
		}
		if req.From == asker && req.To == answerer {
			requests[hex.EncodeToString(req.Nonce)] = m.Msg
		}
	}
	for _, m := range msgs {
		var ans seedAnswerMsg
		if m.Tag != seedAnswerTag || json.Unmarshal(m.Msg, &ans) != nil {
			continue
		}
		reqMsg, ok := requests[hex.EncodeToString(ans.Nonce)]
		if !ok {
			continue
		}
		tried++
		req, _, _ := thief.openRequest(reqMsg)
		key := thief.fixed[0]
		// A key pair of the thief's own in place of the asker's, dropped
		// after the exchange.
		mine, _ := ecdh.X25519().GenerateKey(rand.Reader)
		if _, err := thief.openAnswer(&seedAsk{req: req, msg: reqMsg, priv: mine}, ans); err == nil {
			return tried, errors.New("a recorded seed answer opened with the cluster secret and a key pair of the thief's")
		}
		// The secret-derived key alone, as key, as the shared secret, or
		// as the key-encryption key of the keyring's own wrapping.
		for _, shared := range [][]byte{nil, key.kek, make([]byte, 32)} {
			if aead, err := key.answerAEAD(shared, reqMsg, ans.Pub); err == nil {
				if _, err := aead.Open(nil, make([]byte, aead.NonceSize()), ans.Box, seedAnswerAD(ans.Nonce, ans.Pub)); err == nil {
					return tried, errors.New("a recorded seed answer opened under a key derived from the cluster secret alone")
				}
			}
		}
		block, _ := aes.NewCipher(key.kek)
		gcm, _ := cipher.NewGCM(block)
		if _, err := gcm.Open(nil, make([]byte, gcm.NonceSize()), ans.Box, seedAnswerAD(ans.Nonce, ans.Pub)); err == nil {
			return tried, errors.New("a recorded seed answer opened under the secret-derived key")
		}
		if _, err := keyring.UnwrapKeys(key.kek, ans.Box); err == nil {
			return tried, errors.New("a recorded seed answer unwrapped as keys under the secret-derived key")
		}
	}
	return tried, nil
}
