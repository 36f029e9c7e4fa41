package dataprotection

import (
	"encoding/hex"
	"fmt"
	"strings"
)

// KeyID is a Data Protection key id: a .NET Guid in its 16-byte wire form
// (Guid.ToByteArray: the first three fields little-endian, the last eight
// bytes as written), which is how payloads carry it.
type KeyID [16]byte

// ParseKeyID reads a Guid as .NET's Guid(string) does for the forms that
// key files use: 32 hex digits, optionally with hyphens ("D"), in braces
// ("B") or parentheses ("P").
func ParseKeyID(s string) (KeyID, error) {
	var id KeyID
	t := strings.TrimSpace(s)
	if len(t) == 38 && (t[0] == '{' && t[37] == '}' || t[0] == '(' && t[37] == ')') {
		t = t[1:37]
	}
	if len(t) == 36 {
		if t[8] != '-' || t[13] != '-' || t[18] != '-' || t[23] != '-' {
			return id, fmt.Errorf("invalid key id %q", s)
		}
		t = t[:8] + t[9:13] + t[14:18] + t[19:23] + t[24:]
	}
	if len(t) != 32 {
		return id, fmt.Errorf("invalid key id %q", s)
	}
	var be [16]byte
	if _, err := hex.Decode(be[:], []byte(t)); err != nil {
		return id, fmt.Errorf("invalid key id %q", s)
	}
	// Text order to wire order: reverse the first three fields.
	id[0], id[1], id[2], id[3] = be[3], be[2], be[1], be[0]
	id[4], id[5] = be[5], be[4]
	id[6], id[7] = be[7], be[6]
	copy(id[8:], be[8:])
	return id, nil
}

// String is the Guid's "D" form, lower case, as key files write it.
func (id KeyID) String() string {
	var be [16]byte
	be[0], be[1], be[2], be[3] = id[3], id[2], id[1], id[0]
	be[4], be[5] = id[5], id[4]
	be[6], be[7] = id[7], id[6]
	copy(be[8:], id[8:])
	h := hex.EncodeToString(be[:])
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}
