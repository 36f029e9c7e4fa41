package keyshare

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/ecdh"
	"crypto/hkdf"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/tether-proxy/tether/keyring"
)

// The ticket seed exchange (seeder.go): a request authenticated with
// an HMAC under a key from the cluster secret, carrying the asker's
// ephemeral X25519 public key; an answer sealed under HKDF(the X25519
// shared secret, salt: the secret-derived key, info: the whole request and
// the answerer's public key). See seeder.go for who asks whom.

// HKDF infos of the seed exchange, under the key derived with
// keyring.InfoTicketSeeds.
const (
	seedMACInfo    = "tether ticket seed request v1"
	seedAnswerInfo = "tether ticket seed answer v1"
)

var (
	errSeedAuth   = errors.New("ticket seed request: authentication failed (another cluster secret, or altered)")
	errSeedAnswer = errors.New("ticket seed answer does not open: not an answer to this node's request")
)

// seedRequest asks a node for the seeds it holds.
type seedRequest struct {
	V    int    `json:"v"`
	From string `json:"f"`
	To   string `json:"t"`
	// Cluster is the asker's cluster id ("" before it holds state): two
	// clusters that share a secret exchange no seed.
	Cluster string `json:"c,omitempty"`
	Nonce   []byte `json:"n"`
	Pub     []byte `json:"e"` // the asker's ephemeral X25519 public key
}

// seedRequestMsg is a request as sent: its JSON and the HMAC of it.
type seedRequestMsg struct {
	Body []byte `json:"b"`
	MAC  []byte `json:"m"`
}

// seedAnswerMsg is an answer as sent.
type seedAnswerMsg struct {
	Nonce []byte `json:"n"` // the request's
	Pub   []byte `json:"e"` // the answerer's ephemeral X25519 public key
	Box   []byte `json:"c"` // AES-256-GCM of a seedAnswer
}

// seedAnswer is what an answer carries, sealed: a JSON header, then the
// seeds in binary (encodeSeedAnswer), so every copy of a seed is one this
// node clears (encoding/json keeps its buffers for reuse).
type seedAnswer struct {
	From    string `json:"f"`
	To      string `json:"t"`
	Cluster string `json:"cl,omitempty"` // the answerer's cluster id
	Leader  bool   `json:"l"`
	Term    uint64 `json:"r"`
	// Complete: the answerer holds today's and tomorrow's seeds and, when
	// it leads, settled them for its term (took the members' or made new).
	Complete bool               `json:"c"`
	Days     []keyring.DaySeeds `json:"-"`
}

// maxSeedAnswerDays bounds the days an answer carries (a node holds at
// most eight).
const maxSeedAnswerDays = 16

// encodeSeedAnswer is len(header) (4 bytes) | header (JSON) | days (1
// byte) | per day: the day (8 bytes) | seeds (1 byte) | the seeds.
func encodeSeedAnswer(a seedAnswer) ([]byte, error) {
	h, err := json.Marshal(a)
	if err != nil {
		return nil, err
	}
	if len(a.Days) > maxSeedAnswerDays {
		a.Days = a.Days[len(a.Days)-maxSeedAnswerDays:]
	}
	size := 4 + len(h) + 1
	for _, d := range a.Days {
		size += 9 + len(d.Seeds)*keyring.TicketSeedSize
	}
	b := make([]byte, 0, size)
	b = binary.BigEndian.AppendUint32(b, uint32(len(h)))
	b = append(b, h...)
	b = append(b, byte(len(a.Days)))
	for _, d := range a.Days {
		seeds := d.Seeds[:min(len(d.Seeds), keyring.MaxSeedsPerDay)]
		b = binary.BigEndian.AppendUint64(b, uint64(d.Day))
		b = append(b, byte(len(seeds)))
		for _, s := range seeds {
			b = append(b, s[:]...)
		}
	}
	return b, nil
}

var errSeedAnswerFormat = errors.New("ticket seed answer: malformed")

// decodeSeedAnswer reverses encodeSeedAnswer; the caller clears the
// seeds (clearDays(a.Days)).
func decodeSeedAnswer(b []byte) (seedAnswer, error) {
	var a seedAnswer
	if len(b) < 4 {
		return a, errSeedAnswerFormat
	}
	hl := binary.BigEndian.Uint32(b)
	b = b[4:]
	if uint64(hl) >= uint64(len(b)) {
		return a, errSeedAnswerFormat
	}
	if err := json.Unmarshal(b[:hl], &a); err != nil {
		return a, fmt.Errorf("ticket seed answer: %w", err)
	}
	b = b[hl:]
	n := int(b[0])
	b = b[1:]
	if n > maxSeedAnswerDays {
		return seedAnswer{}, errSeedAnswerFormat
	}
	for range n {
		if len(b) < 9 {
			clearDays(a.Days)
			return seedAnswer{}, errSeedAnswerFormat
		}
		d := keyring.DaySeeds{Day: int64(binary.BigEndian.Uint64(b))}
		k := int(b[8])
		b = b[9:]
		if k > keyring.MaxSeedsPerDay || len(b) < k*keyring.TicketSeedSize {
			clearDays(a.Days)
			return seedAnswer{}, errSeedAnswerFormat
		}
		for range k {
			d.Seeds = append(d.Seeds, keyring.TicketSeed(b[:keyring.TicketSeedSize]))
			b = b[keyring.TicketSeedSize:]
		}
		a.Days = append(a.Days, d)
	}
	if len(b) != 0 {
		clearDays(a.Days)
		return seedAnswer{}, errSeedAnswerFormat
	}
	return a, nil
}

// seedCrypto seals and opens the exchange under the keys derived from the
// cluster secrets: the first secret's signs requests, each one's verifies
// them (while a secret is being replaced), and an answer is sealed under
// the one that verified its request.
type seedCrypto struct {
	fixed []*seedKey
	// keks, when set, gives the ticket-seed KEKs of the secrets the node
	// accepts now, primary first: a secret installed, used or removed while
	// the node runs applies to the next message.
	keks func() [][]byte
}

// seedKey is what one cluster secret gives the exchange.
type seedKey struct {
	kek []byte // keyring.DeriveKEK(secret, keyring.InfoTicketSeeds)
	mac []byte
}

func newSeedCrypto(secrets ...[]byte) (*seedCrypto, error) {
	if len(secrets) == 0 {
		return nil, errors.New("ticket seeds: no cluster secret")
	}
	var keks [][]byte
	for _, secret := range secrets {
		kek, err := keyring.DeriveKEK(secret, keyring.InfoTicketSeeds)
		if err != nil {
			return nil, err
		}
		keks = append(keks, kek)
	}
	keys, err := seedKeysOf(keks)
	if err != nil {
		return nil, err
	}
	return &seedCrypto{fixed: keys}, nil
}

// newSeedCryptoFrom follows the node's cluster secrets as they rotate.
func newSeedCryptoFrom(secrets *keyring.Secrets) *seedCrypto {
	return &seedCrypto{keks: func() [][]byte { return secrets.AcceptedKEKs(keyring.InfoTicketSeeds) }}
}

func seedKeysOf(keks [][]byte) ([]*seedKey, error) {
	keys := make([]*seedKey, 0, len(keks))
	for _, kek := range keks {
		mac, err := hkdf.Key(sha256.New, kek, nil, seedMACInfo, 32)
		if err != nil {
			return nil, err
		}
		keys = append(keys, &seedKey{kek: kek, mac: mac})
	}
	if len(keys) == 0 {
		return nil, errors.New("ticket seeds: no cluster secret")
	}
	return keys, nil
}

// keys are the exchange's keys now, the one in use first.
func (c *seedCrypto) keys() ([]*seedKey, error) {
	if c.keks == nil {
		return c.fixed, nil
	}
	return seedKeysOf(c.keks())
}

// seedAsk is a request sent and the ephemeral key its answer opens with.
type seedAsk struct {
	req  seedRequest
	msg  []byte
	priv *ecdh.PrivateKey
}

func (k *seedKey) sum(body []byte) []byte {
	h := hmac.New(sha256.New, k.mac)
	h.Write(body)
	return h.Sum(nil)
}

// newRequest makes a request from node from of cluster to node to.
func (c *seedCrypto) newRequest(from, to, cluster string) (*seedAsk, error) {
	priv, err := ecdh.X25519().GenerateKey(rand.Reader)
	if err != nil {
		return nil, err
	}
	req := seedRequest{V: seedVersion, From: from, To: to, Cluster: cluster, Nonce: make([]byte, seedNonceSize), Pub: priv.PublicKey().Bytes()}
	_, _ = rand.Read(req.Nonce)
	body, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	keys, err := c.keys()
	if err != nil {
		return nil, err
	}
	msg, err := json.Marshal(seedRequestMsg{Body: body, MAC: keys[0].sum(body)})
	if err != nil {
		return nil, err
	}
	return &seedAsk{req: req, msg: msg, priv: priv}, nil
}

// openRequest checks a request's HMAC and reads it; k is the key that
// verified it, the one its answer is sealed under.
func (c *seedCrypto) openRequest(msg []byte) (req seedRequest, k *seedKey, err error) {
	var m seedRequestMsg
	if err := json.Unmarshal(msg, &m); err != nil {
		return seedRequest{}, nil, fmt.Errorf("ticket seed request: %w", err)
	}
	keys, err := c.keys()
	if err != nil {
		return seedRequest{}, nil, err
	}
	for _, key := range keys {
		if hmac.Equal(m.MAC, key.sum(m.Body)) {
			k = key
			break
		}
	}
	if k == nil {
		return seedRequest{}, nil, errSeedAuth
	}
	if err := json.Unmarshal(m.Body, &req); err != nil {
		return seedRequest{}, nil, fmt.Errorf("ticket seed request: %w", err)
	}
	switch {
	case req.V != seedVersion:
		return seedRequest{}, nil, fmt.Errorf("ticket seed request: version %d, this node speaks %d", req.V, seedVersion)
	case req.From == "" || req.To == "" || len(req.Nonce) != seedNonceSize:
		return seedRequest{}, nil, errors.New("ticket seed request: malformed")
	}
	if _, err := ecdh.X25519().NewPublicKey(req.Pub); err != nil {
		return seedRequest{}, nil, fmt.Errorf("ticket seed request: %w", err)
	}
	return req, k, nil
}

// sameCluster reports whether two cluster ids may be the same cluster's:
// equal, or one not known yet (a node that has not joined).
func sameCluster(a, b string) bool { return a == b || a == "" || b == "" }

// answerAEAD is the cipher of one answer: HKDF-SHA256 of the X25519
// shared secret, salted with the secret-derived key, its info naming the
// whole request message and the answerer's public key.
func (k *seedKey) answerAEAD(shared, reqMsg, answererPub []byte) (cipher.AEAD, error) {
	t := sha256.New()
	t.Write(reqMsg)
	t.Write(answererPub)
	key, err := hkdf.Key(sha256.New, shared, k.kek, seedAnswerInfo+" "+hex.EncodeToString(t.Sum(nil)), 32)
	if err != nil {
		return nil, err
	}
	defer clear(key)
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(block)
}

// seedAnswerAD is the additional data of an answer's box. Its key is used
// once (the answerer's key pair is fresh), so the nonce is zero.
func seedAnswerAD(nonce, pub []byte) []byte {
	return slices.Concat([]byte(seedAnswerInfo), nonce, pub)
}

// sealAnswer seals ans for the request reqMsg (read as req, verified by k).
func (k *seedKey) sealAnswer(reqMsg []byte, req seedRequest, ans seedAnswer) ([]byte, error) {
	peer, err := ecdh.X25519().NewPublicKey(req.Pub)
	if err != nil {
		return nil, err
	}
	priv, err := ecdh.X25519().GenerateKey(rand.Reader)
	if err != nil {
		return nil, err
	}
	shared, err := priv.ECDH(peer)
	if err != nil {
		return nil, err
	}
	defer clear(shared)
	pub := priv.PublicKey().Bytes()
	aead, err := k.answerAEAD(shared, reqMsg, pub)
	if err != nil {
		return nil, err
	}
	plain, err := encodeSeedAnswer(ans)
	if err != nil {
		return nil, err
	}
	defer clear(plain)
	box := aead.Seal(nil, make([]byte, aead.NonceSize()), plain, seedAnswerAD(req.Nonce, pub))
	return json.Marshal(seedAnswerMsg{Nonce: req.Nonce, Pub: pub, Box: box})
}

// openAnswer opens an answer to ask.
func (c *seedCrypto) openAnswer(ask *seedAsk, m seedAnswerMsg) (seedAnswer, error) {
	peer, err := ecdh.X25519().NewPublicKey(m.Pub)
	if err != nil {
		return seedAnswer{}, errSeedAnswer
	}
	shared, err := ask.priv.ECDH(peer)
	if err != nil {
		return seedAnswer{}, errSeedAnswer
	}
	defer clear(shared)
	keys, err := c.keys()
	if err != nil {
		return seedAnswer{}, err
	}
	var plain []byte
	for _, k := range keys {
		aead, err := k.answerAEAD(shared, ask.msg, m.Pub)
		if err != nil {
			return seedAnswer{}, err
		}
		if plain, err = aead.Open(nil, make([]byte, aead.NonceSize()), m.Box, seedAnswerAD(ask.req.Nonce, m.Pub)); err == nil {
			break
		}
	}
	if plain == nil {
		return seedAnswer{}, errSeedAnswer
	}
	defer clear(plain)
	ans, err := decodeSeedAnswer(plain)
	if err != nil {
		return seedAnswer{}, err
	}
	if ans.From != ask.req.To || ans.To != ask.req.From || !sameCluster(ans.Cluster, ask.req.Cluster) {
		clearDays(ans.Days)
		return seedAnswer{}, errSeedAnswer
	}
	return ans, nil
}

func clearDays(days []keyring.DaySeeds) {
	for _, d := range days {
		clear(d.Seeds)
	}
}
