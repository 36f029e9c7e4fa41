package keyring

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// MinClusterSecretLen is the shortest cluster secret DeriveKEK accepts.
const MinClusterSecretLen = 16

// KEK info strings for DeriveKEK: one per use, so the same cluster secret
// yields independent keys.
const (
	// InfoKeyringFile protects the standalone keyring file.
	InfoKeyringFile = "tether keyring file v1"
	// InfoRaft protects key material in the Raft log and snapshots.
	InfoRaft = "tether keyring raft v1"
	// InfoTransfer protects a key a node sends to another that met a
	// value sealed under it before applying it.
	InfoTransfer = "tether keyring transfer v1"
	// InfoTicketSeeds authenticates the requests for TLS session ticket
	// seeds members exchange, and enters the key of each answer along
	// with an ephemeral key exchange: alone it opens no answer.
	InfoTicketSeeds = "tether ticket seed transfer v1"
	// InfoBackup authenticates a whole backup file (HMAC-SHA256): a file
	// edited without the cluster secret does not restore.
	InfoBackup = "tether backup file v1"
)

// ErrUnwrap: wrapped keys do not decrypt with the given key-encryption key
// (wrong cluster secret) or were altered.
var ErrUnwrap = errors.New("keyring: wrapped keys cannot be decrypted with the given key-encryption key")

// wrapMagic starts every wrapped blob: "tkw" and the format version.
var wrapMagic = []byte{'t', 'k', 'w', 1}

// DeriveKEK derives a 32-byte key-encryption key from the cluster secret
// with HKDF-SHA256; info separates uses (InfoKeyringFile, InfoRaft).
func DeriveKEK(clusterSecret []byte, info string) ([]byte, error) {
	if len(clusterSecret) < MinClusterSecretLen {
		return nil, fmt.Errorf("keyring: cluster secret is %d bytes, need at least %d", len(clusterSecret), MinClusterSecretLen)
	}
	if info == "" {
		return nil, errors.New("keyring: DeriveKEK info is empty")
	}
	return hkdf.Key(sha256.New, clusterSecret, nil, info, KeySize)
}

func kekAEAD(kek []byte) (cipher.AEAD, error) {
	if len(kek) != KeySize {
		return nil, fmt.Errorf("keyring: key-encryption key is %d bytes, want %d", len(kek), KeySize)
	}
	block, err := aes.NewCipher(kek)
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(block)
}

// WrapKeys encrypts keys (material included) under kek:
// "tkw" | version 1 | nonce (12) | AES-256-GCM(encoded keys), the header
// being the additional data. Raft commands and snapshots carry this.
func WrapKeys(kek []byte, keys []Key) ([]byte, error) {
	aead, err := kekAEAD(kek)
	if err != nil {
		return nil, err
	}
	plain, err := encodeKeys(keys)
	if err != nil {
		return nil, err
	}
	out := make([]byte, len(wrapMagic)+nonceSize, len(wrapMagic)+nonceSize+len(plain)+tagSize)
	copy(out, wrapMagic)
	nonce := out[len(wrapMagic):]
	_, _ = rand.Read(nonce)
	out = aead.Seal(out, nonce, plain, wrapMagic)
	clear(plain)
	return out, nil
}

// UnwrapKeys reverses WrapKeys. A wrong kek or altered data is ErrUnwrap;
// every returned key is valid.
func UnwrapKeys(kek, data []byte) ([]Key, error) {
	aead, err := kekAEAD(kek)
	if err != nil {
		return nil, err
	}
	if len(data) < len(wrapMagic)+nonceSize+tagSize || !bytes.Equal(data[:len(wrapMagic)], wrapMagic) {
		return nil, fmt.Errorf("keyring: wrapped keys: unknown format (want %q version %d)", wrapMagic[:3], wrapMagic[3])
	}
	hl := len(wrapMagic)
	plain, err := aead.Open(nil, data[hl:hl+nonceSize], data[hl+nonceSize:], wrapMagic)
	if err != nil {
		return nil, ErrUnwrap
	}
	defer clear(plain)
	return decodeKeys(plain)
}

// keySet is the versioned encoding of keys with material (JSON; the
// material is base64 in it). Only ever stored wrapped or in a 0600 file.
type keySet struct {
	Version int       `json:"version"`
	Keys    []keyJSON `json:"keys"`
}

type keyJSON struct {
	ID        string    `json:"id"`
	Created   time.Time `json:"created"`
	Activates time.Time `json:"activates"`
	Expires   time.Time `json:"expires"`
	Revoked   bool      `json:"revoked,omitempty"`
	Material  []byte    `json:"material"`
}

const keySetVersion = 1

func encodeKeys(keys []Key) ([]byte, error) {
	ks := keySet{Version: keySetVersion, Keys: make([]keyJSON, 0, len(keys))}
	for _, k := range keys {
		if err := k.validate(); err != nil {
			return nil, err
		}
		ks.Keys = append(ks.Keys, keyJSON{k.ID, k.Created, k.Activates, k.Expires, k.Revoked, k.Material})
	}
	return json.Marshal(ks)
}

// decodeKeys parses an encoded key set; every returned key is valid and
// ids are unique.
func decodeKeys(b []byte) ([]Key, error) {
	var ks keySet
	if err := json.Unmarshal(b, &ks); err != nil {
		var se *json.SyntaxError
		if errors.As(err, &se) { // its message quotes a byte of the input
			return nil, fmt.Errorf("keyring: key set: malformed JSON at byte %d", se.Offset)
		}
		return nil, fmt.Errorf("keyring: key set: %v", err)
	}
	if ks.Version != keySetVersion {
		return nil, fmt.Errorf("keyring: key set version %d, want %d", ks.Version, keySetVersion)
	}
	keys := make([]Key, 0, len(ks.Keys))
	seen := make(map[string]bool, len(ks.Keys))
	for _, j := range ks.Keys {
		k := Key{ID: j.ID, Created: j.Created, Activates: j.Activates, Expires: j.Expires, Revoked: j.Revoked, Material: j.Material}
		if err := k.validate(); err != nil {
			return nil, err
		}
		if seen[k.ID] {
			return nil, fmt.Errorf("%w: %s appears twice", ErrKeyExists, k.ID)
		}
		seen[k.ID] = true
		keys = append(keys, k)
	}
	return keys, nil
}

// UnwrapKeysAny is UnwrapKeys with the first of keks that opens data (a
// cluster secret in rotation has several). None opening it is ErrUnwrap.
func UnwrapKeysAny(keks [][]byte, data []byte) ([]Key, error) {
	err := ErrUnwrap
	for _, kek := range keks {
		var keys []Key
		if keys, err = UnwrapKeys(kek, data); !errors.Is(err, ErrUnwrap) {
			return keys, err
		}
	}
	return nil, err
}

// UnwrapBlobAny is UnwrapBlob with the first of keks that opens data.
func UnwrapBlobAny(keks [][]byte, purpose string, data []byte) ([]byte, error) {
	err := ErrUnwrap
	for _, kek := range keks {
		var p []byte
		if p, err = UnwrapBlob(kek, purpose, data); !errors.Is(err, ErrUnwrap) {
			return p, err
		}
	}
	return nil, err
}
