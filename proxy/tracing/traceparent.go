package tracing

import (
	"encoding/binary"
	"math/rand/v2"
	"unsafe"
)

// Header names, in Go's canonical form.
const (
	HeaderTraceparent = "Traceparent"
	HeaderTracestate  = "Tracestate"
)

// Len is the length of a version-00 traceparent.
const Len = 55

// Parent is a valid incoming traceparent.
type Parent struct {
	// TraceID is 32 lowercase hex digits, not all zero.
	TraceID string
	// SpanID (the header's parent-id) is 16 lowercase hex digits, not all
	// zero.
	SpanID string
	// Flags are the trace flags; only Sampled is propagated.
	Flags byte
}

// Sampled is the trace-flags bit saying the caller may have recorded.
const Sampled = 0x01

// Parse reads a traceparent header value as W3C Trace Context requires:
// version, trace-id, parent-id and trace-flags in lowercase hex separated
// by '-'; version ff is invalid; version 00 is exactly 55 characters; a
// later version may carry more fields after a '-', which are ignored; an
// all-zero trace-id or parent-id is invalid. Nothing is trimmed or
// case-folded.
func Parse(s string) (Parent, bool) {
	if len(s) < Len || s[2] != '-' || s[35] != '-' || s[52] != '-' {
		return Parent{}, false
	}
	ver, ok := hexByte(s[0:2])
	if !ok || ver == 0xff {
		return Parent{}, false
	}
	if ver == 0 && len(s) != Len || ver != 0 && len(s) > Len && s[Len] != '-' {
		return Parent{}, false
	}
	flags, ok := hexByte(s[53:55])
	if !ok {
		return Parent{}, false
	}
	p := Parent{TraceID: s[3:35], SpanID: s[36:52], Flags: flags}
	if !nonZeroHex(p.TraceID) || !nonZeroHex(p.SpanID) {
		return Parent{}, false
	}
	return p, true
}

// ParseHeader is Parse over a request's traceparent values: exactly one is
// allowed.
func ParseHeader(vals []string) (Parent, bool) {
	if len(vals) != 1 {
		return Parent{}, false
	}
	return Parse(vals[0])
}

func hexByte(s string) (byte, bool) {
	hi, ok1 := hexDigit(s[0])
	lo, ok2 := hexDigit(s[1])
	return hi<<4 | lo, ok1 && ok2
}

func hexDigit(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	}
	return 0, false
}

// nonZeroHex reports whether s is lowercase hex and not all zeros.
func nonZeroHex(s string) bool {
	zero := true
	for i := 0; i < len(s); i++ {
		if _, ok := hexDigit(s[i]); !ok {
			return false
		}
		zero = zero && s[i] == '0'
	}
	return !zero
}

// ValidTraceID reports whether s is a W3C trace-id: 32 lowercase hex
// digits, not all zero.
func ValidTraceID(s string) bool { return len(s) == 32 && nonZeroHex(s) }

// Format writes a version-00 traceparent for the given trace-id (a random
// new one when traceID is not valid), span-id (a random one when spanID
// is not 16 hex digits) and flags. The trace-id is header[3:35] and the
// span-id header[36:52].
func Format(traceID, spanID string, flags byte) string {
	return FormatHeader(traceID, spanID, flags)[0]
}

// HeaderBuf holds a traceparent and the one-element header slice that
// carries it, so that both take one allocation, or none of their own
// inside a larger one (the proxy's request context). b is never written
// after Format returns, so the string may point into it.
type HeaderBuf struct {
	vals [1]string
	b    [Len]byte
}

// FormatHeader is Format as a header value slice (len and cap 1, so an
// append by anyone copies), built in a single allocation: the data path
// needs the string and the slice for every request.
func FormatHeader(traceID, spanID string, flags byte) []string {
	return new(HeaderBuf).Format(traceID, spanID, flags)
}

// Format is FormatHeader into h, which is used once: what it returns
// points into h for as long as it is in use.
func (h *HeaderBuf) Format(traceID, spanID string, flags byte) []string {
	const hex = "0123456789abcdef"
	b := &h.b
	b[0], b[1], b[2] = '0', '0', '-'
	if ValidTraceID(traceID) {
		copy(b[3:35], traceID)
	} else {
		for {
			a, c := rand.Uint64(), rand.Uint64()
			if a|c != 0 {
				putHex(b[3:19], a)
				putHex(b[19:35], c)
				break
			}
		}
	}
	b[35] = '-'
	if len(spanID) == 16 && nonZeroHex(spanID) {
		copy(b[36:52], spanID)
	} else {
		putHex(b[36:52], NewSpanID())
	}
	b[52] = '-'
	b[53], b[54] = hex[flags>>4], hex[flags&15]
	h.vals[0] = unsafe.String(&b[0], Len)
	return h.vals[:1:1]
}

// NewSpanID is a random non-zero span id. Span ids need to be unique, not
// secret: math/rand/v2's per-thread ChaCha8 source will do.
func NewSpanID() uint64 {
	for {
		if v := rand.Uint64(); v != 0 {
			return v
		}
	}
}

// putHex writes v as 16 lowercase hex digits, eight digits a word: each
// half's nibbles spread one to a byte, the least significant in the
// lowest (written big-endian, so it comes last), then turned into their
// digits all at once ('0' added to each, and 'a'-'0'-10 more to each
// nibble from 10 up: the only bytes to which adding 6 carries into bit 4).
func putHex(dst []byte, v uint64) {
	_ = dst[15]
	binary.BigEndian.PutUint64(dst[0:8], hexWord(uint32(v>>32)))
	binary.BigEndian.PutUint64(dst[8:16], hexWord(uint32(v)))
}

// hexWord is the eight hex digits of x, the last in the lowest byte.
func hexWord(x uint32) uint64 {
	const ones = 0x0101010101010101
	n := uint64(x)
	n = (n | n<<16) & 0x0000ffff0000ffff
	n = (n | n<<8) & 0x00ff00ff00ff00ff
	n = (n | n<<4) & 0x0f0f0f0f0f0f0f0f
	letters := (n + 6*ones) >> 4 & ones // 1 in each byte from 10 up
	return n + '0'*ones + letters*('a'-'0'-10)
}
