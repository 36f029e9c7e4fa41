package dataprotection

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/sha512"
	"crypto/subtle"
	"encoding/binary"
	"fmt"
	"hash"
	"io"
)

// keyModifierSize is the random per-payload input to the KDF that ASP.NET
// puts in front of every payload (128 bits).
const keyModifierSize = 16

const (
	gcmNonceSize = 12
	gcmTagSize   = 16
)

// errPayload is every decryption failure: malformed, truncated, tampered,
// or for another key or purpose. One error, so a caller learns nothing from
// which check failed.
var errPayload = ErrInvalid

// encryptor is ASP.NET's IAuthenticatedEncryptor for one master key:
// Encrypt(plaintext, aad) and Decrypt(payload, aad) where aad is the
// protector's additional authenticated data, used as the KDF label.
type encryptor interface {
	encrypt(rnd io.Reader, plaintext, aad []byte) ([]byte, error)
	decrypt(payload, aad []byte) ([]byte, error)
}

// cbcHMAC is AES-CBC (PKCS#7) then HMAC over IV and ciphertext, payload
// { keyModifier(16) | IV(16) | ciphertext | MAC }: ASP.NET's
// ManagedAuthenticatedEncryptor and CbcAuthenticatedEncryptor (CNG), which
// produce the same bytes.
type cbcHMAC struct {
	kdk     []byte
	keyLen  int // AES key bytes: 16, 24 or 32
	newHash func() hash.Hash
	macLen  int // digest bytes, also the MAC subkey length
	header  []byte
}

// newCBCHMAC builds the encryptor for master key kdk. hashBits is the HMAC
// digest size: 160 (SHA-1, managed and CNG descriptors only), 256, 384 or
// 512.
func newCBCHMAC(kdk []byte, keyBits, hashBits int) (*cbcHMAC, error) {
	e := &cbcHMAC{kdk: kdk, keyLen: keyBits / 8}
	switch keyBits {
	case 128, 192, 256:
	default:
		return nil, fmt.Errorf("unsupported AES key size %d", keyBits)
	}
	switch hashBits {
	case 160:
		e.newHash, e.macLen = sha1.New, sha1.Size
	case 256:
		e.newHash, e.macLen = sha256.New, sha256.Size
	case 384:
		e.newHash, e.macLen = sha512.New384, sha512.Size384
	case 512:
		e.newHash, e.macLen = sha512.New, sha512.Size
	default:
		return nil, fmt.Errorf("unsupported HMAC size %d", hashBits)
	}
	e.header = e.contextHeader()
	return e, nil
}

// contextHeader binds the algorithm choice into every derivation:
// { 0x00 (SP800-108 CTR HMACSHA512), 0x00 (CBC+HMAC) | keyLen | blockSize |
// macKeyLen | macLen (uint32 BE) | E("") | MAC("") }, where E and MAC use
// keys derived from an empty KDK, E with an all-zero IV.
func (e *cbcHMAC) contextHeader() []byte {
	h := []byte{0, 0}
	h = binary.BigEndian.AppendUint32(h, uint32(e.keyLen))
	h = binary.BigEndian.AppendUint32(h, aes.BlockSize)
	h = binary.BigEndian.AppendUint32(h, uint32(e.macLen))
	h = binary.BigEndian.AppendUint32(h, uint32(e.macLen))
	tmp := make([]byte, e.keyLen+e.macLen)
	deriveKeys(nil, nil, nil, nil, tmp)
	block, _ := aes.NewCipher(tmp[:e.keyLen]) // keyLen checked by the constructor
	empty := pkcs7Pad(nil)
	cipher.NewCBCEncrypter(block, make([]byte, aes.BlockSize)).CryptBlocks(empty, empty)
	h = append(h, empty...)
	m := hmac.New(e.newHash, tmp[e.keyLen:])
	return m.Sum(h)
}

func (e *cbcHMAC) encrypt(rnd io.Reader, plaintext, aad []byte) ([]byte, error) {
	ctLen := (len(plaintext)/aes.BlockSize + 1) * aes.BlockSize
	out := make([]byte, keyModifierSize+aes.BlockSize+ctLen, keyModifierSize+aes.BlockSize+ctLen+e.macLen)
	// Key modifier first, then IV, as ASP.NET draws them.
	if _, err := io.ReadFull(rnd, out[:keyModifierSize+aes.BlockSize]); err != nil {
		return nil, err
	}
	km, iv := out[:keyModifierSize], out[keyModifierSize:keyModifierSize+aes.BlockSize]
	sub := make([]byte, e.keyLen+e.macLen)
	defer clear(sub)
	deriveKeys(e.kdk, aad, e.header, km, sub)
	block, err := aes.NewCipher(sub[:e.keyLen])
	if err != nil {
		return nil, err
	}
	ct := out[keyModifierSize+aes.BlockSize:]
	copy(ct, plaintext)
	pad := byte(ctLen - len(plaintext))
	for i := len(plaintext); i < ctLen; i++ {
		ct[i] = pad
	}
	cipher.NewCBCEncrypter(block, iv).CryptBlocks(ct, ct)
	m := hmac.New(e.newHash, sub[e.keyLen:])
	m.Write(out[keyModifierSize:])
	return m.Sum(out), nil
}

func (e *cbcHMAC) decrypt(payload, aad []byte) ([]byte, error) {
	ctLen := len(payload) - keyModifierSize - aes.BlockSize - e.macLen
	if ctLen <= 0 || ctLen%aes.BlockSize != 0 {
		return nil, errPayload
	}
	km := payload[:keyModifierSize]
	iv := payload[keyModifierSize : keyModifierSize+aes.BlockSize]
	macOff := len(payload) - e.macLen
	sub := make([]byte, e.keyLen+e.macLen)
	defer clear(sub)
	deriveKeys(e.kdk, aad, e.header, km, sub)
	m := hmac.New(e.newHash, sub[e.keyLen:])
	m.Write(payload[keyModifierSize:macOff])
	if !hmac.Equal(m.Sum(nil), payload[macOff:]) {
		return nil, errPayload
	}
	block, err := aes.NewCipher(sub[:e.keyLen])
	if err != nil {
		return nil, errPayload
	}
	pt := make([]byte, ctLen)
	cipher.NewCBCDecrypter(block, iv).CryptBlocks(pt, payload[keyModifierSize+aes.BlockSize:macOff])
	return pkcs7Unpad(pt)
}

// gcm is AES-GCM with a key derived per payload, payload
// { keyModifier(16) | nonce(12) | ciphertext | tag(16) }: ASP.NET's
// AesGcmAuthenticatedEncryptor and CngGcmAuthenticatedEncryptor. The
// additional data goes into the KDF label only; GCM itself gets none.
type gcm struct {
	kdk    []byte
	keyLen int
	header []byte
}

func newGCM(kdk []byte, keyBits int) (*gcm, error) {
	switch keyBits {
	case 128, 192, 256:
	default:
		return nil, fmt.Errorf("unsupported AES key size %d", keyBits)
	}
	e := &gcm{kdk: kdk, keyLen: keyBits / 8}
	h := []byte{0, 1} // SP800-108 CTR HMACSHA512, GCM
	h = binary.BigEndian.AppendUint32(h, uint32(e.keyLen))
	h = binary.BigEndian.AppendUint32(h, gcmNonceSize)
	h = binary.BigEndian.AppendUint32(h, aes.BlockSize)
	h = binary.BigEndian.AppendUint32(h, gcmTagSize)
	// The tag of GCM over the empty string, key from an empty KDK, zero nonce.
	tmp := make([]byte, e.keyLen)
	deriveKeys(nil, nil, nil, nil, tmp)
	aead, err := newAESGCM(tmp)
	if err != nil {
		return nil, err
	}
	e.header = aead.Seal(h, make([]byte, gcmNonceSize), nil, nil)
	return e, nil
}

func newAESGCM(key []byte) (cipher.AEAD, error) {
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(block)
}

func (e *gcm) encrypt(rnd io.Reader, plaintext, aad []byte) ([]byte, error) {
	out := make([]byte, keyModifierSize+gcmNonceSize, keyModifierSize+gcmNonceSize+len(plaintext)+gcmTagSize)
	if _, err := io.ReadFull(rnd, out); err != nil {
		return nil, err
	}
	key := make([]byte, e.keyLen)
	defer clear(key)
	deriveKeys(e.kdk, aad, e.header, out[:keyModifierSize], key)
	aead, err := newAESGCM(key)
	if err != nil {
		return nil, err
	}
	return aead.Seal(out, out[keyModifierSize:], plaintext, nil), nil
}

func (e *gcm) decrypt(payload, aad []byte) ([]byte, error) {
	if len(payload) < keyModifierSize+gcmNonceSize+gcmTagSize {
		return nil, errPayload
	}
	key := make([]byte, e.keyLen)
	defer clear(key)
	deriveKeys(e.kdk, aad, e.header, payload[:keyModifierSize], key)
	aead, err := newAESGCM(key)
	if err != nil {
		return nil, errPayload
	}
	pt, err := aead.Open(nil, payload[keyModifierSize:keyModifierSize+gcmNonceSize], payload[keyModifierSize+gcmNonceSize:], nil)
	if err != nil {
		return nil, errPayload
	}
	return pt, nil
}

func pkcs7Pad(b []byte) []byte {
	n := aes.BlockSize - len(b)%aes.BlockSize
	out := make([]byte, len(b)+n)
	copy(out, b)
	for i := len(b); i < len(out); i++ {
		out[i] = byte(n)
	}
	return out
}

// pkcs7Unpad checks the padding in constant time over the last block; the
// MAC has already authenticated the ciphertext, so this only catches a
// payload from a buggy writer.
func pkcs7Unpad(b []byte) ([]byte, error) {
	if len(b) == 0 || len(b)%aes.BlockSize != 0 {
		return nil, errPayload
	}
	n := int(b[len(b)-1])
	good := subtle.ConstantTimeLessOrEq(1, n) & subtle.ConstantTimeLessOrEq(n, aes.BlockSize)
	for i := 1; i <= aes.BlockSize; i++ {
		inPad := subtle.ConstantTimeLessOrEq(i, n)
		good &= subtle.ConstantTimeSelect(inPad, subtle.ConstantTimeByteEq(b[len(b)-i], byte(n)), 1)
	}
	if good != 1 {
		return nil, errPayload
	}
	return b[:len(b)-n], nil
}
