package forwarded

import (
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"

	"github.com/tether-proxy/tether/proxy/config"
	"golang.org/x/net/http/httpguts"
)

// YARP's X-Forwarded and Forwarded (RFC 7239) transforms. They are
// compiled here rather than in package transform because they read what
// only the data path knows: the peer's trust, the connection's addresses,
// the client's scheme.
//
// Departures from YARP, all because tether trusts forwarding information only
// from TrustedProxies (proxy/DESIGN.md, "Forwarded headers and trust"): Append and
// Off keep an incoming value only when the peer is trusted (from anyone else
// Append is Set, and Off sends nothing); X-Forwarded-Port, which tether sends
// and YARP does not, follows the X-Forwarded action; the headers are written
// before the route's other transforms, so a RequestHeader transform can
// always override them.

// fwdAction is YARP's ForwardedTransformActions.
type fwdAction uint8

const (
	actSet fwdAction = iota
	actAppend
	actRemove
	actOff
)

var fwdActions = map[string]fwdAction{"Set": actSet, "Append": actAppend, "Remove": actRemove, "Off": actOff}

// nodeFormat is YARP's NodeFormat for Forwarded's for= and by=.
type nodeFormat uint8

const (
	nodeNone nodeFormat = iota
	nodeRandom
	nodeRandomAndPort
	nodeRandomAndRandomPort
	nodeUnknown
	nodeUnknownAndPort
	nodeUnknownAndRandomPort
	nodeIP
	nodeIPAndPort
	nodeIPAndRandomPort
)

var nodeFormats = map[string]nodeFormat{
	"None": nodeNone, "Random": nodeRandom, "RandomAndPort": nodeRandomAndPort,
	"RandomAndRandomPort": nodeRandomAndRandomPort, "Unknown": nodeUnknown,
	"UnknownAndPort": nodeUnknownAndPort, "UnknownAndRandomPort": nodeUnknownAndRandomPort,
	"Ip": nodeIP, "IpAndPort": nodeIPAndPort, "IpAndRandomPort": nodeIPAndRandomPort,
}

// xfHeader is one X-Forwarded-* header of a route's transform.
type xfHeader struct {
	name string // canonical, with the route's HeaderPrefix
	act  fwdAction
}

// Transforms are a route's compiled X-Forwarded and Forwarded
// transforms; nil when it has neither (tether's defaults apply).
type Transforms struct {
	// xfFor .. xfPort are the X-Forwarded-* headers; with only a Forwarded
	// transform they are the default names with actRemove.
	xfFor, xfProto, xfHost, xfPrefix, xfPort xfHeader

	// fwd is the Forwarded header's action, when hasFwd; a route without a
	// Forwarded transform never passes the client's on.
	hasFwd            bool
	fwd               fwdAction
	fwdProto, fwdHost bool
	forFmt, byFmt     nodeFormat
}

// Compile finds a route's X-Forwarded and Forwarded transforms (nil when
// it has neither).
// path is the JSON path of the route's Transforms list.
func Compile(path string, dicts []map[string]string) (*Transforms, config.Errors) {
	var errs config.Errors
	fail := func(p, format string, args ...any) {
		errs = append(errs, config.FieldError{Path: p, Message: fmt.Sprintf(format, args...)})
	}
	var xf, fw map[string]string
	var xfPath, fwPath string
	for i, d := range dicts {
		p := path + "[" + strconv.Itoa(i) + "]"
		for k := range d {
			switch {
			case strings.EqualFold(k, "X-Forwarded"):
				if xf != nil {
					fail(p, "a second X-Forwarded transform (the first is %s)", xfPath)
				}
				xf, xfPath = d, p
			case strings.EqualFold(k, "Forwarded"):
				if fw != nil {
					fail(p, "a second Forwarded transform (the first is %s)", fwPath)
				}
				fw, fwPath = d, p
			}
		}
	}
	if xf == nil && fw == nil {
		return nil, errs
	}
	f := &Transforms{}
	if xf != nil {
		get := func(key string, def fwdAction) fwdAction {
			k, v, ok := lookupFold(xf, key)
			if !ok {
				return def
			}
			a, ok := parseAction(v)
			if !ok {
				fail(xfPath+"."+k, "unknown action %q (want Set, Append, Remove or Off)", v)
			}
			return a
		}
		def := get("X-Forwarded", actSet)
		prefix := "X-Forwarded-"
		if k, v, ok := lookupFold(xf, "HeaderPrefix"); ok {
			if v == "" || !httpguts.ValidHeaderFieldName(v+"For") {
				fail(xfPath+"."+k, "%q is not a header name prefix", v)
			}
			prefix = v
		}
		name := func(s string) string { return http.CanonicalHeaderKey(prefix + s) }
		f.xfFor = xfHeader{name("For"), get("For", def)}
		f.xfProto = xfHeader{name("Proto"), get("Proto", def)}
		f.xfHost = xfHeader{name("Host"), get("Host", def)}
		f.xfPrefix = xfHeader{name("Prefix"), get("Prefix", def)}
		f.xfPort = xfHeader{name("Port"), def}
	} else {
		// As in YARP, a route enabling Forwarded without configuring
		// X-Forwarded sends no X-Forwarded-* headers.
		f.xfFor = xfHeader{XFF, actRemove}
		f.xfProto = xfHeader{XFProto, actRemove}
		f.xfHost = xfHeader{XFHost, actRemove}
		f.xfPrefix = xfHeader{"X-Forwarded-Prefix", actRemove}
		f.xfPort = xfHeader{XFPort, actRemove}
	}
	if fw != nil {
		k, v, _ := lookupFold(fw, "Forwarded")
		var useFor, useBy bool
		for _, tok := range strings.FieldsFunc(v, func(r rune) bool { return r == ',' || r == ' ' }) {
			switch strings.ToLower(tok) {
			case "for":
				useFor = true
			case "by":
				useBy = true
			case "host":
				f.fwdHost = true
			case "proto":
				f.fwdProto = true
			default:
				fail(fwPath+"."+k, "unexpected %q (want a list of for, by, host, proto)", tok)
			}
		}
		if !useFor && !useBy && !f.fwdHost && !f.fwdProto {
			fail(fwPath+"."+k, "want a list of for, by, host, proto")
		}
		f.hasFwd, f.fwd = true, actSet
		if k, v, ok := lookupFold(fw, "Action"); ok {
			a, ok := parseAction(v)
			if !ok {
				fail(fwPath+"."+k, "unknown action %q (want Set, Append, Remove or Off)", v)
			}
			f.fwd = a
		}
		format := func(key string, use bool) nodeFormat {
			k, v, ok := lookupFold(fw, key)
			if !use {
				if ok {
					fail(fwPath+"."+k, "given, but the Forwarded list does not include %s", strings.ToLower(strings.TrimSuffix(key, "Format")))
				}
				return nodeNone
			}
			if !ok {
				return nodeRandom // RFC 7239's default: obfuscated identifiers
			}
			for name, nf := range nodeFormats {
				if strings.EqualFold(name, v) {
					return nf
				}
			}
			fail(fwPath+"."+k, "unknown format %q (want None, Random, RandomAndPort, RandomAndRandomPort, Unknown, UnknownAndPort, UnknownAndRandomPort, Ip, IpAndPort or IpAndRandomPort)", v)
			return nodeNone
		}
		f.forFmt = format("ForFormat", useFor)
		f.byFmt = format("ByFormat", useBy)
	}
	if len(errs) > 0 {
		return nil, errs
	}
	return f, nil
}

func parseAction(v string) (fwdAction, bool) {
	for name, a := range fwdActions {
		if strings.EqualFold(name, strings.TrimSpace(v)) {
			return a, true
		}
	}
	return actSet, false
}

// lookupFold finds key in d case-insensitively, as .NET configuration does.
func lookupFold(d map[string]string, key string) (string, string, bool) {
	if v, ok := d[key]; ok {
		return key, v, true
	}
	for k, v := range d {
		if strings.EqualFold(k, key) {
			return k, v, true
		}
	}
	return "", "", false
}

// apply writes the route's forwarding headers on h, the outgoing header.
func (f *Transforms) apply(in *http.Request, h http.Header, c *Client) {
	f.xf(in, h, c, f.xfFor, c.Host)
	f.xf(in, h, c, f.xfProto, c.Proto)
	f.xf(in, h, c, f.xfHost, in.Host)
	f.xf(in, h, c, f.xfPrefix, "") // tether has no PathBase
	f.xf(in, h, c, f.xfPort, clientPort(in, c.Proto))
	delete(h, "Forwarded")
	switch {
	case !f.hasFwd:
	case f.fwd == actSet:
		h["Forwarded"] = []string{f.element(in, c)}
	case f.fwd == actAppend:
		if prior := in.Header["Forwarded"]; c.Trusted && len(prior) > 0 {
			h["Forwarded"] = []string{joinValues(prior, f.element(in, c))}
		} else {
			h["Forwarded"] = []string{f.element(in, c)}
		}
	case f.fwd == actOff:
		if v := in.Header["Forwarded"]; c.Trusted && len(v) > 0 {
			h["Forwarded"] = v
		}
	}
	setOriginal(in, h, c, nil)
}

// xf applies one X-Forwarded-* header; own is this hop's value ("" for
// none). Incoming values count only from a trusted peer.
func (f *Transforms) xf(in *http.Request, h http.Header, c *Client, x xfHeader, own string) {
	var prior []string
	if c.Trusted {
		prior = in.Header[x.name]
	}
	delete(h, x.name)
	switch x.act {
	case actSet:
		if own != "" {
			h[x.name] = []string{own}
		}
	case actAppend:
		switch {
		case own == "" && len(prior) > 0:
			h[x.name] = prior
		case own != "":
			h[x.name] = []string{joinValues(prior, own)}
		}
	case actOff:
		if len(prior) > 0 {
			h[x.name] = prior
		}
	}
}

// element is this hop's Forwarded element (RFC 7239 §4), in YARP's order:
// proto, host, for, by.
func (f *Transforms) element(in *http.Request, c *Client) string {
	var b strings.Builder
	sep := func() {
		if b.Len() > 0 {
			b.WriteByte(';')
		}
	}
	if f.fwdProto {
		b.WriteString("proto=")
		b.WriteString(c.Proto)
	}
	if f.fwdHost {
		sep()
		b.WriteString("host=")
		writeQuoted(&b, in.Host)
	}
	if f.forFmt != nodeNone {
		sep()
		b.WriteString("for=")
		writeNode(&b, f.forFmt, in.RemoteAddr)
	}
	if f.byFmt != nodeNone {
		sep()
		b.WriteString("by=")
		local := ""
		if a, ok := in.Context().Value(http.LocalAddrContextKey).(net.Addr); ok {
			local = a.String()
		}
		writeNode(&b, f.byFmt, local)
	}
	return b.String()
}

// writeQuoted writes s as an RFC 7230 quoted-string.
func writeQuoted(b *strings.Builder, s string) {
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		if s[i] == '"' || s[i] == '\\' {
			b.WriteByte('\\')
		}
		b.WriteByte(s[i])
	}
	b.WriteByte('"')
}

// obfChars are those of RFC 7239's obfnode after the "_".
const obfChars = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-"

func writeObfuscated(b *strings.Builder) {
	b.WriteByte('_')
	for i := 0; i < 9; i++ {
		b.WriteByte(obfChars[rand.IntN(len(obfChars))])
	}
}

// writeNode writes a node (RFC 7239 §6) for addr ("ip:port") in format nf.
// An IPv6 address or any node with a port is quoted, since ':' is not a
// token character.
func writeNode(b *strings.Builder, nf nodeFormat, addr string) {
	var ip netip.Addr
	port := ""
	if ap, err := netip.ParseAddrPort(addr); err == nil {
		ip, port = ap.Addr().Unmap(), strconv.Itoa(int(ap.Port()))
	} else if a, err := netip.ParseAddr(addr); err == nil {
		ip = a.Unmap()
	}
	withPort := port != "" && port != "0" && (nf == nodeIPAndPort || nf == nodeUnknownAndPort || nf == nodeRandomAndPort)
	randomPort := nf == nodeIPAndRandomPort || nf == nodeUnknownAndRandomPort || nf == nodeRandomAndRandomPort
	isIP := nf == nodeIP || nf == nodeIPAndPort || nf == nodeIPAndRandomPort
	v6 := isIP && ip.Is6()
	quote := withPort || randomPort || v6
	if quote {
		b.WriteByte('"')
	}
	switch {
	case isIP && ip.IsValid():
		if v6 {
			b.WriteByte('[')
			b.WriteString(ip.String())
			b.WriteByte(']')
		} else {
			b.WriteString(ip.String())
		}
	case isIP, nf == nodeUnknown, nf == nodeUnknownAndPort, nf == nodeUnknownAndRandomPort:
		b.WriteString("unknown")
	default:
		writeObfuscated(b)
	}
	switch {
	case withPort:
		b.WriteByte(':')
		b.WriteString(port)
	case randomPort:
		b.WriteByte(':')
		writeObfuscated(b)
	}
	if quote {
		b.WriteByte('"')
	}
}
