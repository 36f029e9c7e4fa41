package config

import (
	"crypto/tls"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Kestrel is ASP.NET Kestrel's configuration section, as YARP gateways
// declare their listeners in it. Endpoints become Listeners (named
// "Kestrel.Endpoints.<name>" in errors) and Limits fill Limits.
type Kestrel struct {
	Endpoints map[string]*KestrelEndpoint
	// EndpointDefaults apply to every endpoint that sets none of its own.
	EndpointDefaults KestrelEndpointDefaults
	// Certificates: "Default" serves https endpoints and https Urls that
	// name no certificate of their own.
	Certificates map[string]*Certificate
	Limits       KestrelLimits

	AddServerHeader                Unsupported
	AllowSynchronousIO             Unsupported
	AllowResponseHeaderCompression Unsupported
	DisableStringReuse             Unsupported
	AllowAlternateSchemes          Unsupported
	AllowHostHeaderOverride        Unsupported
}

// KestrelEndpoint is one Kestrel.Endpoints entry.
type KestrelEndpoint struct {
	// Url is "http://host:port" or "https://host:port" ("*", "+" and host
	// names other than localhost bind every interface). Required.
	Url string
	KestrelEndpointDefaults
	// Certificate for an https Url; default Kestrel.Certificates.Default.
	Certificate *Certificate
	// AllowZeroRtt: ListenerOptions.AllowZeroRtt (tether's, not Kestrel's).
	AllowZeroRtt bool
	// Sni picks settings by the TLS server name, as Kestrel does: an exact
	// host name, else the longest "*.suffix" pattern, else "*"; a handshake
	// that matches none is refused. Each entry may set its own Certificate
	// (default: the endpoint's), Protocols, SslProtocols and
	// ClientCertificateMode (default: the endpoint's).
	Sni map[string]*KestrelSni
}

// KestrelSni is one Kestrel.Endpoints.{name}.Sni entry.
type KestrelSni struct {
	KestrelEndpointDefaults
	Certificate *Certificate
}

// SniRule is a listener's compiled Sni entry: the endpoint's settings with
// the entry's own laid over them.
type SniRule struct {
	// Pattern is a host name (lower case), "*.suffix" or "*".
	Pattern string
	KestrelEndpointDefaults
	Certificate *Certificate // nil: the listener's certificate (or self-signed one)
}

// KestrelEndpointDefaults are the per-endpoint settings Kestrel also has as
// defaults.
type KestrelEndpointDefaults struct {
	// Protocols: Http1, Http2, Http1AndHttp2 (default), Http3,
	// Http1AndHttp2AndHttp3, as Kestrel names them, or a list of flags
	// ("Http1, Http3"). Cleartext Http2 is h2c with prior knowledge;
	// cleartext Http1AndHttp2 is HTTP/1.1. HTTP/3 is served on a UDP socket
	// of the same port and needs TLS 1.3; Http3 alone opens no TCP socket.
	Protocols string
	// SslProtocols bound the TLS versions offered ("Tls12", "Tls13").
	SslProtocols TLSVersions
	// ClientCertificateMode: NoCertificate (default) or AllowCertificate
	// (requested, not verified, for the ClientCert transform).
	// RequireCertificate and DelayCertificate are refused.
	ClientCertificateMode string
}

// KestrelLimits are Kestrel's server limits tether implements; the others
// load with a warning.
type KestrelLimits struct {
	MaxRequestHeadersTotalSize int
	MaxRequestBodySize         int64
	KeepAliveTimeout           Duration
	RequestHeadersTimeout      Duration
	MaxConcurrentConnections   int
	MinRequestBodyDataRate     MinDataRate
	MinResponseDataRate        MinDataRate

	MaxConcurrentUpgradedConnections Unsupported
	MaxRequestBufferSize             Unsupported
	MaxResponseBufferSize            Unsupported
	MaxRequestLineSize               Unsupported
	MaxRequestHeaderCount            Unsupported
	Http2                            Unsupported
	Http3                            Unsupported
}

// ListenerOptions are a listener's Kestrel endpoint settings; Listeners
// entries may set them too.
type ListenerOptions struct {
	KestrelEndpointDefaults
	// SelfSigned is set by Load for an https URL that no certificate
	// covers: the listener serves a certificate for localhost generated at
	// start, in the role of ASP.NET's development certificate.
	SelfSigned bool
	// AllowZeroRtt accepts TLS 1.3 early data (0-RTT) on the listener's
	// HTTP/3 socket; only GET, HEAD and OPTIONS are served from it, other
	// methods are answered 425 Too Early. Off by default: early data can be
	// replayed.
	AllowZeroRtt bool
	// Source names where the listener came from in errors
	// ("Kestrel.Endpoints.https", "Urls"); empty for Listeners entries.
	Source string
	// Sni are the endpoint's per-server-name settings, sorted by pattern.
	Sni []SniRule
}

// SameListener reports whether o and p bind the same way: everything but
// certificate files, which a reload swaps in place.
func (o ListenerOptions) SameListener(p ListenerOptions) bool {
	if o.KestrelEndpointDefaults != p.KestrelEndpointDefaults || o.SelfSigned != p.SelfSigned || o.AllowZeroRtt != p.AllowZeroRtt || o.Source != p.Source || len(o.Sni) != len(p.Sni) {
		return false
	}
	for i := range o.Sni {
		a, b := o.Sni[i], p.Sni[i]
		if a.Pattern != b.Pattern || a.KestrelEndpointDefaults != b.KestrelEndpointDefaults || (a.Certificate == nil) != (b.Certificate == nil) {
			return false
		}
	}
	return true
}

// Canonical Protocols values tether serves: Kestrel's names, and for the
// combinations Kestrel has no name for, the flags joined by "And".
const (
	ProtocolsHttp1                 = "Http1"
	ProtocolsHttp2                 = "Http2"
	ProtocolsHttp1AndHttp2         = "Http1AndHttp2"
	ProtocolsHttp3                 = "Http3"
	ProtocolsHttp1AndHttp3         = "Http1AndHttp3"
	ProtocolsHttp2AndHttp3         = "Http2AndHttp3"
	ProtocolsHttp1AndHttp2AndHttp3 = "Http1AndHttp2AndHttp3"
)

// ProtocolsHTTP3 reports whether canonical Protocols p include HTTP/3.
func ProtocolsHTTP3(p string) bool {
	return strings.HasSuffix(p, "Http3")
}

// ProtocolsTCP is what canonical Protocols p serve over TCP: p without
// HTTP/3; "" for Http3 alone.
func ProtocolsTCP(p string) string {
	switch p {
	case ProtocolsHttp3:
		return ""
	case ProtocolsHttp1AndHttp3:
		return ProtocolsHttp1
	case ProtocolsHttp2AndHttp3:
		return ProtocolsHttp2
	case ProtocolsHttp1AndHttp2AndHttp3:
		return ProtocolsHttp1AndHttp2
	}
	return p
}

var clientCertModes = []string{"NoCertificate", "AllowCertificate"}

// buildListeners completes c.Listeners with ASP.NET's precedence: the
// Listeners entries and Kestrel.Endpoints are bound together (as Kestrel
// binds endpoints from code and from configuration); only when there are
// none, Urls from the file, else ASPNETCORE_URLS from the environment
// (appsettings.json's Urls wins over the variable in ASP.NET, too); else
// one HTTP listener on ":8080".
func (v *validator) buildListeners(c *Config, opts LoadOptions) {
	k := &c.Kestrel
	v.kestrelLimits(c)
	def := k.Certificates["Default"]
	for _, id := range sortedKeys(k.Certificates) {
		if !strings.EqualFold(id, "Default") {
			v.warns = append(v.warns, "Kestrel.Certificates."+id+": only Default is used (by https endpoints without a certificate)")
		} else if def == nil {
			def = k.Certificates[id]
		}
	}
	if def != nil {
		v.certificate("Kestrel.Certificates.Default", def, opts.baseDir)
	}
	v.endpointOptions("Kestrel.EndpointDefaults", &k.EndpointDefaults)
	if len(opts.Listen) > 0 {
		// --listen replaces the file's listeners (several nodes on one
		// host share a file but not a port).
		c.Listeners, k.Endpoints = nil, nil
	}
	for i := range c.Listeners {
		l := &c.Listeners[i]
		v.endpointOptions(fmt.Sprintf("Listeners[%d]", i), &l.KestrelEndpointDefaults)
		v.http3Listener(fmt.Sprintf("Listeners[%d]", i), l, l.Certificate != nil || l.Acme != nil, true)
	}

	explicit := len(c.Listeners) > 0
	for _, name := range sortedKeys(k.Endpoints) {
		if l, ok := v.kestrelEndpoint("Kestrel.Endpoints."+name, k.Endpoints[name], k.EndpointDefaults, def, opts.baseDir); ok {
			c.Listeners = append(c.Listeners, l)
		}
		explicit = true
	}

	urls, src := strings.TrimSpace(c.Urls), "Urls"
	if len(opts.Listen) > 0 {
		urls, src = listenURLs(opts.Listen), "--listen"
	}
	if urls == "" {
		lookup := opts.LookupEnv
		if lookup == nil {
			lookup = os.LookupEnv
		}
		if env, ok := lookup("ASPNETCORE_URLS"); ok {
			urls, src = strings.TrimSpace(env), "ASPNETCORE_URLS"
		}
	}
	switch {
	case explicit:
		if urls != "" {
			v.warns = append(v.warns, src+": ignored because Listeners or Kestrel.Endpoints are set (as Kestrel overrides Urls with its endpoints)")
		}
	case urls == "":
		c.Listeners = []Listener{{Address: ":8080"}}
	default:
		for u := range strings.SplitSeq(urls, ";") {
			if u = strings.TrimSpace(u); u == "" {
				continue
			}
			l, https, err := urlListener(u, k.EndpointDefaults)
			if err != nil {
				v.errorf(src, "%q: %v", u, err)
				continue
			}
			l.Source = src
			if https {
				v.httpsDefault(src+" "+u, &l, def)
			}
			v.http3Listener(src+" "+u, &l, https, false)
			c.Listeners = append(c.Listeners, l)
		}
	}
	seen := map[string]string{}
	for i, l := range c.Listeners {
		at := l.Source
		if at == "" {
			at = fmt.Sprintf("Listeners[%d]", i)
		}
		if first, dup := seen[l.Address]; dup && l.Address != "" && !strings.HasSuffix(l.Address, ":0") {
			v.errorf(at, "address %s is also bound by %s", l.Address, first)
		}
		seen[l.Address] = at
	}
}

// listenURLs turns --listen values (host:port, :port, or a URL as in Urls)
// into a Urls list.
func listenURLs(addrs []string) string {
	urls := make([]string, 0, len(addrs))
	for _, a := range addrs {
		switch a = strings.TrimSpace(a); {
		case a == "":
			continue
		case strings.Contains(a, "://"):
		case strings.HasPrefix(a, ":"):
			a = "http://*" + a
		default:
			a = "http://" + a
		}
		urls = append(urls, a)
	}
	return strings.Join(urls, ";")
}

// kestrelEndpoint turns one Kestrel.Endpoints entry into a listener.
func (v *validator) kestrelEndpoint(path string, e *KestrelEndpoint, defaults KestrelEndpointDefaults, def *Certificate, baseDir string) (Listener, bool) {
	if e.Url == "" {
		v.errorf(path+".Url", "required")
		return Listener{}, false
	}
	opts := e.KestrelEndpointDefaults
	v.endpointOptions(path, &opts)
	l, https, err := urlListener(e.Url, defaults)
	if err != nil {
		v.errorf(path+".Url", "%q: %v", e.Url, err)
		return Listener{}, false
	}
	l.Source = path
	mergeEndpointOptions(&l.KestrelEndpointDefaults, opts)
	switch {
	case !https && e.Certificate != nil:
		v.warns = append(v.warns, path+".Certificate: ignored: the Url is http")
	case https && e.Certificate != nil:
		v.certificate(path+".Certificate", e.Certificate, baseDir)
		l.Certificate = e.Certificate
	case https:
		v.httpsDefault(path, &l, def)
	}
	l.AllowZeroRtt = e.AllowZeroRtt
	v.http3Listener(path, &l, https, opts.Protocols != "")
	if len(e.Sni) > 0 && !https {
		v.errorf(path+".Sni", "needs an https Url")
	}
	for _, pat := range sortedKeys(e.Sni) {
		sn, sp := e.Sni[pat], path+".Sni."+pat
		if sn == nil {
			sn = &KestrelSni{}
		}
		p := strings.ToLower(strings.TrimSpace(pat))
		if p == "" || (strings.Contains(p, "*") && p != "*" && (!strings.HasPrefix(p, "*.") || strings.Count(p, "*") > 1)) {
			v.errorf(sp, "want a host name, *.suffix or *")
			continue
		}
		own := sn.KestrelEndpointDefaults
		v.endpointOptions(sp, &own)
		rule := SniRule{Pattern: p, KestrelEndpointDefaults: l.KestrelEndpointDefaults}
		mergeEndpointOptions(&rule.KestrelEndpointDefaults, own)
		if sn.Certificate != nil {
			v.certificate(sp+".Certificate", sn.Certificate, baseDir)
			rule.Certificate = sn.Certificate
		}
		l.Sni = append(l.Sni, rule)
	}
	return l, true
}

// urlListener reads an ASP.NET listen URL: http://*:8080, http://+:80,
// https://localhost:5001, http://[::1]:5000, http://example.com:80. "*",
// "+", unspecified addresses and host names other than localhost bind every
// interface, as in Kestrel. https reports an https URL; the caller gives
// it its certificate.
func urlListener(u string, defaults KestrelEndpointDefaults) (l Listener, https bool, err error) {
	scheme, rest, ok := strings.Cut(u, "://")
	https = strings.EqualFold(scheme, "https")
	switch {
	case !ok:
		return l, false, fmt.Errorf("want scheme://host:port")
	case !https && !strings.EqualFold(scheme, "http"):
		return l, false, fmt.Errorf("scheme %q not supported (want http or https)", scheme)
	}
	if strings.HasPrefix(strings.ToLower(rest), "unix:") {
		return l, false, fmt.Errorf("unix sockets are not supported")
	}
	hostport, pathBase, _ := strings.Cut(rest, "/")
	if strings.Trim(pathBase, "/") != "" {
		return l, false, fmt.Errorf("a path base (/%s) is not supported in a listen URL, as in Kestrel", pathBase)
	}
	host, port := hostport, "80"
	if https {
		port = "443"
	}
	if h, p, err := net.SplitHostPort(hostport); err == nil {
		host, port = h, p
	} else if strings.HasPrefix(hostport, "[") && strings.HasSuffix(hostport, "]") {
		host = hostport[1 : len(hostport)-1]
	}
	if a, err := netip.ParseAddr(host); (err != nil && !strings.EqualFold(host, "localhost")) || (err == nil && a.IsUnspecified()) {
		host = "" // *, +, an unspecified address or a host name: every interface, as Kestrel binds them
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		return l, false, fmt.Errorf("port %q is out of range (0..65535)", port)
	}
	l.Address = net.JoinHostPort(host, port)
	l.KestrelEndpointDefaults = defaults
	return l, https, nil
}

// httpsDefault gives an https listener without a certificate of its own
// Kestrel.Certificates.Default, or else a self-signed one.
func (v *validator) httpsDefault(at string, l *Listener, def *Certificate) {
	if def != nil {
		l.Certificate = def
		return
	}
	l.SelfSigned = true
	v.warns = append(v.warns, at+": no certificate (Certificate or Kestrel.Certificates.Default): serving a self-signed certificate for localhost generated at start, in the role of ASP.NET's development certificate")
}

// mergeEndpointOptions overlays an endpoint's own settings on the defaults.
func mergeEndpointOptions(dst *KestrelEndpointDefaults, own KestrelEndpointDefaults) {
	if own.Protocols != "" {
		dst.Protocols = own.Protocols
	}
	if own.SslProtocols.Set {
		dst.SslProtocols = own.SslProtocols
	}
	if own.ClientCertificateMode != "" {
		dst.ClientCertificateMode = own.ClientCertificateMode
	}
}

// endpointOptions checks Protocols and ClientCertificateMode and rewrites
// them to the canonical spelling.
func (v *validator) endpointOptions(path string, o *KestrelEndpointDefaults) {
	if o.Protocols != "" {
		p, err := parseProtocols(o.Protocols)
		if err != nil {
			v.errorf(path+".Protocols", "%q: %v", o.Protocols, err)
		}
		o.Protocols = p
	}
	switch m := o.ClientCertificateMode; {
	case strings.EqualFold(m, "RequireCertificate"), strings.EqualFold(m, "DelayCertificate"):
		v.errorf(path+".ClientCertificateMode", "%q is not supported: tether does not verify client certificates, so it would let clients in that Kestrel refuses; terminate mutual TLS in front of tether", m)
	case m != "":
		v.enum(path+".ClientCertificateMode", &o.ClientCertificateMode, clientCertModes)
	}
}

// parseProtocols reads Kestrel's HttpProtocols: a name or a comma-separated
// list of flags ("Http1, Http3"), and the canonical names of the
// combinations Kestrel does not name.
func parseProtocols(s string) (canonical string, err error) {
	var h1, h2, h3 bool
	for f := range strings.SplitSeq(s, ",") {
		switch strings.ToLower(strings.TrimSpace(f)) {
		case "http1":
			h1 = true
		case "http2":
			h2 = true
		case "http3":
			h3 = true
		case "http1andhttp2":
			h1, h2 = true, true
		case "http1andhttp2andhttp3":
			h1, h2, h3 = true, true, true
		case "http1andhttp3":
			h1, h3 = true, true
		case "http2andhttp3":
			h2, h3 = true, true
		case "none":
		default:
			return "", fmt.Errorf("unknown protocol %q (want Http1, Http2, Http1AndHttp2, Http3 or Http1AndHttp2AndHttp3)", strings.TrimSpace(f))
		}
	}
	switch {
	case h1 && h2:
		canonical = ProtocolsHttp1AndHttp2
	case h1:
		canonical = ProtocolsHttp1
	case h2:
		canonical = ProtocolsHttp2
	case !h3:
		return "", fmt.Errorf("no protocol enabled")
	}
	if h3 {
		if canonical == "" {
			return ProtocolsHttp3, nil
		}
		canonical += "AndHttp3"
	}
	return canonical, nil
}

// http3Listener checks HTTP/3 on listener l (at names it; tlsOn: it
// serves HTTPS). HTTP/3 runs over QUIC, which is TLS 1.3 only. On a
// cleartext listener HTTP/3 the listener names itself is an error; HTTP/3
// it inherits from Kestrel.EndpointDefaults is dropped with a warning, as
// Kestrel does, so that defaults naming HTTP/3 still serve an http
// endpoint beside the https ones.
func (v *validator) http3Listener(at string, l *Listener, tlsOn, own bool) {
	if !ProtocolsHTTP3(l.Protocols) {
		if l.AllowZeroRtt {
			v.warns = append(v.warns, at+".AllowZeroRtt: has no effect without HTTP/3 in Protocols")
		}
		return
	}
	field := at + ".Protocols"
	if !own {
		field = "Kestrel.EndpointDefaults.Protocols"
	}
	switch {
	case !tlsOn && (own || ProtocolsTCP(l.Protocols) == ""):
		v.errorf(field, "%s: HTTP/3 needs TLS (an https Url, a Certificate or Acme)", l.Protocols)
	case !tlsOn:
		v.warns = append(v.warns, at+": HTTP/3 ("+field+") needs TLS and is not served on this http listener; "+ProtocolsTCP(l.Protocols)+" is")
		l.Protocols = ProtocolsTCP(l.Protocols)
	case l.SslProtocols.Set && l.SslProtocols.Max != 0 && l.SslProtocols.Max < tls.VersionTLS13:
		v.errorf(at+".SslProtocols", "HTTP/3 needs TLS 1.3 (Tls13), which these versions leave out")
	}
}

// certificate checks one certificate reference and makes a relative path
// relative to baseDir (the config file's directory, Kestrel's content root).
func (v *validator) certificate(path string, c *Certificate, baseDir string) {
	if c.Subject != "" || c.Store != "" || c.Location != "" {
		v.errorf(path, "certificate stores (Subject, Store, Location) are not supported; give Path and KeyPath (PEM) or Path and Password (PKCS#12)")
		return
	}
	if c.AllowInvalid {
		v.warns = append(v.warns, path+".AllowInvalid: ignored (it applies to certificate stores)")
	}
	for _, p := range []*string{&c.Path, &c.KeyPath} {
		if *p != "" && !filepath.IsAbs(*p) && baseDir != "" {
			*p = filepath.Join(baseDir, *p)
		}
	}
	v.file(path+".Path", c.Path)
	if c.KeyPath != "" {
		v.file(path+".KeyPath", c.KeyPath)
		if c.Password != "" {
			v.errorf(path+".Password", "encrypted PEM keys are not supported; decrypt the key file or use a PKCS#12 file")
		}
	}
}

// sameRate: a and b are the same limit once defaults apply ("00:00:05"
// and a left-out grace period are).
func sameRate(a, b MinDataRate) bool {
	ab, ag, aon := a.Effective()
	bb, bg, bon := b.Effective()
	return aon == bon && (!aon || ab == bb && ag == bg)
}

// minDataRate checks a MinDataRate as Kestrel's constructor does.
func (v *validator) minDataRate(path string, r MinDataRate) {
	if !r.Set || r.Disabled {
		return
	}
	if r.BytesPerSecond < 0 {
		v.errorf(path+".BytesPerSecond", "must not be negative (0 or null: no minimum)")
	}
	if g := r.GracePeriod; g.Set && g.Duration <= time.Second {
		v.errorf(path+".GracePeriod", "must be more than 1 second (the rate is checked once a second)")
	}
}

// kestrelLimits fills Limits from Kestrel.Limits; a value set differently
// in both is an error.
func (v *validator) kestrelLimits(c *Config) {
	k, l := &c.Kestrel.Limits, &c.Limits
	conflict := func(name string) {
		v.errorf("Kestrel.Limits."+name, "differs from Limits.%s; set one of them", name)
	}
	mergeInt := func(name string, dst *int, src int) {
		switch {
		case src == 0:
		case *dst == 0:
			*dst = src
		case *dst != src:
			conflict(name)
		}
	}
	mergeInt("MaxRequestHeadersTotalSize", &l.MaxRequestHeadersTotalSize, k.MaxRequestHeadersTotalSize)
	mergeInt("MaxConcurrentConnections", &l.MaxConcurrentConnections, k.MaxConcurrentConnections)
	switch {
	case k.MaxRequestBodySize == 0:
	case l.MaxRequestBodySize == 0:
		l.MaxRequestBodySize = k.MaxRequestBodySize
	case l.MaxRequestBodySize != k.MaxRequestBodySize:
		conflict("MaxRequestBodySize")
	}
	for _, d := range []struct {
		name     string
		dst, src *Duration
	}{{"KeepAliveTimeout", &l.KeepAliveTimeout, &k.KeepAliveTimeout}, {"RequestHeadersTimeout", &l.RequestHeadersTimeout, &k.RequestHeadersTimeout}} {
		switch {
		case !d.src.Set:
		case d.src.Duration <= 0:
			v.positive("Kestrel.Limits."+d.name, *d.src)
		case !d.dst.Set:
			*d.dst = *d.src
		case d.dst.Duration != d.src.Duration:
			conflict(d.name)
		}
	}
	for _, r := range []struct {
		name     string
		dst, src *MinDataRate
	}{{"MinRequestBodyDataRate", &l.MinRequestBodyDataRate, &k.MinRequestBodyDataRate}, {"MinResponseDataRate", &l.MinResponseDataRate, &k.MinResponseDataRate}} {
		v.minDataRate("Kestrel.Limits."+r.name, *r.src)
		v.minDataRate("Limits."+r.name, *r.dst)
		switch {
		case !r.src.Set:
		case !r.dst.Set:
			*r.dst = *r.src
		case !sameRate(*r.dst, *r.src):
			conflict(r.name)
		}
	}
	if l.MaxRequestBodySize < 0 {
		v.errorf("Limits.MaxRequestBodySize", "must not be negative (0: no limit)")
	}
	if l.MaxConcurrentConnections < 0 {
		v.errorf("Limits.MaxConcurrentConnections", "must not be negative (0: no cap)")
	}
}
