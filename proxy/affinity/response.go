package affinity

import (
	"net/http"
	"strings"
	"time"

	"github.com/tether-proxy/tether/proxy/upstream"
)

func (p *Provider) affinitize(resp *http.Response, dest *upstream.Destination, d Decision, secure bool) {
	if resp == nil || dest == nil {
		return
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
	ak, ok := p.keyring.(activeKeyer)
	if !ok {
		v, err := p.keyring.Seal(p.purpose, []byte(dest.AffinityKey))
		return v, err == nil
	}
	// One sealed value per destination group and active key: every value
	// sealed is a fresh random nonce, and AES-GCM's budget per key is 2^32.
	id := ak.ActiveKeyID(p.now())
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
		var changed bool
		if p.policy == envelopeHeader {
			nv, changed = p.innerOf(trimOWS(v), d)
		} else {
			nv, changed = p.unwrapCookieLine(v, d)
		}
		if !changed {
			continue
		}
		if fresh == nil {
			fresh = append([]string(nil), vals...)
		}
		fresh[i] = nv
	}
	if fresh != nil {
		out.Header[key] = fresh
	}
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
// Cookie header line that are tether envelopes; all other bytes of the line
// stay as they are.
func (p *impl) unwrapCookieLine(line string, d Decision) (string, bool) {
	var b strings.Builder
	last, changed := 0, false // bytes of line before last are already in b
	for start := 0; start <= len(line); {
		end := strings.IndexByte(line[start:], ';')
		if end < 0 {
			end = len(line)
		} else {
			end += start
		}
		seg := line[start:end]
		if eq := strings.IndexByte(seg, '='); eq >= 0 && trimOWS(seg[:eq]) == p.name {
			vs, ve := trimSpan(line, start+eq+1, end)
			if inner, ok := p.innerOf(line[vs:ve], d); ok {
				b.WriteString(line[last:vs])
				b.WriteString(inner)
				last, changed = ve, true
			}
		}
		start = end + 1
	}
	if !changed {
		return line, false
	}
	b.WriteString(line[last:])
	return b.String(), true
}
