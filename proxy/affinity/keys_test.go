package affinity

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode/utf16"

	"github.com/cespare/xxhash/v2"

	"github.com/tether-proxy/tether/proxy/upstream"
)

// refUTF16LE, refHashCookie and refArrCookie compute the wire formats
// independently of the code under test.
func refUTF16LE(s string) []byte {
	units := utf16.Encode([]rune(s))
	b := make([]byte, 2*len(units))
	for i, u := range units {
		binary.LittleEndian.PutUint16(b[2*i:], u)
	}
	return b
}

func refHashCookie(id string) string {
	var be [8]byte
	binary.BigEndian.PutUint64(be[:], xxhash.Sum64(refUTF16LE(strings.ToUpper(id))))
	return hex.EncodeToString(be[:])
}

func refArrCookie(id string) string {
	sum := sha256.Sum256(refUTF16LE(strings.ToLower(id)))
	return strings.ToUpper(hex.EncodeToString(sum[:]))
}

// Destination ids with ASCII, Latin-1, CJK and astral (surrogate pair)
// characters.
var vectorIDs = []string{"dest-B", "Backend-01", "café-é", "Ünïcødé-节点", "app-🙂-𝔘"}

// setCookieValue extracts the value of the first Set-Cookie line.
func setCookieValue(t testing.TB, h http.Header, name string) string {
	t.Helper()
	for _, l := range h["Set-Cookie"] {
		if strings.HasPrefix(l, name+"=") {
			v := l[len(name)+1:]
			if i := strings.IndexByte(v, ';'); i >= 0 {
				v = v[:i]
			}
			return v
		}
	}
	t.Fatalf("no Set-Cookie %s in %q", name, h["Set-Cookie"])
	return ""
}

func TestKeyFormatHashCookieIsYARPXxHash64(t *testing.T) {
	for _, id := range vectorIDs {
		t.Run(id, func(t *testing.T) {
			want := refHashCookie(id)
			if len(want) != 16 || want != strings.ToLower(want) {
				t.Fatalf("reference %q is not 16 lowercase hex digits", want)
			}
			c := cluster("c", dest(id), dest("other"))
			p := mustNew(t, "c", enabled("HashCookie", ".Aff"), c, nil)
			resp := &http.Response{Header: http.Header{}}
			p.Affinitize(resp, c.Destination(id), Decision{Attach: true}, false)
			if got := setCookieValue(t, resp.Header, ".Aff"); got != want {
				t.Fatalf("emitted %q, want %q", got, want)
			}
			d := p.Resolve(request("Cookie: .Aff="+want), c, t0, nil)
			if d.Outcome != Routed || len(d.Candidates) != 1 || d.Candidates[0].ID != id {
				t.Fatalf("resolve %q: outcome %v candidates %v", want, d.Outcome, ids(d.Candidates))
			}
		})
	}
}

func TestKeyFormatArrCookieIsIISARRSHA256(t *testing.T) {
	// Cross-check of the reference itself with YARP's own test vector.
	if got := refArrCookie("dest-B"); got != "920A160FA519353932B655488361A944531650016793761EE7224DE632863B13" {
		t.Fatalf("reference ArrCookie(dest-B) = %s", got)
	}
	for _, id := range vectorIDs {
		t.Run(id, func(t *testing.T) {
			want := refArrCookie(id)
			c := cluster("c", dest(id), dest("other"))
			p := mustNew(t, "c", enabled("ArrCookie", "ARRAffinity"), c, nil)
			resp := &http.Response{Header: http.Header{}}
			p.Affinitize(resp, c.Destination(id), Decision{Attach: true}, false)
			if got := setCookieValue(t, resp.Header, "ARRAffinity"); got != want {
				t.Fatalf("emitted %q, want %q", got, want)
			}
			for _, sent := range []string{want, strings.ToLower(want)} {
				d := p.Resolve(request("Cookie: ARRAffinity="+sent), c, t0, nil)
				if d.Outcome != Routed || len(d.Candidates) != 1 || d.Candidates[0].ID != id {
					t.Fatalf("resolve %q: outcome %v candidates %v", sent, d.Outcome, ids(d.Candidates))
				}
			}
		})
	}
}

func TestKeyFormatSealedValuesAreBoundToPolicyClusterAndName(t *testing.T) {
	kr := newFakeKeyring(t)
	mk := func(clusterID, pol, name string) *Provider {
		return mustNew(t, clusterID, enabled(pol, name), cluster(clusterID, dest("a"), dest("b")), kr)
	}
	issue := func(p *Provider, pol, name string) string {
		resp := &http.Response{Header: http.Header{}}
		p.Affinitize(resp, p.cluster.Destination("b"), Decision{Attach: true}, true)
		if pol == "CustomHeader" {
			return resp.Header.Get(name)
		}
		return setCookieValue(t, resp.Header, name)
	}
	req := func(pol, name, v string) *http.Request {
		if pol == "CustomHeader" {
			return request(name + ": " + v)
		}
		return request("Cookie: " + name + "=" + v)
	}
	for _, tc := range []struct {
		desc                string
		pol, cluster, name  string
		pol2, cluster2, nm2 string
		want                Outcome
	}{
		{"Cookie value routes in its own cluster", "Cookie", "c1", "K", "Cookie", "c1", "K", Routed},
		{"CustomHeader value routes in its own cluster", "CustomHeader", "c1", "X-K", "CustomHeader", "c1", "X-K", Routed},
		{"Cookie value replayed into another cluster fails", "Cookie", "c1", "K", "Cookie", "c2", "K", FailedOpen},
		{"CustomHeader value replayed into another cluster fails", "CustomHeader", "c1", "X-K", "CustomHeader", "c2", "X-K", FailedOpen},
		{"Cookie value replayed as CustomHeader fails", "Cookie", "c1", "K", "CustomHeader", "c1", "K", FailedOpen},
		{"Cookie value replayed under another key name fails", "Cookie", "c1", "K", "Cookie", "c1", "K2", FailedOpen},
		{"Cookie value replayed into EnvelopeCookie fails", "Cookie", "c1", "K", "EnvelopeCookie", "c1", "K", FailedOpen},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			p1 := mk(tc.cluster, tc.pol, tc.name)
			v := issue(p1, tc.pol, tc.name)
			if strings.ContainsAny(v, "+/=.") {
				t.Fatalf("value %q is not base64url without padding", v)
			}
			if _, err := base64URLDecode(v); err != nil {
				t.Fatalf("value %q: %v", v, err)
			}
			p2 := mk(tc.cluster2, tc.pol2, tc.nm2)
			raw := v
			if tc.pol2 == "EnvelopeCookie" {
				raw = v + ".JSESSION"
			}
			d := p2.Resolve(req(tc.pol2, tc.nm2, raw), p2.cluster, t0, nil)
			if d.Outcome != tc.want {
				t.Fatalf("outcome %v, want %v", d.Outcome, tc.want)
			}
			if tc.want == Routed && (len(d.Candidates) != 1 || d.Candidates[0].ID != "b") {
				t.Fatalf("candidates %v, want [b]", ids(d.Candidates))
			}
		})
	}
}

func TestKeyFormatPolicyNamesAreCanonicalInPurpose(t *testing.T) {
	// Nodes whose configs spell the policy differently must accept each
	// other's values (config values are case-insensitive).
	kr := newFakeKeyring(t)
	c := cluster("c", dest("a"))
	p1 := mustNew(t, "c", enabled("Cookie", "K"), c, kr)
	p2 := mustNew(t, "c", enabled("cookie", "K"), c, kr)
	resp := &http.Response{Header: http.Header{}}
	p1.Affinitize(resp, c.Destination("a"), Decision{Attach: true}, false)
	v := setCookieValue(t, resp.Header, "K")
	if d := p2.Resolve(request("Cookie: K="+v), c, t0, nil); d.Outcome != Routed {
		t.Fatalf("outcome %v, want routed", d.Outcome)
	}
}

func base64URLDecode(s string) ([]byte, error) {
	return b64.DecodeString(s)
}

var b64 = base64.RawURLEncoding

// TestKeyFormatsFollowDotNetInvariantCasing: .NET's ToUpperInvariant leaves
// dotless 'ı' as it is and ToLowerInvariant leaves dotted 'İ' as it is,
// where Go's strings.ToUpper/ToLower would map them to 'I' and 'i'. The
// expected inputs are spelled out here, cased by hand.
func TestKeyFormatsFollowDotNetInvariantCasing(t *testing.T) {
	xx := func(cased string) string {
		var be [8]byte
		binary.BigEndian.PutUint64(be[:], xxhash.Sum64(refUTF16LE(cased)))
		return hex.EncodeToString(be[:])
	}
	arr := func(cased string) string {
		sum := sha256.Sum256(refUTF16LE(cased))
		return strings.ToUpper(hex.EncodeToString(sum[:]))
	}
	cases := []struct {
		desc, policy, id, want string
	}{
		{"HashCookie upper-cases around a dotless ı", "HashCookie", "backend-ı", xx("BACKEND-ı")},
		{"HashCookie fixed vector for backend-ı", "HashCookie", "backend-ı", "92eda1b9040b31a6"},
		{"HashCookie upper-cases a dotted İ to itself", "HashCookie", "backend-İ", xx("BACKEND-İ")},
		{"ArrCookie lower-cases around a dotted İ", "ArrCookie", "Backend-İ", arr("backend-İ")},
		{"ArrCookie lower-cases a dotless ı to itself", "ArrCookie", "Backend-ı", arr("backend-ı")},
	}
	for _, c := range cases {
		t.Run(c.desc, func(t *testing.T) {
			cl := cluster("c", dest(c.id), dest("other"))
			p := mustNew(t, "c", enabled(c.policy, ".Aff"), cl, nil)
			resp := &http.Response{Header: http.Header{}}
			p.Affinitize(resp, cl.Destination(c.id), Decision{Attach: true}, false)
			if got := setCookieValue(t, resp.Header, ".Aff"); got != c.want {
				t.Fatalf("emitted %q, want %q", got, c.want)
			}
		})
	}
}

// hexKey takes exactly what a HashCookie key's lower-cased lookup did:
// 16 hex digits of either case, as the number the lower-case form spells.
func TestHexKeyIsTheFoldedLookup(t *testing.T) {
	for _, s := range []string{
		"0123456789abcdef", "0123456789ABCDEF", "fFfFfFfFfFfFfFfF", "0000000000000000",
		"0123456789abcde", "0123456789abcdef0", "0123456789abcdeg", "0123456789abcde\xff",
		"g123456789abcdef", "0123456789ab cdef", "0123456789abcd€", "@123456789abcdef", "`123456789abcdef",
		"/123456789abcdef", ":123456789abcdef", "G123456789abcdef",
	} {
		var folded [hashKeyLen]byte
		want, err := uint64(0), error(nil)
		ok := foldHex(folded[:], s, false)
		if ok {
			var b []byte
			if b, err = hex.DecodeString(string(folded[:])); err == nil && hex.EncodeToString(b) == string(folded[:]) {
				want = binary.BigEndian.Uint64(b)
			} else {
				ok = false
			}
		}
		if k, got := hexKey(s); got != ok || ok && k != want {
			t.Errorf("hexKey(%q) = %x, %v; want %x, %v", s, k, got, want, ok)
		}
	}
}

// A HashCookie key routes to its group whether the table compares its
// keys one by one (a few) or looks them up in a map (more), in either
// case; another key of the right form is no session's.
func TestHashCookieKeysRouteFewOrMany(t *testing.T) {
	for _, n := range []int{1, fewKeys, fewKeys + 1, 40} {
		var ds []*upstream.Destination
		for i := range n {
			ds = append(ds, dest(fmt.Sprintf("d%02d", i)))
		}
		ds = append(ds, dest("g1", "AffinityKey", "g"), dest("g2", "AffinityKey", "g"))
		c := cluster("c", ds...)
		p := mustNew(t, "c", enabled("HashCookie", "K"), c, nil)
		for _, d := range ds {
			v := issueValue(t, p, d)
			for _, v := range []string{v, strings.ToUpper(v)} {
				dec := p.Resolve(requestWith(p, v), c, t0, nil)
				if dec.Outcome != Routed || !slices.Contains(dec.Candidates, d) {
					t.Fatalf("%d keys: %s's key %q: %v %v", n, d.ID, v, dec.Outcome, ids(dec.Candidates))
				}
				if want := map[bool]int{true: 2, false: 1}[d.AffinityKey == "g"]; len(dec.Candidates) != want {
					t.Fatalf("%d keys: %s's key: candidates %v, want %d", n, d.ID, ids(dec.Candidates), want)
				}
			}
		}
		if dec := p.Resolve(requestWith(p, "0123456789abcdef"), c, t0, nil); dec.Outcome != FailedOpen {
			t.Fatalf("%d keys: an unknown key: %v", n, dec.Outcome)
		}
	}
}

// FuzzHexKey holds hexKey to strconv's reading of 16 hex digits.
func FuzzHexKey(f *testing.F) {
	for _, s := range []string{"0123456789abcdef", "FEDCBA9876543210", "0123456789abcdeg", "\x10123456789abcdef",
		"@`GgAaFf09:/ \xff\x80\x7f", "ffffffffffffffff", "0000000000000000", "0123456789ABCDEF0"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		want, err := strconv.ParseUint(s, 16, 64)
		ok := err == nil && len(s) == hashKeyLen
		k, got := hexKey(s)
		if got != ok || ok && k != want {
			t.Fatalf("hexKey(%q) = %x, %v; want %x, %v", s, k, got, want, ok)
		}
	})
}
