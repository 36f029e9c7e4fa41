package lb

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/tether-proxy/tether/proxy/upstream"
)

// Policy picks one destination among candidates (never empty when called).
// Implementations are safe for concurrent use.
type Policy interface {
	Pick(r *http.Request, candidates []*upstream.Destination) *upstream.Destination
}

// Policy names, as YARP spells them (config key LoadBalancingPolicy).
const (
	PowerOfTwoChoices = "PowerOfTwoChoices"
	RoundRobin        = "RoundRobin"
	LeastRequests     = "LeastRequests"
	Random            = "Random"
	FirstAlphabetical = "FirstAlphabetical"
)

// names is the order valid names are listed in errors.
var names = []string{PowerOfTwoChoices, RoundRobin, LeastRequests, Random, FirstAlphabetical}

// Names lists the valid policy names.
func Names() []string { return append([]string(nil), names...) }

// New returns the policy with YARP's name; "" is PowerOfTwoChoices. Names
// match case-insensitively, as .NET configuration does. Each call returns a
// fresh policy (RoundRobin keeps its own counter), so build one per cluster.
func New(name string) (Policy, error) {
	switch {
	case name == "" || strings.EqualFold(name, PowerOfTwoChoices):
		return powerOfTwoChoices{}, nil
	case strings.EqualFold(name, RoundRobin):
		return &roundRobin{}, nil
	case strings.EqualFold(name, LeastRequests):
		return leastRequests{}, nil
	case strings.EqualFold(name, Random):
		return random{}, nil
	case strings.EqualFold(name, FirstAlphabetical):
		return firstAlphabetical{}, nil
	}
	return nil, fmt.Errorf("unknown load balancing policy %q (valid: %s)", name, strings.Join(names, ", "))
}
