package lb

import (
	"net/http"

	"github.com/tether-proxy/tether/proxy/upstream"
)

// Policy picks one destination among candidates (never empty when called).
// Implementations are safe for concurrent use.
type Policy interface {
	Pick(r *http.Request, candidates []*upstream.Destination) *upstream.Destination
}

// New returns the policy with YARP's name; "" is PowerOfTwoChoices.
func New(name string) (Policy, error) {
	panic("contract stub: implemented by the load-balancing work")
}
