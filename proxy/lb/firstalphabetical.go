package lb

import (
	"net/http"

	"github.com/tether-proxy/tether/proxy/upstream"
)

// firstAlphabetical takes the candidate with the lowest ID (ordinal string
// order): a primary/standby setup. It scans instead of trusting the
// candidates to be sorted.
type firstAlphabetical struct{}

var _ Policy = firstAlphabetical{}

func (firstAlphabetical) Pick(_ *http.Request, c []*upstream.Destination) *upstream.Destination {
	best := c[0]
	for _, d := range c[1:] {
		if d.ID < best.ID {
			best = d
		}
	}
	return best
}
