package proxy

import (
	"math/rand/v2"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
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

// setForwarded writes the forwarded headers on out from the client request
// in. It runs inside Rewrite, after ReverseProxy removed hop-by-hop headers
// (including any a client named in Connection) and the client's
// Forwarded, X-Forwarded-For, -Host and -Proto, so a client cannot make
// tether drop these. A route's X-Forwarded or Forwarded transform changes
// what is written (forwardTransforms.apply); without one, all values share
// one backing array: one allocation for the slices, none when direct (the
// direct path's outgoing header ends with the request: st.fwdVals).
func setForwarded(in *http.Request, h http.Header, st *reqState, direct bool) {
	dropSpoofable(h, st.trusted, st.route.underscore)
	if f := st.route.fwd; f != nil {
		f.apply(in, h, st)
		return
	}
	var vals []string
	if direct {
		vals = st.fwdVals[:]
	} else {
		vals = make([]string, forwardedHeaders)
	}
	set := func(i int, key, v string) {
		vals[i] = v
		h[key] = vals[i : i+1 : i+1]
	}
	clientIP := st.clientHost
	xff := clientIP
	host := in.Host
	var port string
	if st.trusted {
		if prior := in.Header[hdrXFF]; len(prior) > 0 {
			xff = joinValues(prior, clientIP)
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
	setOriginal(in, h, st, vals[4:4:forwardedHeaders])
}

// setOriginal writes X-Original-Host, X-Original-URL and the trace id, which
// no transform changes. vals, when it has room, backs the values.
func setOriginal(in *http.Request, h http.Header, st *reqState, vals []string) {
	uri := in.RequestURI
	if !strings.HasPrefix(uri, "/") {
		// Absolute-form ("GET http://h/x") or a request built in-process:
		// record origin form.
		uri = in.URL.RequestURI()
	}
	vals = append(vals, in.Host, uri, st.traceID)
	h[hdrOriginalHost] = vals[0:1:1]
	h[hdrOriginalURL] = vals[1:2:2]
	h[hdrTraceID] = vals[2:3:3]
}

// joinValues joins a header's values and one more into one
// comma-separated value.
func joinValues(prior []string, v string) string {
	switch len(prior) {
	case 0:
		return v
	case 1:
		return prior[0] + ", " + v
	}
	return strings.Join(prior, ", ") + ", " + v
}

// spoofable are client headers that backends (and frameworks such as
// ASP.NET's ForwardedHeaders, Rails, Spring, Express's trust proxy,
// Akamai's and Cloudflare's conventions) read as forwarding information,
// and which tether does not set itself from what it saw: from an untrusted
// peer they are removed, never passed on. X-Forwarded-Port is set by tether
// but listed too, for routes whose transforms do not set it.
var spoofable = [...]string{
	"X-Forwarded-Prefix", // ASP.NET turns it into PathBase
	"X-Forwarded-Port",
	"X-Real-Ip",
	"X-Client-Ip",
	"True-Client-Ip",
	"X-Forwarded-Server",
	"X-Forwarded-Ssl",
	"Front-End-Https",
	"X-Forwarded-Scheme",
	"X-Original-For",
	// What PHP-style client-IP lookups read besides X-Forwarded-For
	// (HTTP_CLIENT_IP, HTTP_X_FORWARDED, HTTP_X_CLUSTER_CLIENT_IP,
	// HTTP_FORWARDED_FOR).
	"Client-Ip",
	"X-Forwarded",
	"X-Cluster-Client-Ip",
	"Forwarded-For",
}

var spoofableSet = func() map[string]bool {
	m := make(map[string]bool, len(spoofable))
	for _, k := range spoofable {
		m[k] = true
	}
	return m
}()

// underscoreFolded are the fields whose underscore spellings tether drops
// from every request (docs/CONFIGURATION.md, "Forwarded headers and client
// input"): a backend that reads '_' as '-' (CGI, WSGI, PHP's
// HTTP_* variables) would take Transfer_Encoding for Transfer-Encoding
// and frame the body otherwise than tether did, or X_Forwarded_For for
// the forwarding header tether sets. Keyed by the name once '_' is read as
// '-', canonical.
var underscoreFolded = func() map[string]bool {
	m := map[string]bool{}
	for _, k := range []string{
		// Framing and hop-by-hop fields (those without a '-' cannot be
		// spelled with '_', listed for completeness).
		"Transfer-Encoding", "Content-Length", "Connection", "Keep-Alive", "Proxy-Connection",
		"Te", "Trailer", "Upgrade", "Host", "Http2-Settings", "Proxy-Authorization", "Proxy-Authenticate",
		// The forwarding fields tether sets.
		hdrXFF, hdrXFProto, hdrXFHost, hdrXFPort, hdrOriginalHost, hdrOriginalURL, hdrTraceID, "Forwarded",
	} {
		m[k] = true
	}
	for _, k := range spoofable {
		m[k] = true
	}
	return m
}()

// underscoreDrops counts the fields dropped for their underscore spelling,
// by the name they fold into; nil counts nothing.
type underscoreDrops map[string]prometheus.Counter

func (d underscoreDrops) add(name string, n int) {
	if c := d[name]; c != nil {
		c.Add(float64(n))
	}
}

// dropSpoofable removes the spoofable headers unless a trusted proxy sent
// them; and, from anyone, the underscore spellings of framing, hop-by-hop
// and forwarding fields (underscoreFolded), counted in drops.
func dropSpoofable(h http.Header, trusted bool, drops underscoreDrops) {
	byName := !trusted && len(h) > 2*len(spoofable)
	if byName {
		for _, k := range spoofable {
			delete(h, k)
		}
	}
	// A request's few fields are walked once, where deleting every
	// spoofable name hashes fourteen (deleting during range is allowed).
	for k := range h {
		if !trusted && !byName && spoofableSet[k] {
			delete(h, k)
			continue
		}
		if strings.IndexByte(k, '_') < 0 {
			continue
		}
		if ck := http.CanonicalHeaderKey(strings.ReplaceAll(k, "_", "-")); underscoreFolded[ck] {
			drops.add(ck, len(h[k]))
			delete(h, k)
		}
	}
}

// clientPort is the port the client connected to: the listener's local
// port, else the scheme's default. Never the port in the Host header or an
// absolute-form target: the client chooses those freely ("Host: x:99999").
// lastPort is the last port portString formatted: a node's listeners are
// few, so the request's local port is most often the one before.
var lastPort atomic.Pointer[portText]

type portText struct {
	port int
	s    string
}

// portString is strconv.Itoa(port) without an allocation per request.
func portString(port int) string {
	if p := lastPort.Load(); p != nil && p.port == port {
		return p.s
	}
	p := &portText{port: port, s: strconv.Itoa(port)}
	lastPort.Store(p)
	return p.s
}

func clientPort(r *http.Request, proto string) string {
	if a, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr); ok {
		if ta, ok := a.(*net.TCPAddr); ok {
			return portString(ta.Port)
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
