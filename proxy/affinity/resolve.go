package affinity

import (
	"encoding/binary"
	"net/http"
	"strings"
	"time"

	"github.com/cespare/xxhash/v2"

	"github.com/tether-proxy/tether/proxy/upstream"
)

// envelopeHit is what Resolve learnt of an envelope value, so RewriteRequest
// need not open it again: raw is the value as the client sent it; when ok,
// it authenticated and inner is the backend's own value to forward instead.
// It also carries, for every sealed policy, the session id of a value that
// opened with one (session.go), and the value and client address a retry's
// Replacement needs: the input of redistribution.
type envelopeHit struct {
	by     *impl
	raw    string
	inner  string
	ok     bool
	sid    uint64
	hasSID bool
	value  string
	client string
}

func (p *Provider) resolve(r *http.Request, c *upstream.Cluster, now time.Time, buf []*upstream.Destination) Decision {
	return p.resolveFor(r, remoteHost(r), c, now, buf)
}

func (p *Provider) resolveFor(r *http.Request, client string, c *upstream.Cluster, now time.Time, buf []*upstream.Destination) Decision {
	if c == nil {
		c = p.cluster
	}
	t := p.tableFor(c)
	raw, ok := p.requestValue(r)
	if v, _ := unquote(raw); !ok || v == "" {
		// Rule 1: no key. Every destination that takes new sessions is a
		// candidate; the chosen one's key goes on the response.
		return Decision{Outcome: NoSession, Candidates: c.Available(now), Attach: true}
	}

	var (
		members []*upstream.Destination
		env     envelopeHit
	)
	// Oversized values are failures before any decoding work.
	if len(raw) <= MaxKeyLength {
		members, env = p.find(t, raw)
	}
	env.value, env.client = raw, client
	// Rule 2: a valid key selects its whole group, as far as it may still
	// serve existing sessions (healthy, and before any drain deadline).
	if cands := appendAccepting(buf, members, now, true); len(cands) > len(buf) {
		return Decision{Outcome: Routed, Candidates: cands, envelope: env}
	}

	// Rule 3: invalid key, or its group has no available destination.
	if !p.redistribute {
		return Decision{Outcome: FailedClosed, Status: p.status}
	}
	return Decision{Outcome: FailedOpen, Candidates: p.replacementFor(t, env, now, nil, buf), Attach: true, envelope: env}
}

// requestValue is the raw affinity value of r: the first cookie or the first
// header value with the configured name.
func (p *impl) requestValue(r *http.Request) (string, bool) {
	if r == nil {
		return "", false
	}
	if p.policy.inHeader() {
		return headerValue(r.Header, p.name)
	}
	return cookieValue(r.Header, p.name)
}

// find decodes raw and returns the destinations its key selects (nil when
// the value is invalid or unknown). For envelopes it also returns the
// unwrapped backend value.
func (p *impl) find(t *table, raw string) ([]*upstream.Destination, envelopeHit) {
	switch p.policy {
	case hashCookie:
		v, _ := unquote(raw)
		k, ok := hexKey(v)
		if !ok {
			return nil, envelopeHit{}
		}
		return t.hashedLookup(k), envelopeHit{}
	case arrCookie:
		var k [arrKeyLen]byte
		v, _ := unquote(raw)
		if !foldHex(k[:], v, true) {
			return nil, envelopeHit{}
		}
		return t.lookup[string(k[:])], envelopeHit{}
	case encCookie, customHeader:
		v, _ := unquote(raw)
		pt, err := p.keyring.Open(p.purpose, v)
		if err != nil {
			return nil, envelopeHit{}
		}
		m, sid, hasSID := t.lookupSealed(pt)
		return m, envelopeHit{sid: sid, hasSID: hasSID}
	default: // envelopes
		pt, inner, ok := p.unwrap(raw)
		if !ok {
			return nil, envelopeHit{by: p, raw: raw}
		}
		m, sid, hasSID := t.lookupSealed(pt)
		return m, envelopeHit{by: p, raw: raw, inner: inner, ok: true, sid: sid, hasSID: hasSID}
	}
}

// appendAccepting appends the members that may take the request: existing
// sessions need AcceptsExisting, new ones AcceptsNew.
func appendAccepting(buf, members []*upstream.Destination, now time.Time, existing bool) []*upstream.Destination {
	return appendAcceptingExcept(buf, members, now, existing, nil)
}

// appendAcceptingExcept is appendAccepting leaving out skip (nil: none).
func appendAcceptingExcept(buf, members []*upstream.Destination, now time.Time, existing bool, skip *upstream.Destination) []*upstream.Destination {
	for _, d := range members {
		if d == skip {
			continue
		}
		if existing && d.AcceptsExisting(now) || !existing && d.AcceptsNew(now) {
			buf = append(buf, d)
		}
	}
	return buf
}

// rendezvous is deterministic redistribution: among the groups with a
// destination that takes new sessions, the one whose key input scores
// highest for the session's seed wins (ties: the smaller input, as groups
// are sorted). Every node computes the same winner for the same session,
// so parallel requests of one broken session stay together, and sessions
// with different seeds spread over the groups (session.go). It appends the
// winner's destinations that take new sessions. skip (nil: none) is left
// out as if it took no new sessions (a retry's failed destination).
//
// The seed is 8 bytes (the old value is hashed once), so the work per
// group is fixed however long a value an attacker sends.
func (t *table) rendezvous(buf []*upstream.Destination, seed uint64, now time.Time, skip *upstream.Destination) []*upstream.Destination {
	var scratch [256]byte
	binary.BigEndian.PutUint64(scratch[:8], seed)
	best := -1
	var bestScore uint64
	for i := range t.groups {
		g := &t.groups[i]
		if !anyAcceptsNew(g.members, now, skip) {
			continue
		}
		var s uint64
		if 8+len(g.input) <= len(scratch) {
			s = xxhash.Sum64(scratch[:8+copy(scratch[8:], g.input)])
		} else {
			s = rendezvousScore(scratch[:8], g.input)
		}
		if best < 0 || s > bestScore {
			best, bestScore = i, s
		}
	}
	if best < 0 {
		return buf
	}
	return appendAcceptingExcept(buf, t.groups[best].members, now, false, skip)
}

// rendezvousScore is XxHash64 (seed 0) of the session's 8-byte seed
// followed by the group's key input.
func rendezvousScore(oldDigest []byte, input string) uint64 {
	var d xxhash.Digest
	d.Reset()
	_, _ = d.Write(oldDigest)
	_, _ = d.WriteString(input)
	return d.Sum64()
}

func anyAcceptsNew(ds []*upstream.Destination, now time.Time, skip *upstream.Destination) bool {
	for _, d := range ds {
		if d != skip && d.AcceptsNew(now) {
			return true
		}
	}
	return false
}

// unwrap opens an envelope "<sealed>.<backend value>" (optionally quoted as
// a whole). It returns the sealed plaintext (session.go) and the backend's value, re-quoted when
// the envelope was quoted. The sealed part is base64url and has no '.', so
// the first '.' is the separator and the backend value is kept verbatim,
// dots included.
func (p *impl) unwrap(raw string) (input []byte, inner string, ok bool) {
	if len(raw) > MaxKeyLength {
		return nil, "", false
	}
	v, quoted := unquote(raw)
	i := strings.IndexByte(v, '.')
	if i <= 0 {
		return nil, "", false
	}
	in, err := p.keyring.Open(p.purpose, v[:i])
	if err != nil {
		return nil, "", false
	}
	inner = v[i+1:]
	if quoted {
		inner = `"` + inner + `"`
	}
	return in, inner, true
}
