package h2server

// validValue reports whether v is a valid field value, as
// httpguts.ValidHeaderFieldValue: no control byte but the horizontal tab.
// Eight bytes are looked at a time: a word with no byte below 0x20 and
// none equal to 0x7f is valid as it is; one with either is looked at byte
// by byte.
func validValue(v string) bool {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	i := 0
	for ; i+8 <= len(v); i += 8 {
		w := v[i : i+8]
		x := uint64(w[0]) | uint64(w[1])<<8 | uint64(w[2])<<16 | uint64(w[3])<<24 |
			uint64(w[4])<<32 | uint64(w[5])<<40 | uint64(w[6])<<48 | uint64(w[7])<<56
		below := (x - 0x20*ones) &^ x & highs // a byte < 0x20
		y := x ^ 0x7f*ones
		del := (y - ones) &^ y & highs // a byte == 0x7f
		if below|del != 0 && !validBytes(v[i:i+8]) {
			return false
		}
	}
	return validBytes(v[i:])
}

func validBytes(v string) bool {
	for i := 0; i < len(v); i++ {
		if b := v[i]; b < ' ' && b != '\t' || b == 0x7f {
			return false
		}
	}
	return true
}
