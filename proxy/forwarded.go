package proxy

import (
	"math/rand/v2"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
)

// Canonical header keys, assigned into header maps directly so the hot path
// does not canonicalise.
const (
	hdrXFF           = "X-Forwarded-For"
	hdrXFProto       = "X-Forwarded-Proto"
	hdrXFHost        = "X-Forwarded-Host"
	hdrXFPort        = "X-Forwarded-Port"
	hdrOriginalHost  = "X-Original-Host"
	hdrOriginalURL   = "X-Original-Url" // canonical form of X-Original-URL
	hdrTraceID       = "X-Tether-Trace-Id"
	traceIDLen       = 32
	forwardedHeaders = 7
)

// trustSet is the compiled TrustedProxies list.
type trustSet struct {
	prefixes []netip.Prefix
}

// parseTrusted compiles addresses and CIDRs; bad entries are returned by
// index so the caller can name them.
func parseTrusted(list []string) (trustSet, map[int]string) {
	var ts trustSet
	var bad map[int]string
	for i, s := range list {
		s = strings.TrimSpace(s)
		if p, err := netip.ParsePrefix(s); err == nil {
			ts.prefixes = append(ts.prefixes, p.Masked())
			continue
		}
		if a, err := netip.ParseAddr(s); err == nil {
			a = a.Unmap()
			ts.prefixes = append(ts.prefixes, netip.PrefixFrom(a, a.BitLen()))
			continue
		}
		if bad == nil {
			bad = map[int]string{}
		}
		bad[i] = s
	}
	return ts, bad
}

// contains reports whether the peer ip is trusted.
func (ts *trustSet) contains(ip netip.Addr) bool {
	if !ip.IsValid() {
		return false
	}
	ip = ip.Unmap()
	for _, p := range ts.prefixes {
		if p.Contains(ip) {
			return true
		}
	}
	return false
}

// trusts reports whether the peer host (an IP literal) is trusted; with no
// TrustedProxies it does not parse anything.
func (ts *trustSet) trusts(host string) bool {
	if len(ts.prefixes) == 0 {
		return false
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ts.contains(ip)
}

// hostOf is the host part of r.RemoteAddr.
func hostOf(remoteAddr string) string {
	host, _, err := net.SplitHostPort(remoteAddr)
	if err != nil {
		return remoteAddr
	}
	return host
}

// newTraceID returns 32 lowercase hex characters. Trace ids need to be
// unique, not secret, so math/rand/v2's per-thread ChaCha8 source will do.
func newTraceID() string {
	const hex = "0123456789abcdef"
	var b [traceIDLen]byte
	a, c := rand.Uint64(), rand.Uint64()
	for i := 0; i < 16; i++ {
		b[i] = hex[(a>>(60-4*i))&0xf]
		b[16+i] = hex[(c>>(60-4*i))&0xf]
	}
	return string(b[:])
}

// validTraceID accepts exactly 32 lowercase hex characters.
func validTraceID(s string) bool {
	if len(s) != traceIDLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// firstHeader returns the first value of h[key] without canonicalising.
func firstHeader(h http.Header, key string) string {
	if v := h[key]; len(v) > 0 {
		return v[0]
	}
	return ""
}

// clientProto is the scheme the client used: the incoming X-Forwarded-Proto
// from a trusted peer, else what this listener saw.
func clientProto(r *http.Request, trusted bool) string {
	if trusted {
		// A chain of proxies may send "https, http": the first is the
		// client's own scheme.
		v, _, _ := strings.Cut(firstHeader(r.Header, hdrXFProto), ",")
		switch v = strings.TrimSpace(v); {
		case strings.EqualFold(v, "https"):
			return "https"
		case strings.EqualFold(v, "http"):
			return "http"
		}
	}
	if r.TLS != nil {
		return "https"
	}
	return "http"
}

// requestTrace is the trace id for r: a trusted peer's valid one, else new.
func requestTrace(r *http.Request, trusted bool) string {
	if trusted {
		if v := firstHeader(r.Header, hdrTraceID); validTraceID(v) {
			return v
		}
	}
	return newTraceID()
}

// setForwarded writes the forwarded headers on out from the client request
// in. It runs inside Rewrite, after ReverseProxy removed hop-by-hop headers
// (including any a client named in Connection), so a client cannot make
// tether drop these. All values share one backing array: one allocation for
// the slices.
func setForwarded(in *http.Request, h http.Header, st *reqState) {
	dropSpoofable(h, st.trusted)
	vals := make([]string, forwardedHeaders)
	set := func(i int, key, v string) {
		vals[i] = v
		h[key] = vals[i : i+1 : i+1]
	}
	clientIP := st.clientHost
	xff := clientIP
	host := in.Host
	var port string
	if st.trusted {
		switch prior := in.Header[hdrXFF]; len(prior) {
		case 0:
		case 1:
			xff = prior[0] + ", " + clientIP
		default:
			xff = strings.Join(prior, ", ") + ", " + clientIP
		}
		if v := firstHeader(in.Header, hdrXFHost); v != "" {
			host = v
		}
		port = firstHeader(in.Header, hdrXFPort)
	}
	if port == "" {
		port = clientPort(in, st.proto)
	}
	set(0, hdrXFF, xff)
	set(1, hdrXFProto, st.proto)
	set(2, hdrXFHost, host)
	set(3, hdrXFPort, port)
	set(4, hdrOriginalHost, in.Host)
	uri := in.RequestURI
	if !strings.HasPrefix(uri, "/") {
		// Absolute-form ("GET http://h/x") or a request built in-process:
		// record origin form.
		uri = in.URL.RequestURI()
	}
	set(5, hdrOriginalURL, uri)
	set(6, hdrTraceID, st.traceID)
}

// dropSpoofable removes client headers that backends read as forwarding
// information tether does not set: X-Forwarded-Prefix (ASP.NET's
// ForwardedHeaders turns it into PathBase) and X-Real-IP, unless a trusted
// proxy sent them; and, from anyone, forwarding headers spelled with
// underscores (X_Forwarded_For), which CGI-style backends fold into the real
// thing.
func dropSpoofable(h http.Header, trusted bool) {
	if !trusted {
		delete(h, "X-Forwarded-Prefix")
		delete(h, "X-Real-Ip")
	}
	for k := range h {
		if strings.IndexByte(k, '_') < 0 {
			continue
		}
		switch http.CanonicalHeaderKey(strings.ReplaceAll(k, "_", "-")) {
		case hdrXFF, hdrXFProto, hdrXFHost, hdrXFPort, hdrOriginalHost, hdrOriginalURL, hdrTraceID,
			"X-Forwarded-Prefix", "X-Real-Ip":
			delete(h, k)
		}
	}
}

// clientPort is the port the client connected to: the Host header's port,
// else the listener's local port, else the scheme's default.
func clientPort(r *http.Request, proto string) string {
	if i := strings.LastIndexByte(r.Host, ':'); i >= 0 && !strings.Contains(r.Host[i:], "]") {
		if p := r.Host[i+1:]; p != "" {
			return p
		}
	}
	if a, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr); ok {
		if ta, ok := a.(*net.TCPAddr); ok {
			return strconv.Itoa(ta.Port)
		}
		if _, p, err := net.SplitHostPort(a.String()); err == nil {
			return p
		}
	}
	if proto == "https" {
		return "443"
	}
	return "80"
}
