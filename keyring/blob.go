package keyring

import (
	"bytes"
	"crypto/rand"
	"fmt"
)

// blobMagic starts every wrapped blob: "tkb" and the format version.
var blobMagic = []byte{'t', 'k', 'b', 1}

// WrapBlob encrypts a secret that is not a key (an ACME account key, a
// certificate's private key) under kek, bound to purpose so that a blob
// cannot pass for another: "tkb" | version 1 | nonce (12) |
// AES-256-GCM(plain), with the header and purpose as additional data.
func WrapBlob(kek []byte, purpose string, plain []byte) ([]byte, error) {
	aead, err := kekAEAD(kek)
	if err != nil {
		return nil, err
	}
	out := make([]byte, len(blobMagic)+nonceSize, len(blobMagic)+nonceSize+len(plain)+tagSize)
	copy(out, blobMagic)
	nonce := out[len(blobMagic):]
	_, _ = rand.Read(nonce)
	return aead.Seal(out, nonce, plain, append(bytes.Clone(blobMagic), purpose...)), nil
}

// UnwrapBlob reverses WrapBlob. A wrong kek, purpose or altered data is
// ErrUnwrap.
func UnwrapBlob(kek []byte, purpose string, data []byte) ([]byte, error) {
	aead, err := kekAEAD(kek)
	if err != nil {
		return nil, err
	}
	hl := len(blobMagic)
	if len(data) < hl+nonceSize+tagSize || !bytes.Equal(data[:hl], blobMagic) {
		return nil, fmt.Errorf("keyring: wrapped blob: unknown format (want %q version %d)", blobMagic[:3], blobMagic[3])
	}
	plain, err := aead.Open(nil, data[hl:hl+nonceSize], data[hl+nonceSize:], append(bytes.Clone(blobMagic), purpose...))
	if err != nil {
		return nil, ErrUnwrap
	}
	return plain, nil
}
