package lb

import (
	"math/rand/v2"
	"net/http"

	"github.com/tether-proxy/tether/proxy/upstream"
)

// random takes a uniformly random candidate.
type random struct{}

var _ Policy = random{}

func (random) Pick(_ *http.Request, c []*upstream.Destination) *upstream.Destination {
	if len(c) == 1 {
		return c[0]
	}
	return c[rand.IntN(len(c))]
}
