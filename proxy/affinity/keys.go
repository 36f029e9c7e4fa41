package affinity

import (
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"sort"
	"strings"
	"unicode"
	"unicode/utf16"

	"github.com/cespare/xxhash/v2"
)

const (
	hashKeyLen = 16 // HashCookie: hex of a 64-bit digest
	arrKeyLen  = 64 // ArrCookie: hex of a SHA-256 digest
)

// hashKey is the wire value of a key input under a hash policy:
// HashCookie (YARP): XxHash64, seed 0, of the UTF-16LE bytes of the
// upper-cased input, 16 lowercase hex digits of the big-endian digest.
// ArrCookie (IIS ARR): SHA-256 of the UTF-16LE bytes of the lower-cased
// input, 64 uppercase hex digits.
func hashKey(pol policy, input string) string {
	if pol == arrCookie {
		sum := sha256.Sum256(utf16le(strings.Map(lowerInvariant, input)))
		return strings.ToUpper(hex.EncodeToString(sum[:]))
	}
	var be [8]byte
	v := xxhash.Sum64(utf16le(strings.Map(upperInvariant, input)))
	for i := range be {
		be[i] = byte(v >> (56 - 8*i))
	}
	return hex.EncodeToString(be[:])
}

// upperInvariant and lowerInvariant are .NET's ToUpperInvariant and
// ToLowerInvariant per character: Go's simple case mapping, except for the
// two Turkish i's, which .NET's invariant culture leaves alone.
func upperInvariant(r rune) rune {
	if r == 'ı' {
		return r
	}
	return unicode.ToUpper(r)
}

func lowerInvariant(r rune) rune {
	if r == 'İ' {
		return r
	}
	return unicode.ToLower(r)
}

// utf16le is .NET's Encoding.Unicode.GetBytes (invalid UTF-8 becomes
// U+FFFD, as in any Go string-to-rune conversion).
func utf16le(s string) []byte {
	b := make([]byte, 0, 2*len(s))
	for _, r := range s {
		var u [2]uint16
		n := 1
		if r >= 0x10000 {
			r1, r2 := utf16.EncodeRune(r)
			u[0], u[1], n = uint16(r1), uint16(r2), 2
		} else {
			u[0] = uint16(r)
		}
		for _, x := range u[:n] {
			b = append(b, byte(x), byte(x>>8))
		}
	}
	return b
}

// foldHex writes s into dst with ASCII letters folded to upper (upper=true)
// or lower case. It reports false when s does not fit dst exactly.
func foldHex(dst []byte, s string, upper bool) bool {
	if len(s) != len(dst) {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if upper && 'a' <= c && c <= 'z' {
			c -= 'a' - 'A'
		} else if !upper && 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		dst[i] = c
	}
	return true
}

// hexKey is the number s spells as a HashCookie key: 16 hex digits of
// either case (the case foldHex folds away for the other policies); false
// for anything else.
func hexKey(s string) (uint64, bool) {
	if len(s) != hashKeyLen {
		return 0, false
	}
	var k uint64
	var bad byte
	for i := 0; i < hashKeyLen; i++ {
		d := hexValues[s[i]]
		bad |= d
		k = k<<4 | uint64(d&15)
	}
	return k, bad < 16
}

// hexValues is a hex digit's value, 0xf0 for a byte that is not one.
var hexValues = func() (t [256]byte) {
	for c := range t {
		switch {
		case '0' <= c && c <= '9':
			t[c] = byte(c - '0')
		case 'a' <= c && c <= 'f':
			t[c] = byte(c - 'a' + 10)
		case 'A' <= c && c <= 'F':
			t[c] = byte(c - 'A' + 10)
		default:
			t[c] = 0xf0
		}
	}
	return t
}()

// cookieValue returns the raw value of the first cookie called name in the
// request's Cookie headers (first wins, as with net/http's Request.Cookie and
// ASP.NET's request cookies). It scans the header in place: no allocation.
// The value is returned as sent, quotes included.
func cookieValue(h http.Header, name string) (string, bool) {
	for _, line := range h["Cookie"] {
		for len(line) > 0 {
			var part string
			if i := strings.IndexByte(line, ';'); i >= 0 {
				part, line = line[:i], line[i+1:]
			} else {
				part, line = line, ""
			}
			part = trimOWS(part)
			eq := strings.IndexByte(part, '=')
			if eq < 0 {
				continue
			}
			if trimOWS(part[:eq]) == name {
				return trimOWS(part[eq+1:]), true
			}
		}
	}
	return "", false
}

// headerValue returns the first value of the canonical header name.
func headerValue(h http.Header, name string) (string, bool) {
	if vs := h[name]; len(vs) > 0 {
		return trimOWS(vs[0]), true
	}
	return "", false
}

func trimOWS(s string) string {
	i, j := trimSpan(s, 0, len(s))
	return s[i:j]
}

// unquote strips one pair of surrounding double quotes (RFC 6265 allows a
// quoted cookie-value).
func unquote(s string) (string, bool) {
	if len(s) >= 2 && s[0] == '"' && s[len(s)-1] == '"' {
		return s[1 : len(s)-1], true
	}
	return s, false
}

func sortGroups(gs []group) {
	sort.Slice(gs, func(i, j int) bool { return gs[i].input < gs[j].input })
}
