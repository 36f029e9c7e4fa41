package keyringtest

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"strings"

	"github.com/tether-proxy/tether/keyring"
)

// ContainsSeed reports whether b holds any of seeds in a form a seed could
// be written in: raw, hex (either case) or base64 (either alphabet).
func ContainsSeed(b []byte, seeds []keyring.TicketSeed) bool {
	for _, s := range seeds {
		for _, enc := range seedEncodings(s) {
			if bytes.Contains(b, enc) {
				return true
			}
		}
	}
	return false
}

// seedEncodings are the forms a seed could be written in (base64 without
// its last characters, which depend on what follows the seed).
func seedEncodings(s keyring.TicketSeed) [][]byte {
	return [][]byte{s[:], []byte(hex.EncodeToString(s[:])), []byte(strings.ToUpper(hex.EncodeToString(s[:]))),
		[]byte(base64.StdEncoding.EncodeToString(s[:])[:40]), []byte(base64.URLEncoding.EncodeToString(s[:])[:40])}
}
