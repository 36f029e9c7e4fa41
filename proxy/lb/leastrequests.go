package lb

import (
	"net/http"

	"github.com/tether-proxy/tether/proxy/upstream"
)

// leastRequests takes the candidate with the fewest requests in flight; the
// first one wins a tie, so the order of candidates (by ID) breaks ties.
type leastRequests struct{}

var _ Policy = leastRequests{}

func (leastRequests) Pick(_ *http.Request, c []*upstream.Destination) *upstream.Destination {
	best := c[0]
	min := best.Inflight()
	for _, d := range c[1:] {
		if n := d.Inflight(); n < min {
			best, min = d, n
		}
	}
	return best
}
