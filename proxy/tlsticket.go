package proxy

import (
	"crypto/tls"
	"slices"
	"sync/atomic"
	"time"
)

// TicketKeySource gives the TLS session ticket keys every node of a cluster
// shares (keyring.Ring satisfies it), so a ticket one node issued resumes
// the session on another.
type TicketKeySource interface {
	// TicketKeys returns the keys at now: the first encrypts new tickets,
	// each decrypts. Empty: none yet (tickets stay local to this node).
	// Called on every handshake that issues or presents a ticket.
	TicketKeys(now time.Time) [][32]byte
}

// ticketer seals and opens session tickets with the keys of src. It plugs
// into tls.Config as WrapSession and UnwrapSession rather than calling
// SetSessionTicketKeys on the listener's config: http.Server clones that
// config when it starts serving, and Sni entries bring configs of their
// own, while a function field reaches every clone and always reads the
// current keys.
type ticketer struct {
	src TicketKeySource
	// local seals tickets with crypto/tls's own random, rotating keys
	// while src has none: they resume on this node only.
	local *tls.Config
	cur   atomic.Pointer[ticketKeys]
}

// ticketKeys is one set of keys installed in a config of its own, so that
// crypto/tls's EncryptTicket and DecryptTicket use them.
type ticketKeys struct {
	keys [][32]byte
	cfg  *tls.Config
}

func newTicketer(src TicketKeySource) *ticketer {
	return &ticketer{src: src, local: &tls.Config{}}
}

// config is the config whose ticket keys are src's current ones.
func (t *ticketer) config() *tls.Config {
	keys := t.src.TicketKeys(time.Now())
	if len(keys) == 0 {
		return t.local
	}
	if c := t.cur.Load(); c != nil && slices.Equal(c.keys, keys) {
		return c.cfg
	}
	cfg := &tls.Config{}
	cfg.SetSessionTicketKeys(keys)
	t.cur.Store(&ticketKeys{keys: keys, cfg: cfg})
	return cfg
}

func (t *ticketer) wrap(cs tls.ConnectionState, ss *tls.SessionState) ([]byte, error) {
	return t.config().EncryptTicket(cs, ss)
}

// unwrap opens a ticket; one no current key opens (another cluster's, a
// revoked key's, garbage) yields nil: a full handshake, never an error.
func (t *ticketer) unwrap(identity []byte, cs tls.ConnectionState) (*tls.SessionState, error) {
	return t.config().DecryptTicket(identity, cs)
}

func (t *ticketer) install(tc *tls.Config) {
	if tc == nil {
		return
	}
	tc.WrapSession, tc.UnwrapSession = t.wrap, t.unwrap
}

// UseTicketKeys makes every HTTPS listener of s (and each of its Sni
// entries) seal and open TLS session tickets with src's keys, for TLS 1.2
// and 1.3. Call it before Start.
func (s *Server) UseTicketKeys(src TicketKeySource) {
	t := newTicketer(src)
	for i, tc := range s.tlsConfig {
		t.install(tc)
		for _, r := range s.sni[i] {
			t.install(r.cfg)
		}
	}
}
