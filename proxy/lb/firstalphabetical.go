package lb

import (
	"net/http"
	"unicode"
	"unicode/utf8"

	"github.com/tether-proxy/tether/proxy/upstream"
)

// firstAlphabetical takes the candidate with the alphabetically first ID,
// compared ignoring case as YARP does (OrdinalIgnoreCase); the first of
// equal IDs wins. It suits primary/standby setups. It scans instead of
// trusting the candidates to be sorted.
type firstAlphabetical struct{}

var _ Policy = firstAlphabetical{}

func (firstAlphabetical) Pick(_ *http.Request, c []*upstream.Destination) *upstream.Destination {
	best := c[0]
	for _, d := range c[1:] {
		if compareFold(d.ID, best.ID) < 0 {
			best = d
		}
	}
	return best
}

// compareFold compares a and b rune by rune after upper-casing, without
// allocating; a shorter prefix sorts first.
func compareFold(a, b string) int {
	// IDs often share a long prefix ("app-0…"); skip it byte-wise, backing
	// up to a rune start so a rune is never split.
	i := 0
	for i < len(a) && i < len(b) && a[i] == b[i] {
		i++
	}
	for i > 0 && ((i < len(a) && !utf8.RuneStart(a[i])) || (i < len(b) && !utf8.RuneStart(b[i]))) {
		i--
	}
	a, b = a[i:], b[i:]
	for a != "" && b != "" {
		var ra, rb rune
		if a[0] < utf8.RuneSelf && b[0] < utf8.RuneSelf {
			ra, rb = rune(a[0]), rune(b[0])
			a, b = a[1:], b[1:]
			if 'a' <= ra && ra <= 'z' {
				ra -= 'a' - 'A'
			}
			if 'a' <= rb && rb <= 'z' {
				rb -= 'a' - 'A'
			}
		} else {
			var na, nb int
			ra, na = utf8.DecodeRuneInString(a)
			rb, nb = utf8.DecodeRuneInString(b)
			a, b = a[na:], b[nb:]
			ra, rb = unicode.ToUpper(ra), unicode.ToUpper(rb)
		}
		if ra != rb {
			if ra < rb {
				return -1
			}
			return 1
		}
	}
	switch {
	case a == "" && b == "":
		return 0
	case a == "":
		return -1
	}
	return 1
}
