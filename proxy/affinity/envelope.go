package affinity

import (
	"errors"
	"strings"

	"github.com/tether-proxy/tether/keyring"
)

// Envelopes tether can no longer open. A client that kept an envelope past
// the life of its key (revoked, or expired beyond retention, or from a
// keyring tether no longer has) sends a value that is certainly tether's
// and certainly not the backend's: forwarding it would hand the backend a
// session id it never issued. Such a value reaches the backend as nothing:
// the cookie is left out of the Cookie header, the header value dropped.
// Anything else that does not open (a raw backend value from before
// envelopes, a tampered or foreign one) still goes through as the client
// sent it, as doc.go says.

// staleEnvelope reports whether raw is a well-formed tether envelope whose
// key this node cannot use any more.
func (p *impl) staleEnvelope(raw string) bool {
	if len(raw) > MaxKeyLength {
		return false
	}
	v, _ := unquote(raw)
	i := strings.IndexByte(v, '.')
	if i <= 0 {
		return false
	}
	_, err := p.keyring.Open(p.purpose, v[:i])
	return errors.Is(err, keyring.ErrUnknownKey) || errors.Is(err, keyring.ErrRevoked) || errors.Is(err, keyring.ErrExpired)
}

// envelopeAction is what RewriteRequest does with one value the client sent.
type envelopeAction int

const (
	keepValue    envelopeAction = iota // not tether's: forward as sent
	replaceValue                       // tether's: forward the backend's own value
	dropValue                          // tether's, no longer openable: forward nothing
)

// envelopeOf decides for one value the client sent.
func (p *impl) envelopeOf(raw string, d Decision) (string, envelopeAction) {
	if inner, ok := p.innerOf(raw, d); ok {
		return inner, replaceValue
	}
	if p.staleEnvelope(raw) {
		return "", dropValue
	}
	return "", keepValue
}
