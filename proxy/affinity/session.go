package affinity

import (
	"crypto/rand"
	"encoding/binary"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cespare/xxhash/v2"

	"github.com/tether-proxy/tether/proxy/upstream"
)

// Session ids and the input of deterministic redistribution (proxy/DESIGN.md,
// "Session affinity").
//
// Redistribution must pick the same replacement for one session on every
// node, and different replacements for different sessions, so that the
// sessions of a dead destination spread over the healthy ones. Its input
// (the rendezvous seed) is therefore per session:
//
//   - Sealed policies (Cookie, CustomHeader, EnvelopeCookie, EnvelopeHeader):
//     a value sealed since this change carries a random 64-bit session id
//     chosen when the session starts. Its plaintext is sessionMagic (0x00
//     'S'), the id (8 bytes, big-endian), then the key input; the seed is
//     the id. Values sealed before (plaintext: the key input alone), YARP's
//     values and values that do not open keep the old seed:
//     XxHash64(the raw value).
//   - HashCookie and ArrCookie, whose wire value is one per destination
//     (YARP's format, unchanged): the seed is XxHash64(raw value || 0x00 ||
//     client address), the client address being what the data path
//     believes after TrustedProxies (ResolveClient).
//
// GCM's nonce budget. Every seal draws a random 96-bit nonce, and the
// number of values sealed under one key must stay well under 2^32. A
// session id makes every new session's value a seal of its own (only new
// sessions and redistributions seal: a routed request never does; an
// envelope seals when the backend sets its session value). Per node and
// per key, at most sessionSealBudget (2^26) values are sealed with a
// session id; after that, until the active key changes, the node falls
// back to one value per destination group and key, as before session ids
// (those sessions redistribute by the old seed: deterministic, but not
// spread). A cluster of n nodes thus seals at most n·2^26 + n·groups values
// per key: 2^30 at 16 nodes. Keys stay active about 81 days (90-day
// lifetime, rotated with a tenth left), so the budget lasts a node that
// starts fewer than ~9.5 new sessions per second on average over a key's
// life. The count is kept per key id in the process, across reloads. A
// keyring that does not name its active key (no ActiveKeyID) cannot be
// counted and seals per session without limit: tether's own keyring always
// names it. YARP-issued values (Yarp.Issue) keep YARP's plaintext, the key
// input alone, and are reused per group as before.

// sessionMagic starts the plaintext of a value that carries a session id.
// No destination id or AffinityKey in a real config starts with a NUL, and
// lookup falls back to the whole plaintext when the rest names no group.
const sessionMagic = "\x00S"

const sessionHeader = len(sessionMagic) + 8

// sessionSealBudget is how many values one node seals with a session id
// under one key before it reuses one value per group (see above). A
// variable for tests.
var sessionSealBudget uint64 = 1 << 26

// newSessionID fills b with a random session id (a variable for tests,
// which need repeatable ids).
var newSessionID = func(b []byte) { _, _ = rand.Read(b) } // never fails since Go 1.24

// sealCounts counts session seals per key id, process-wide (providers are
// rebuilt on every reload; the key's budget is not).
var sealCounts sync.Map // key id -> *atomic.Uint64

// splitSession parses a sealed plaintext: the session id and the key input
// when it carries one, else the plaintext as the key input.
func splitSession(pt []byte) (sid uint64, input []byte, ok bool) {
	if len(pt) >= sessionHeader && string(pt[:len(sessionMagic)]) == sessionMagic {
		return binary.BigEndian.Uint64(pt[len(sessionMagic):sessionHeader]), pt[sessionHeader:], true
	}
	return 0, pt, false
}

// lookupSealed finds the group of an opened plaintext. A plaintext that
// looks like a session value but names no group is tried whole (an old
// value of a pathological key input that starts with the magic).
func (t *table) lookupSealed(pt []byte) (members []*upstream.Destination, sid uint64, hasSID bool) {
	if id, in, ok := splitSession(pt); ok {
		if m := t.lookup[string(in)]; m != nil {
			return m, id, true
		}
	}
	return t.lookup[string(pt)], 0, false
}

// sealKey is the sealed value for a new session on dest's group: with a
// fresh session id while the active key's budget lasts, else the value
// shared by the group under the active key.
func (p *impl) sealKey(dest *upstream.Destination) (string, bool) {
	ak, named := p.keyring.(activeKeyer)
	if yk, ok := p.keyring.(*yarpKeyring); ok {
		if yk.issuesYarp() {
			return p.sharedKey(dest, ak)
		}
		ak, named = yk.own.(activeKeyer) // tether's own key seals
	}
	if !named {
		return p.sealSession(dest)
	}
	id := ak.ActiveKeyID(p.now())
	if id == "" {
		return p.sealSession(dest)
	}
	n, _ := sealCounts.LoadOrStore(id, new(atomic.Uint64))
	if n.(*atomic.Uint64).Add(1) > sessionSealBudget {
		return p.sharedKey(dest, ak)
	}
	return p.sealSession(dest)
}

// sealSession seals a new session id with dest's key input.
func (p *impl) sealSession(dest *upstream.Destination) (string, bool) {
	pt := make([]byte, sessionHeader, sessionHeader+len(dest.AffinityKey))
	copy(pt, sessionMagic)
	newSessionID(pt[len(sessionMagic):sessionHeader])
	pt = append(pt, dest.AffinityKey...)
	v, err := p.keyring.Seal(p.purpose, pt)
	return v, err == nil
}

// sharedKey is one sealed value per destination group and active key (the
// key input alone): every value sealed is a fresh random nonce.
func (p *impl) sharedKey(dest *upstream.Destination, ak activeKeyer) (string, bool) {
	var id string
	if ak != nil {
		id = ak.ActiveKeyID(p.now())
	}
	if c, ok := p.sealed.Load(dest.AffinityKey); ok && id != "" && c.(sealedValue).keyID == id {
		return c.(sealedValue).value, true
	}
	v, err := p.keyring.Seal(p.purpose, []byte(dest.AffinityKey))
	if err != nil {
		return "", false
	}
	if id != "" {
		p.sealed.Store(dest.AffinityKey, sealedValue{keyID: id, value: v})
	}
	return v, true
}

// issuesYarp reports whether Seal currently issues YARP's values.
func (k *yarpKeyring) issuesYarp() bool { return k.issue && k.dp.DefaultKeyID() != "" }

// seed is the rendezvous seed of a broken session (see the top of this
// file): the session id when the value carried one, else a hash of the raw
// value, with the client address for the hash policies.
func (p *impl) seed(raw, client string, hit envelopeHit) uint64 {
	if hit.hasSID {
		return hit.sid
	}
	if p.policy.sealed() {
		return xxhash.Sum64String(raw)
	}
	var d xxhash.Digest
	d.Reset()
	_, _ = d.WriteString(raw)
	_, _ = d.WriteString("\x00")
	_, _ = d.WriteString(client)
	return d.Sum64()
}

// ResolveClient is Resolve with the client's address as the data path
// sees it (after TrustedProxies): the hash policies' redistribution input.
// Resolve itself takes the host of r.RemoteAddr.
func (p *Provider) ResolveClient(r *http.Request, client string, c *upstream.Cluster, now time.Time, buf []*upstream.Destination) Decision {
	if p == nil {
		return Decision{Outcome: NoSession, Candidates: c.Available(now)}
	}
	return p.resolveFor(r, client, c, now, buf)
}

// remoteHost is the host of r.RemoteAddr ("" without one).
func remoteHost(r *http.Request) string {
	if r == nil {
		return ""
	}
	// By hand: net.SplitHostPort allocates its error for an address
	// without a port, and this is on every request's path.
	a := r.RemoteAddr
	if i := strings.LastIndexByte(a, ':'); i >= 0 && strings.IndexByte(a[i+1:], ']') < 0 {
		a = a[:i]
	}
	if len(a) >= 2 && a[0] == '[' && a[len(a)-1] == ']' {
		a = a[1 : len(a)-1]
	}
	return a
}

// Replacement is where a retry sends a session whose destination failed to
// connect (the data path's one retry: proxy/DESIGN.md, "One retry"): the
// deterministic redistribution of d's session (the same seed Resolve would
// use once the destination is gone, on every node), with failed left out. The
// result has Outcome FailedOpen and Attach set, so the response carries the
// new destination's key. A request without a session value, or affinity
// disabled, gets d back unchanged: the caller picks as for a new session.
// Under Return503Error a session never moves: the result is FailedClosed with
// Status FailureStatusCode and no candidates.
func (p *Provider) Replacement(c *upstream.Cluster, now time.Time, d Decision, failed *upstream.Destination, buf []*upstream.Destination) Decision {
	if p == nil || d.Outcome == NoSession || d.Status != 0 {
		return d
	}
	if !p.redistribute {
		return Decision{Outcome: FailedClosed, Status: p.status, envelope: d.envelope}
	}
	if c == nil {
		c = p.cluster
	}
	return Decision{Outcome: FailedOpen, Candidates: p.replacementFor(p.tableFor(c), d.envelope, now, failed, buf), Attach: true, envelope: d.envelope}
}

// replacementFor is where a broken session goes: the one function behind
// both Resolve's redistribution (skip nil: its destination no longer
// takes requests here) and Replacement (skip: the destination a retry
// failed to reach), with the same input, the session's seed and the
// groups that take new sessions, less skip. Once skip is excluded on
// every node the two agree, so a session moved by a retry on one node
// stays where another node's redistribution would send it: it moves once.
func (p *impl) replacementFor(t *table, e envelopeHit, now time.Time, skip *upstream.Destination, buf []*upstream.Destination) []*upstream.Destination {
	return t.rendezvous(buf, p.seed(e.value, e.client, e), now, skip)
}
