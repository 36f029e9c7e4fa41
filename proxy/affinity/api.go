package affinity

// This file is the contract between the data path (package proxy) and the
// affinity engine. The engine's implementation lives in the other files of
// this package; the data path relies only on what is declared here.

import (
	"net/http"
	"time"

	"github.com/tether-proxy/tether/proxy/config"
	"github.com/tether-proxy/tether/proxy/upstream"
)

// Outcome is what affinity resolution made of a request, with Envoy's
// stateful-session statistic names.
type Outcome int

const (
	// NoSession: the request carried no affinity key.
	NoSession Outcome = iota
	// Routed: a valid key led to an available destination.
	Routed
	// FailedOpen: the key was invalid or its destination unavailable, and the
	// request was redistributed (FailurePolicy Redistribute).
	FailedOpen
	// FailedClosed: as FailedOpen, but the request was refused
	// (FailurePolicy Return503Error).
	FailedClosed
)

func (o Outcome) String() string {
	switch o {
	case Routed:
		return "routed"
	case FailedOpen:
		return "failed_open"
	case FailedClosed:
		return "failed_closed"
	default:
		return "no_session"
	}
}

// Keyring seals and opens affinity values. purpose is authenticated data that
// binds a value to its policy, cluster and key name. Implemented by package
// keyring; declared here so the data path does not depend on storage.
type Keyring interface {
	Seal(purpose, plaintext []byte) (string, error)
	Open(purpose []byte, value string) ([]byte, error)
}

// Options are the engine's collaborators.
type Options struct {
	// Keyring is required by the Cookie, CustomHeader and Envelope policies.
	Keyring Keyring
	// Now is the clock for cookie Expires; nil means time.Now.
	Now func() time.Time
	// Yarp opens (and optionally issues) YARP's Cookie and CustomHeader
	// values; zero: tether's own values only (yarp.go).
	Yarp Yarp
}

// Decision is the result of Resolve for one request.
type Decision struct {
	Outcome Outcome
	// Candidates are the destinations the load balancer picks from. Empty
	// (with Status 0) means no destination can take the request: 503.
	Candidates []*upstream.Destination
	// Status, when non-zero, is the status to answer instead of proxying
	// (FailedClosed: FailureStatusCode).
	Status int
	// Attach is true when the response must carry the chosen destination's
	// key (first response of a session, or after a redistribution).
	Attach bool

	// envelope remembers the envelope Resolve unwrapped, so RewriteRequest
	// need not open it a second time.
	envelope envelopeHit
}

// Provider resolves affinity for one cluster (or one route's override).
// A nil *Provider means affinity is disabled; its methods are safe to call.
type Provider struct {
	impl
}

// New builds the provider for cfg over cluster c. It returns nil, nil when
// cfg is not Enabled. The key lookup table is precomputed here.
func New(clusterID string, cfg config.SessionAffinity, c *upstream.Cluster, opts Options) (*Provider, error) {
	return newProvider(clusterID, cfg, c, opts)
}

// Resolve finds the candidates for r. buf may be used as backing storage for
// Decision.Candidates to avoid allocation. Candidates may also be the
// cluster's shared list of available destinations: callers must not modify
// it.
func (p *Provider) Resolve(r *http.Request, c *upstream.Cluster, now time.Time, buf []*upstream.Destination) Decision {
	if p == nil {
		return Decision{Outcome: NoSession, Candidates: c.Available(now)}
	}
	return p.resolve(r, c, now, buf)
}

// RewriteRequest adjusts the outgoing request to dest (envelope policies put
// back the backend's own session value). in is the client's request.
func (p *Provider) RewriteRequest(in, out *http.Request, dest *upstream.Destination, d Decision) {
	if p == nil {
		return
	}
	p.rewriteRequest(in, out, dest, d)
}

// RewritesRequest: RewriteRequest may read or change the outgoing
// request's fields (an envelope policy's).
func (p *Provider) RewritesRequest() bool { return p != nil && p.policy.envelope() }

// SetsResponseFields: Affinitize reads or changes the fields of a
// response to a request decided as d (an envelope policy's, or a key to
// attach).
func (p *Provider) SetsResponseFields(d Decision) bool {
	return p != nil && (p.policy.envelope() || d.Attach)
}

// Affinitize adds the session key of dest to the response when d.Attach, or
// wraps the backend's own session value (envelope policies). secure is true
// when the client reached tether over HTTPS (after TrustedProxies).
func (p *Provider) Affinitize(resp *http.Response, dest *upstream.Destination, d Decision, secure bool) {
	if p == nil {
		return
	}
	p.affinitize(resp, dest, d, secure)
}
