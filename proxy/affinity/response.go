package affinity

import (
	"net/http"
	"strings"
	"time"

	"github.com/tether-proxy/tether/proxy/config"
	"github.com/tether-proxy/tether/proxy/upstream"
)

func (p *Provider) affinitize(resp *http.Response, dest *upstream.Destination, d Decision, secure bool) {
	if resp == nil || dest == nil {
		return
	}
	if !p.SetsResponseFields(d) {
		return // nothing to add or read: a caller may leave resp.Header nil then
	}
	if resp.Header == nil {
		resp.Header = http.Header{}
	}
	if p.policy.envelope() {
		// Envelopes ignore Attach: whenever the backend sets its value, the
		// value is wrapped; when it does not, nothing is added.
		p.wrapResponse(resp.Header, dest)
		return
	}
	if !d.Attach {
		return
	}
	v, ok := p.keyFor(dest)
	if !ok {
		return
	}
	if p.policy == customHeader {
		resp.Header[p.name] = []string{v}
		return
	}
	resp.Header.Add("Set-Cookie", p.setCookie(v, secure, p.now()))
}

// keyFor is the wire value naming dest's group. A keyring failure (no active
// key yet) attaches nothing: the next request then starts a session again.
func (p *impl) keyFor(dest *upstream.Destination) (string, bool) {
	if !p.policy.sealed() {
		if w, ok := p.tab.wire[dest.AffinityKey]; ok {
			return w, true
		}
		return hashKey(p.policy, dest.AffinityKey), true
	}
	return p.sealKey(dest) // session.go
}

// activeKeyer is the optional part of a Keyring that names its active key,
// so sealed values can be reused until it changes (keyring.Ring has it).
type activeKeyer interface {
	ActiveKeyID(now time.Time) string
}

// sealedValue is a sealed key input and the key that sealed it.
type sealedValue struct {
	keyID, value string
}

// wrapResponse replaces every value of the backend's session cookie or
// header in h with "<sealed key input>.<value>"; all else stays as it is.
func (p *impl) wrapResponse(h http.Header, dest *upstream.Destination) {
	var sealed string
	seal := func() bool {
		if sealed == "" {
			v, ok := p.keyFor(dest)
			if !ok {
				return false
			}
			sealed = v
		}
		return true
	}
	if p.policy == envelopeHeader {
		vs := h[p.name]
		for i, v := range vs {
			if v = trimOWS(v); v == "" || !seal() {
				continue
			}
			vs[i] = sealed + "." + v
		}
		return
	}
	lines := h["Set-Cookie"]
	for i, line := range lines {
		vs, ve, ok := setCookieValueSpan(line, p.name)
		if !ok {
			continue
		}
		inner, quoted := unquote(line[vs:ve])
		if inner == "" || !seal() {
			// An empty value clears the backend's session: nothing to wrap.
			continue
		}
		w := sealed + "." + inner
		if quoted {
			w = `"` + w + `"`
		}
		lines[i] = line[:vs] + w + line[ve:]
	}
}

// setCookieValueSpan locates the value of a Set-Cookie line whose cookie is
// called name: line[vs:ve], without surrounding whitespace.
func setCookieValueSpan(line, name string) (vs, ve int, ok bool) {
	end := strings.IndexByte(line, ';')
	if end < 0 {
		end = len(line)
	}
	eq := strings.IndexByte(line[:end], '=')
	if eq < 0 || trimOWS(line[:eq]) != name {
		return 0, 0, false
	}
	vs, ve = trimSpan(line, eq+1, end)
	return vs, ve, true
}

// trimSpan narrows s[i:j] by the whitespace around it.
func trimSpan(s string, i, j int) (int, int) {
	for i < j && (s[i] == ' ' || s[i] == '\t') {
		i++
	}
	for j > i && (s[j-1] == ' ' || s[j-1] == '\t') {
		j--
	}
	return i, j
}

func (p *Provider) rewriteRequest(in, out *http.Request, dest *upstream.Destination, d Decision) {
	if !p.policy.envelope() || out == nil {
		return
	}
	key := "Cookie"
	if p.policy == envelopeHeader {
		key = p.name
	}
	vals := out.Header[key]
	var fresh []string // copied on first change: out may share in's slices
	for i, v := range vals {
		var nv string
		var act envelopeAction
		if p.policy == envelopeHeader {
			nv, act = p.envelopeOf(trimOWS(v), d)
		} else if line, changed := p.unwrapCookieLine(v, d); changed {
			nv, act = line, replaceValue
			if line == "" {
				act = dropValue // the line held only stale envelopes
			}
		}
		if act == keepValue {
			if fresh != nil {
				fresh = append(fresh, v)
			}
			continue
		}
		if fresh == nil {
			fresh = append(make([]string, 0, len(vals)), vals[:i]...)
		}
		if act == replaceValue {
			fresh = append(fresh, nv)
		}
	}
	if fresh == nil {
		return
	}
	if len(fresh) == 0 {
		delete(out.Header, key)
		return
	}
	out.Header[key] = fresh
}

// innerOf is the backend's own value for a value the client sent: the
// unwrapped value of a tether envelope, or ok=false when raw is not one
// (then it is forwarded verbatim).
func (p *impl) innerOf(raw string, d Decision) (string, bool) {
	if e := d.envelope; e.by == p && e.raw == raw {
		return e.inner, e.ok
	}
	_, inner, ok := p.unwrap(raw)
	return inner, ok
}

// unwrapCookieLine rewrites the values of every cookie called p.name in one
// Cookie header line that are tether envelopes, and leaves out those tether
// can no longer open (with their separator); all other bytes of the line
// stay as they are. It returns "" when nothing is left. A line without
// envelopes is not copied.
func (p *impl) unwrapCookieLine(line string, d Decision) (string, bool) {
	var b strings.Builder
	changed, dropped := false, false
	n := 0 // segments in b
	for i, start := 0, 0; ; i++ {
		end := strings.IndexByte(line[start:], ';')
		if end < 0 {
			end = len(line)
		} else {
			end += start
		}
		seg, act := line[start:end], keepValue
		if eq := strings.IndexByte(seg, '='); eq >= 0 && trimOWS(seg[:eq]) == p.name {
			vs, ve := trimSpan(seg, eq+1, len(seg))
			var inner string
			if inner, act = p.envelopeOf(seg[vs:ve], d); act == replaceValue {
				seg = seg[:vs] + inner + seg[ve:]
			}
		}
		if act != keepValue && !changed {
			changed, n = true, i
			if start > 0 {
				b.WriteString(line[:start-1]) // the segments before, as they were
			}
		}
		if changed {
			if act == dropValue {
				dropped = true
			} else {
				if n > 0 {
					b.WriteByte(';')
				}
				b.WriteString(seg)
				n++
			}
		}
		if end == len(line) {
			break
		}
		start = end + 1
	}
	if !changed {
		return line, false
	}
	out := b.String()
	if dropped {
		out = strings.TrimLeft(out, " \t") // the first pair may have gone
	}
	return out, true
}

// browserCookieRules returns c with what browsers require of an affinity
// cookie called name, so they never drop it: the "__Secure-" and "__Host-"
// prefixes need Secure, and "__Host-" also Path=/ and no Domain (RFC 6265bis
// §4.1.3, prefixes matched case-insensitively); SameSite=None needs Secure,
// so SecurePolicy None becomes SameAsRequest (Secure on HTTPS requests).
// config.Load warns about each change.
func browserCookieRules(name string, c config.SessionAffinityCookie) config.SessionAffinityCookie {
	hasPrefix := func(p string) bool { return len(name) >= len(p) && strings.EqualFold(name[:len(p)], p) }
	switch {
	case hasPrefix("__Host-"):
		c.SecurePolicy, c.Path, c.Domain = "Always", "/", ""
	case hasPrefix("__Secure-"):
		c.SecurePolicy = "Always"
	case strings.EqualFold(c.SameSite, "None") && strings.EqualFold(c.SecurePolicy, "None"):
		c.SecurePolicy = "SameAsRequest"
	}
	return c
}

// RefusalBody is the body of a Return503Error refusal (with
// FailureStatusCode): its own text, so neither a user nor an operator takes
// it for a cluster without healthy destinations. It names nothing internal.
const RefusalBody = "session unavailable: its destination cannot take the request\n"
