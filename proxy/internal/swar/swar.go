package swar

const (
	ones  = 0x0101010101010101
	highs = 0x8080808080808080
)

// Word is s's first eight bytes as a little-endian word; s has at least
// eight.
func Word(s string) uint64 {
	_ = s[7]
	return uint64(s[0]) | uint64(s[1])<<8 | uint64(s[2])<<16 | uint64(s[3])<<24 |
		uint64(s[4])<<32 | uint64(s[5])<<40 | uint64(s[6])<<48 | uint64(s[7])<<56
}

// Word32 is s's first four bytes as a little-endian word; s has at least
// four.
func Word32(s string) uint32 {
	_ = s[3]
	return uint32(s[0]) | uint32(s[1])<<8 | uint32(s[2])<<16 | uint32(s[3])<<24
}

// WordBytes is Word for a byte slice.
func WordBytes(b []byte) uint64 {
	_ = b[7]
	return uint64(b[0]) | uint64(b[1])<<8 | uint64(b[2])<<16 | uint64(b[3])<<24 |
		uint64(b[4])<<32 | uint64(b[5])<<40 | uint64(b[6])<<48 | uint64(b[7])<<56
}

// Below is non-zero when a byte of x is below n (n at most 0x80): the
// borrow starts at the lowest such byte, so whether there is one is exact.
func Below(x uint64, n byte) uint64 { return (x - uint64(n)*ones) &^ x & highs }

// Has is non-zero when a byte of x equals c (a zero byte of x^c).
func Has(x uint64, c byte) uint64 {
	y := x ^ uint64(c)*ones
	return (y - ones) &^ y & highs
}

// NonASCII is non-zero when a byte of x is 0x80 or above.
func NonASCII(x uint64) uint64 { return x & highs }
