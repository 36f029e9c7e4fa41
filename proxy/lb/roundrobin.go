package lb

import (
	"net/http"
	"sync/atomic"

	"github.com/tether-proxy/tether/proxy/upstream"
)

// roundRobin cycles through the candidates with one shared counter.
type roundRobin struct {
	next atomic.Uint64
}

var _ Policy = (*roundRobin)(nil)

func (p *roundRobin) Pick(_ *http.Request, c []*upstream.Destination) *upstream.Destination {
	if len(c) == 1 {
		return c[0]
	}
	return c[(p.next.Add(1)-1)%uint64(len(c))]
}
