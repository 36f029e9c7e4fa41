package dataprotection

import (
	"crypto/hmac"
	"crypto/sha512"
	"encoding/binary"
)

// deriveKeys fills out with NIST SP 800-108 key derivation in counter mode
// with HMAC-SHA512 as the PRF, as ASP.NET's ManagedSP800_108_CTR_HMACSHA512
// does: block i is HMAC(kdk, [i]32 || label || 0x00 || contextHeader ||
// context || [L]32), counters and L (output bits) big-endian. ASP.NET splits
// the output into the operation subkey followed by the validation subkey;
// callers pass one buffer and slice it the same way.
func deriveKeys(kdk, label, contextHeader, context, out []byte) {
	prf := hmac.New(sha512.New, kdk)
	var l [4]byte
	binary.BigEndian.PutUint32(l[:], uint32(len(out))*8)
	var block [sha512.Size]byte
	for i := uint32(1); len(out) > 0; i++ {
		var ctr [4]byte
		binary.BigEndian.PutUint32(ctr[:], i)
		prf.Reset()
		prf.Write(ctr[:])
		prf.Write(label)
		prf.Write([]byte{0})
		prf.Write(contextHeader)
		prf.Write(context)
		prf.Write(l[:])
		sum := prf.Sum(block[:0])
		out = out[copy(out, sum):]
	}
	clear(block[:])
}
