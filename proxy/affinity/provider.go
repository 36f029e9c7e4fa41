package affinity

import (
	"encoding/binary"
	"fmt"
	"net/textproto"
	"strings"
	"sync"
	"time"

	"github.com/tether-proxy/tether/proxy/config"
	"github.com/tether-proxy/tether/proxy/upstream"

	"golang.org/x/net/http/httpguts"
)

// policy is the parsed SessionAffinity.Policy.
type policy int

const (
	hashCookie policy = iota
	arrCookie
	encCookie
	customHeader
	envelopeCookie
	envelopeHeader
)

// policyNames are the canonical (YARP) spellings; the canonical name, not
// the configured spelling, goes into the sealing purpose so that nodes
// configured with "cookie" and "Cookie" agree.
var policyNames = [...]string{
	hashCookie:     "HashCookie",
	arrCookie:      "ArrCookie",
	encCookie:      "Cookie",
	customHeader:   "CustomHeader",
	envelopeCookie: "EnvelopeCookie",
	envelopeHeader: "EnvelopeHeader",
}

func (p policy) String() string { return policyNames[p] }

// sealed reports whether values of the policy go through the keyring.
func (p policy) sealed() bool { return p >= encCookie }

// inHeader reports whether the value travels in a header of its own rather
// than in a cookie.
func (p policy) inHeader() bool { return p == customHeader || p == envelopeHeader }

// envelope reports whether the policy wraps the backend's own value.
func (p policy) envelope() bool { return p == envelopeCookie || p == envelopeHeader }

// MaxKeyLength caps the length of an affinity value read from a request;
// longer values are affinity failures and get no decoding work at all.
const MaxKeyLength = 4096

// DefaultFailureStatusCode is answered by Return503Error when
// FailureStatusCode is not set.
const DefaultFailureStatusCode = 503

// impl is the state of one Provider. Everything here is fixed at New and
// read-only afterwards, so a Provider is safe for concurrent use.
type impl struct {
	clusterID string
	policy    policy
	// name is the cookie name, or the canonical header name for the header
	// policies.
	name         string
	redistribute bool
	status       int
	keyring      Keyring
	purpose      []byte
	cookie       cookieAttrs
	now          func() time.Time

	// cluster and tab are the cluster New was given and its precomputed
	// lookup table.
	cluster *upstream.Cluster
	tab     *table

	// sealed caches sealed key inputs per active key (see keyFor); bounded
	// by the cluster's destination groups.
	sealed *sync.Map
}

// table is the precomputed view of one cluster's destinations.
type table struct {
	// lookup maps the lookup form of a request value (HashCookie: lowercase
	// hex; ArrCookie: uppercase hex; sealed policies: the key input) to the
	// destinations it selects, sorted by ID.
	lookup map[string][]*upstream.Destination
	// hashed is lookup by the number a HashCookie key spells (hexKey), so
	// that a request's key is read into a number rather than into a string
	// to hash and compare; few holds it instead when it has at most
	// fewKeys keys, compared one by one.
	hashed map[uint64][]*upstream.Destination
	few    []hashedKey
	// groups are the distinct key inputs with their members, sorted by
	// input: the units of deterministic redistribution.
	groups []group
	// wire maps a key input to its hash value (hash policies only).
	wire map[string]string
}

type group struct {
	input   string
	members []*upstream.Destination
}

func newProvider(clusterID string, cfg config.SessionAffinity, c *upstream.Cluster, opts Options) (*Provider, error) {
	if !cfg.Enabled {
		return nil, nil
	}
	var errs config.Errors
	bad := func(field, format string, args ...any) {
		errs = append(errs, config.FieldError{Path: "SessionAffinity." + field, Message: fmt.Sprintf(format, args...)})
	}

	im := impl{clusterID: clusterID, now: opts.Now, keyring: opts.Keyring}
	if im.now == nil {
		im.now = time.Now
	}

	pol, ok := parsePolicy(cfg.Policy)
	if !ok {
		bad("Policy", "unknown policy %q (want HashCookie, ArrCookie, Cookie, CustomHeader, EnvelopeCookie or EnvelopeHeader)", cfg.Policy)
	}
	im.policy = pol
	if ok && pol.sealed() && opts.Keyring == nil {
		bad("Policy", "policy %s needs the cluster keyring, and none was given", pol)
	}
	if purpose, yarp := yarpPurposes[pol]; ok && yarp && opts.Yarp.Protection != nil && opts.Keyring != nil {
		im.keyring = &yarpKeyring{own: opts.Keyring, dp: opts.Yarp.Protection, purpose: purpose, cookie: pol == encCookie, issue: opts.Yarp.Issue}
	}

	switch {
	case cfg.FailurePolicy == "" || strings.EqualFold(cfg.FailurePolicy, "Redistribute"):
		im.redistribute = true
	case strings.EqualFold(cfg.FailurePolicy, "Return503Error"):
	default:
		bad("FailurePolicy", "unknown failure policy %q (want Redistribute or Return503Error)", cfg.FailurePolicy)
	}

	im.status = cfg.FailureStatusCode
	if im.status == 0 {
		im.status = DefaultFailureStatusCode
	} else if im.status < 200 || im.status > 599 {
		bad("FailureStatusCode", "%d is not a final HTTP status code (200-599)", im.status)
	}

	switch {
	case cfg.AffinityKeyName == "":
		bad("AffinityKeyName", "required when Enabled")
	case !httpguts.ValidHeaderFieldName(cfg.AffinityKeyName):
		kind := "cookie"
		if pol.inHeader() {
			kind = "header"
		}
		bad("AffinityKeyName", "%q is not a valid %s name", cfg.AffinityKeyName, kind)
	case pol.inHeader():
		im.name = textproto.CanonicalMIMEHeaderKey(cfg.AffinityKeyName)
	default:
		im.name = cfg.AffinityKeyName
	}

	attrs, cerrs := parseCookieAttrs(browserCookieRules(cfg.AffinityKeyName, cfg.Cookie))
	for _, e := range cerrs {
		bad("Cookie."+e.Path, "%s", e.Message)
	}
	im.cookie = attrs

	if len(errs) > 0 {
		return nil, errs
	}
	im.purpose = purposeOf(pol, clusterID, im.name)
	if c == nil {
		c = upstream.NewCluster(clusterID, nil)
	}
	im.cluster = c
	im.tab = im.buildTable(c)
	im.sealed = new(sync.Map)
	return &Provider{impl: im}, nil
}

func parsePolicy(s string) (policy, bool) {
	if s == "" {
		return hashCookie, true
	}
	for p, name := range policyNames {
		if strings.EqualFold(s, name) {
			return policy(p), true
		}
	}
	return hashCookie, false
}

// purposeOf is the authenticated data a sealed value is bound to: a version
// tag, then policy, cluster id and key name, each length-prefixed so that no
// two different triples share an encoding.
func purposeOf(pol policy, clusterID, name string) []byte {
	b := []byte("tether/affinity/v1")
	for _, s := range []string{pol.String(), clusterID, name} {
		b = binary.AppendUvarint(b, uint64(len(s)))
		b = append(b, s...)
	}
	return b
}

// buildTable precomputes the lookup table for c. Built once per cluster at
// New, so resolution never scans the destinations to match a key.
func (p *impl) buildTable(c *upstream.Cluster) *table {
	t := &table{lookup: make(map[string][]*upstream.Destination, len(c.Destinations))}
	if !p.policy.sealed() {
		t.wire = make(map[string]string, len(c.Destinations))
	}
	idx := make(map[string]int, len(c.Destinations))
	for _, d := range c.Destinations {
		in := d.AffinityKey
		lk := in
		if !p.policy.sealed() {
			w, ok := t.wire[in]
			if !ok {
				w = hashKey(p.policy, in)
				t.wire[in] = w
			}
			lk = w
		}
		// Destinations are sorted by ID, so every slice built here is too.
		t.lookup[lk] = append(t.lookup[lk], d)
		i, ok := idx[in]
		if !ok {
			i = len(t.groups)
			idx[in] = i
			t.groups = append(t.groups, group{input: in})
		}
		t.groups[i].members = append(t.groups[i].members, d)
	}
	sortGroups(t.groups)
	if p.policy == hashCookie {
		if len(t.lookup) > fewKeys {
			t.hashed = make(map[uint64][]*upstream.Destination, len(t.lookup))
		}
		for lk, ds := range t.lookup {
			if k, ok := hexKey(lk); ok && t.hashed != nil {
				t.hashed[k] = ds
			} else if ok {
				t.few = append(t.few, hashedKey{k, ds})
			}
		}
	}
	return t
}

// hashedKey is a HashCookie key's number and the destinations it selects.
type hashedKey struct {
	k       uint64
	members []*upstream.Destination
}

// fewKeys is the most keys a table compares one by one (table.few):
// below a map look-up's cost.
const fewKeys = 8

// hashedLookup is the destinations HashCookie key k selects.
func (t *table) hashedLookup(k uint64) []*upstream.Destination {
	if t.hashed != nil {
		return t.hashed[k]
	}
	for i := range t.few {
		if t.few[i].k == k {
			return t.few[i].members
		}
	}
	return nil
}

// tableFor returns the precomputed table when c is the cluster New was
// given (the data path builds a Provider per cluster snapshot), and
// otherwise a table built for c on the spot: correct, but not free.
func (p *impl) tableFor(c *upstream.Cluster) *table {
	if c == p.cluster || c == nil {
		return p.tab
	}
	return p.buildTable(c)
}
