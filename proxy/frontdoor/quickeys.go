package frontdoor

import "github.com/quic-go/quic-go"

// QUICKeySource derives keys from material every node of a cluster holds
// alike and keeps across restarts (keyring.Secrets satisfies it, from the
// cluster secret). HTTP/3 listeners key two stateless QUIC mechanisms with
// it, so that every node and a restarted node produce and accept the same:
//   - address-validation tokens (a Retry's, RFC 9000 8.1.2, and the
//     NEW_TOKEN a client presents on its next connection), which then
//     validate a client on any node, not only on the one that issued them;
//   - stateless resets (RFC 9000 10.3): a node that gets a packet of a
//     connection it does not know (it restarted, or the connection was
//     another node's) answers with the reset the client was promised, and
//     the client drops the connection at once instead of waiting for its
//     idle timeout.
type QUICKeySource interface {
	// KEK returns the 32-byte key derived for info.
	KEK(info string) []byte
}

// Purposes of the keys from a QUICKeySource.
const (
	quicTokenInfo = "tether quic address validation token"
	quicResetInfo = "tether quic stateless reset"
)

// quicKeys are the keys of a listener's QUIC transports; nil: random per
// transport, as quic-go picks them (tokens stay with this process, and no
// stateless reset is sent).
type quicKeys struct {
	token *quic.TokenGeneratorKey
	reset *quic.StatelessResetKey
}

// UseQUICKeys keys the address-validation tokens and stateless resets of
// every HTTP/3 listener of s from src. Call it before Start; a key that
// src cannot give (not 32 bytes) leaves that mechanism as without it.
func (s *Server) UseQUICKeys(src QUICKeySource) {
	var k quicKeys
	if b := src.KEK(quicTokenInfo); len(b) == len(quic.TokenGeneratorKey{}) {
		k.token = new(quic.TokenGeneratorKey)
		copy(k.token[:], b)
	}
	if b := src.KEK(quicResetInfo); len(b) == len(quic.StatelessResetKey{}) {
		k.reset = new(quic.StatelessResetKey)
		copy(k.reset[:], b)
	}
	for _, l := range s.ls {
		if l.h3 != nil {
			l.h3.keys = k
		}
	}
}
