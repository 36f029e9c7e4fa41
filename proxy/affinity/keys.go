package affinity

import (
	"crypto/sha256"
	"encoding/hex"
	"math/bits"
	"net/http"
	"sort"
	"strings"
	"unicode"
	"unicode/utf16"

	"github.com/cespare/xxhash/v2"

	"github.com/tether-proxy/tether/proxy/internal/swar"
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
	hi, ok1 := hexWord(swar.Word(s[:8]))
	lo, ok2 := hexWord(swar.Word(s[8:]))
	return hi<<32 | lo, ok1 && ok2
}

// hexWord is the number x's eight bytes spell as hex digits (its lowest
// byte the first digit), and whether each is one, eight at a time: for a
// byte c below 0x80, c+(0x80-lo) has its top bit set when c >= lo and
// c+(0x7f-hi) has it clear when c <= hi, no sum carrying into the next
// byte. A letter's low four bits are 1 to 6, and 9 more make its value.
func hexWord(x uint64) (uint64, bool) {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	l := x | 0x20*ones
	digits := (x + (0x80-'0')*ones) &^ (x + (0x7f-'9')*ones)
	letters := (l + (0x80-'a')*ones) &^ (l + (0x7f-'f')*ones) & highs
	ok := x&highs == 0 && (digits|letters)&highs == highs
	v := bits.ReverseBytes64(x&(0x0f*ones) + letters>>7*9) // the first digit highest
	v = (v | v>>4) & 0x00ff00ff00ff00ff
	v = (v | v>>8) & 0x0000ffff0000ffff
	v = (v | v>>16) & 0x00000000ffffffff
	return v, ok
}

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
