package swar

import (
	"encoding/binary"
	"testing"
)

// Each test against the byte-by-byte answer, on every byte value at every
// position of a word whose other bytes vary too.
func TestWordTestsAreExact(t *testing.T) {
	fills := []byte{0x00, 0x1f, 0x20, 0x41, 0x7f, 0x80, 0xff}
	for _, fill := range fills {
		for pos := 0; pos < 8; pos++ {
			for v := 0; v < 256; v++ {
				var b [8]byte
				for i := range b {
					b[i] = fill
				}
				b[pos] = byte(v)
				x := WordBytes(b[:])
				if x != binary.LittleEndian.Uint64(b[:]) || x != Word(string(b[:])) {
					t.Fatalf("Word(%x) = %x", b, x)
				}
				for _, n := range []byte{0x20, 0x21, 0x80} {
					want := false
					for _, c := range b {
						want = want || c < n
					}
					if got := Below(x, n) != 0; got != want {
						t.Fatalf("Below(%x, %#x) = %v, want %v", b, n, got, want)
					}
				}
				for _, c := range []byte{'\r', '\n', '"', '\\', 0x7f, 0x00} {
					want := false
					for _, d := range b {
						want = want || d == c
					}
					if got := Has(x, c) != 0; got != want {
						t.Fatalf("Has(%x, %#x) = %v, want %v", b, c, got, want)
					}
				}
				want := false
				for _, c := range b {
					want = want || c >= 0x80
				}
				if got := NonASCII(x) != 0; got != want {
					t.Fatalf("NonASCII(%x) = %v, want %v", b, got, want)
				}
			}
		}
	}
}
