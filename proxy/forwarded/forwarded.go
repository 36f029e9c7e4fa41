package forwarded

import (
	"math/rand/v2"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/tether-proxy/tether/proxy/internal/h1wire"
)

// Canonical header keys, assigned into header maps directly so the hot path
// does not canonicalise.
const (
	XFF          = "X-Forwarded-For"
	XFProto      = "X-Forwarded-Proto"
	XFHost       = "X-Forwarded-Host"
	XFPort       = "X-Forwarded-Port"
	OriginalHost = "X-Original-Host"
	OriginalURL  = "X-Original-Url" // canonical form of X-Original-URL
	TraceHeader  = "X-Tether-Trace-Id"
	TraceIDLen   = 32
	// Headers is how many headers Set writes without transforms.
	Headers = 7
)

// Trust is the compiled TrustedProxies list.
type Trust struct {
	prefixes []netip.Prefix
}

// ParseTrusted compiles addresses and CIDRs; bad entries are returned by
// index so the caller can name them.
func ParseTrusted(list []string) (Trust, map[int]string) {
	var ts Trust
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
func (ts *Trust) contains(ip netip.Addr) bool {
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
func (ts *Trust) Trusts(host string) bool {
	if len(ts.prefixes) == 0 {
		return false
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ts.contains(ip)
}

// HostOf is the host part of r.RemoteAddr: net.SplitHostPort's host,
// or remoteAddr itself when that fails. It runs once per request, so the
// common forms take one scan for the bytes that decide, ':', '[' and
// ']' (0x3a, 0x5b, 0x5d: digits and dots are below, lower case letters
// above): none is SplitHostPort's missing port, one colon alone splits
// host and port. Anything else (a bracketed address, an upper case
// letter) is SplitHostPort's to judge.
func HostOf(remoteAddr string) string {
	s := remoteAddr
	i := 0
	for i < len(s) && s[i]-':' > ']'-':' {
		i++
	}
	if i == len(s) {
		return s
	}
	if s[i] == ':' {
		j := i + 1
		for j < len(s) && s[j]-':' > ']'-':' {
			j++
		}
		if j == len(s) {
			return s[:i]
		}
	}
	host, _, err := net.SplitHostPort(s)
	if err != nil {
		return s
	}
	return host
}

// NewTraceID returns 32 lowercase hex characters. Trace ids need to be
// unique, not secret, so math/rand/v2's per-thread ChaCha8 source will do.
func NewTraceID() string {
	const hex = "0123456789abcdef"
	var b [TraceIDLen]byte
	a, c := rand.Uint64(), rand.Uint64()
	for i := 0; i < 16; i++ {
		b[i] = hex[(a>>(60-4*i))&0xf]
		b[16+i] = hex[(c>>(60-4*i))&0xf]
	}
	return string(b[:])
}

// ValidTraceID accepts exactly 32 lowercase hex characters.
func ValidTraceID(s string) bool {
	if len(s) != TraceIDLen {
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

// ClientProto is the scheme the client used: the incoming X-Forwarded-Proto
// from a trusted peer, else what this listener saw.
func ClientProto(r *http.Request, trusted bool) string {
	if trusted {
		// A chain of proxies may send "https, http": the first is the
		// client's own scheme.
		v, _, _ := strings.Cut(firstHeader(r.Header, XFProto), ",")
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

// Set writes the forwarded headers on h, the outgoing header, from the
// client request in. It runs inside Rewrite, after ReverseProxy removed
// hop-by-hop headers (including any a client named in Connection) and the
// client's Forwarded, X-Forwarded-For, -Host and -Proto, so a client
// cannot make tether drop these. The route's X-Forwarded or Forwarded
// transforms f change what is written; without them (f nil), all values
// share one backing array: vals when given (the direct path's outgoing
// header ends with the request, and its values with it), else one
// allocation. drops counts the underscore spellings dropped. clean says
// h holds no spoofable field from an untrusted client and no name with an
// '_' (the caller copied the client's fields without them), so the walk
// that drops them is skipped.
func Set(in *http.Request, h http.Header, c *Client, f *Transforms, drops Drops, vals *[Headers]string, clean bool) {
	if !clean {
		dropSpoofable(h, c.Trusted, drops)
	}
	if f != nil {
		f.apply(in, h, c)
		return
	}
	if vals == nil {
		vals = new([Headers]string)
	}
	values(in, c, vals)
	for i, k := range Keys {
		h[k] = vals[i : i+1 : i+1]
	}
}

// SetAside is Set without transforms for a caller that writes the
// fields itself (h1wire.AppendRequestHead's own fields): it drops from h
// what Set drops, and puts in vals what Set would give each of Keys, in
// their order, without assigning them to h. h must hold none of Keys.
func SetAside(in *http.Request, h http.Header, c *Client, drops Drops, vals *[Headers]string, clean bool) {
	if !clean {
		dropSpoofable(h, c.Trusted, drops)
	}
	values(in, c, vals)
}

// Keys are the names of the fields Set writes without transforms, in the
// order of their values in SetAside's vals.
var Keys = [Headers]string{keyXFF, keyXFProto, keyXFHost, keyXFPort, keyOriginalHost, keyOriginalURL, TraceKey}

// values are the values of Keys' fields, as Set writes them without
// transforms.
func values(in *http.Request, c *Client, vs *[Headers]string) {
	clientIP := c.Host
	xff := clientIP
	host := in.Host
	var port string
	if c.Trusted {
		if prior := in.Header[XFF]; len(prior) > 0 {
			xff = joinValues(prior, clientIP)
		}
		if v := firstHeader(in.Header, XFHost); v != "" {
			host = v
		}
		port = firstHeader(in.Header, XFPort)
	}
	if port == "" {
		port = clientPort(in, c.Proto)
	}
	vs[0], vs[1], vs[2], vs[3] = xff, c.Proto, host, port
	vs[4], vs[5], vs[6] = in.Host, originalURI(in), c.TraceID
}

// setOriginal writes X-Original-Host, X-Original-URL and the trace id, which
// no transform changes. vals, when it has room, backs the values.
func setOriginal(in *http.Request, h http.Header, c *Client, vals []string) {
	vals = append(vals, in.Host, originalURI(in), c.TraceID)
	h[keyOriginalHost] = vals[0:1:1]
	h[keyOriginalURL] = vals[1:2:2]
	h[TraceKey] = vals[2:3:3]
}

// originalURI is X-Original-URL's value: the request's target in origin
// form.
func originalURI(in *http.Request) string {
	uri := in.RequestURI
	if !strings.HasPrefix(uri, "/") {
		// Absolute-form ("GET http://h/x") or a request built in-process:
		// record origin form.
		uri = in.URL.RequestURI()
	}
	return uri
}

// The names Set and setOriginal write as map keys: h1wire's table slices
// of them, which the lean head writer takes as valid names without a look
// at their bytes. TraceKey is TraceHeader's, for the response's field too.
var (
	keyXFF          = h1wire.TableName(XFF)
	keyXFProto      = h1wire.TableName(XFProto)
	keyXFHost       = h1wire.TableName(XFHost)
	keyXFPort       = h1wire.TableName(XFPort)
	keyOriginalHost = h1wire.TableName(OriginalHost)
	keyOriginalURL  = h1wire.TableName(OriginalURL)
	TraceKey        = h1wire.TableName(TraceHeader)
)

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

// Spoofable reports whether k is one of the spoofable fields, which Set
// drops from an untrusted client: a string switch (lengths, then a few
// compares) where a set would hash every field.
func Spoofable(k string) bool {
	switch k {
	case "X-Forwarded-Prefix", "X-Forwarded-Port", "X-Real-Ip", "X-Client-Ip", "True-Client-Ip",
		"X-Forwarded-Server", "X-Forwarded-Ssl", "Front-End-Https", "X-Forwarded-Scheme", "X-Original-For",
		"Client-Ip", "X-Forwarded", "X-Cluster-Client-Ip", "Forwarded-For":
		return true
	}
	return false
}

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
		XFF, XFProto, XFHost, XFPort, OriginalHost, OriginalURL, TraceHeader, "Forwarded",
	} {
		m[k] = true
	}
	for _, k := range spoofable {
		m[k] = true
	}
	return m
}()

// Drops counts the fields dropped for their underscore spelling,
// by the name they fold into; nil counts nothing.
type Drops map[string]prometheus.Counter

// NewDrops counts each field an underscore spelling folds into in the
// counter of its name.
func NewDrops(counter func(name string) prometheus.Counter) Drops {
	d := make(Drops, len(underscoreFolded))
	for k := range underscoreFolded {
		d[k] = counter(k)
	}
	return d
}

func (d Drops) add(name string, n int) {
	if c := d[name]; c != nil {
		c.Add(float64(n))
	}
}

// dropSpoofable removes the spoofable headers unless a trusted proxy sent
// them; and, from anyone, the underscore spellings of framing, hop-by-hop
// and forwarding fields (underscoreFolded), counted in drops.
func dropSpoofable(h http.Header, trusted bool, drops Drops) {
	byName := !trusted && len(h) > 2*len(spoofable)
	if byName {
		for _, k := range spoofable {
			delete(h, k)
		}
	}
	// A request's few fields are walked once, where deleting every
	// spoofable name hashes fourteen (deleting during range is allowed).
	for k := range h {
		if !trusted && !byName && Spoofable(k) {
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
