package frontdoor

import (
	"crypto/tls"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// TicketKeySource gives the TLS session ticket keys every node of a cluster
// shares (keyring.Ring satisfies it), so a ticket one node issued resumes
// the session on another.
type TicketKeySource interface {
	// TicketKeys returns the keys at now: the first encrypts new tickets,
	// each decrypts. Empty: none yet (tickets stay local to this node,
	// or, from a TicketPauser, none are issued). Called on every
	// handshake that issues or presents a ticket.
	TicketKeys(now time.Time) [][32]byte
}

// TicketPauser is a TicketKeySource that would rather the listeners issue
// no session ticket than one that only this node opens: while its
// TicketKeys is empty they issue none and resume none, so a client keeps
// the ticket it holds, which the other nodes still resume, instead of
// swapping it for one they cannot open.
type TicketPauser interface {
	TicketKeySource
	// PausesTickets reports whether an empty TicketKeys pauses tickets.
	PausesTickets() bool
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
	pause := false
	if p, ok := src.(TicketPauser); ok {
		pause = p.PausesTickets()
	}
	for _, l := range s.ls {
		if l.tls == nil {
			continue
		}
		t.install(l.tls)
		for _, r := range l.sni {
			t.install(r.cfg)
		}
		if pause {
			t.pauseWithoutKeys(l.tls, l.srv.Protocols, l.sni)
		}
	}
}

// pauseWithoutKeys makes the listener whose config is tc (serving protos,
// with Sni entries rules) turn session tickets off for a handshake while
// src has no keys. crypto/tls reads SessionTicketsDisabled from the config
// of the handshake only, and http.Server serves a clone of tc, so the
// switch is GetConfigForClient's: the config that would serve the
// handshake (an Sni entry's, or the server's clone of tc) is swapped for
// a copy with tickets off. The copy of tc is made at the first paused
// handshake, once http.Server has set tc up for HTTP/2, and given the
// application protocols the server's clone has.
func (t *ticketer) pauseWithoutKeys(tc *tls.Config, protos *http.Protocols, rules []*sniRule) {
	off := func(c *tls.Config) *tls.Config {
		c = c.Clone()
		c.SessionTicketsDisabled = true
		return c
	}
	offRules := make(map[*tls.Config]*tls.Config, len(rules))
	for _, r := range rules {
		offRules[r.cfg] = off(r.cfg)
	}
	next := tc.GetConfigForClient
	offSelf := sync.OnceValue(func() *tls.Config {
		c := off(tc)
		c.GetConfigForClient = nil
		if protos != nil {
			c.NextProtos = serverNextProtos(c.NextProtos, *protos)
		}
		return c
	})
	tc.GetConfigForClient = func(hello *tls.ClientHelloInfo) (*tls.Config, error) {
		var c *tls.Config
		if next != nil {
			var err error
			if c, err = next(hello); err != nil {
				return nil, err
			}
		}
		if len(t.src.TicketKeys(time.Now())) > 0 {
			return c, nil
		}
		if c == nil {
			return offSelf(), nil
		}
		if o := offRules[c]; o != nil {
			return o, nil
		}
		return c, nil // not a config of ours (the ACME challenge's)
	}
}

// serverNextProtos is the ALPN list http.Server serves for nextProtos and
// protos (net/http's adjustNextProtos): h2 and http/1.1 as protos allows,
// the others kept.
func serverNextProtos(nextProtos []string, protos http.Protocols) []string {
	out := slices.DeleteFunc(slices.Clone(nextProtos), func(p string) bool {
		return (p == "h2" && !protos.HTTP2()) || (p == "http/1.1" && !protos.HTTP1())
	})
	if protos.HTTP2() && !slices.Contains(out, "h2") {
		out = append(out, "h2")
	}
	if protos.HTTP1() && !slices.Contains(out, "http/1.1") {
		out = append(out, "http/1.1")
	}
	return out
}
