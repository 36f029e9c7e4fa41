package lb

import (
	"math/rand/v2"
	"net/http"

	"github.com/tether-proxy/tether/proxy/upstream"
)

// powerOfTwoChoices draws two distinct candidates at random and takes the
// one with fewer requests in flight: near LeastRequests' balance without
// herding every node onto the same least-loaded destination.
type powerOfTwoChoices struct{}

var _ Policy = powerOfTwoChoices{}

func (powerOfTwoChoices) Pick(_ *http.Request, c []*upstream.Destination) *upstream.Destination {
	n := len(c)
	if n == 1 {
		return c[0]
	}
	i := rand.IntN(n)
	j := rand.IntN(n - 1)
	if j >= i { // skip i so the two are distinct, uniformly
		j++
	}
	a, b := c[i], c[j]
	if b.Inflight() < a.Inflight() {
		return b
	}
	return a
}
