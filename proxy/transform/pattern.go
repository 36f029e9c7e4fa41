package transform

import (
	"errors"
	"strings"

	"github.com/tether-proxy/tether/proxy/route"
)

// pattern is a compiled PathPattern: a route template whose parameters are
// replaced by the request's route values, as ASP.NET's TemplateBinder does
// for YARP's PathRouteValuesTransform.
type pattern struct {
	segs [][]ppart
}

type ppart struct {
	literal  string // escaped literal text, when not a parameter
	param    bool
	name     string // lower-cased
	optional bool
	// keepSlash: a "{**name}" catch-all, whose '/' stay path separators;
	// "{*name}" encodes them as %2F, as ASP.NET does.
	keepSlash bool
}

// compilePattern checks s with the route template parser (so its syntax
// is ASP.NET's) and splits it into segments and parts.
func compilePattern(s string) (*pattern, error) {
	if !strings.HasPrefix(s, "/") {
		return nil, errors.New("must start with '/'")
	}
	if _, err := route.ParseTemplate(s); err != nil {
		return nil, err
	}
	p := &pattern{}
	var parts []ppart
	var lit []byte
	flush := func() {
		if len(lit) > 0 {
			parts = append(parts, ppart{literal: escapeValue(string(lit), true)})
			lit = lit[:0]
		}
	}
	for i := 1; i <= len(s); i++ {
		switch {
		case i == len(s) || s[i] == '/':
			flush()
			if len(parts) > 0 {
				p.segs = append(p.segs, parts)
			}
			parts = nil
		case strings.HasPrefix(s[i:], "{{"), strings.HasPrefix(s[i:], "}}"):
			lit = append(lit, s[i])
			i++
		case s[i] == '{':
			end := closeBrace(s, i)
			flush()
			parts = append(parts, parseParamName(s[i+1:end]))
			i = end
		default:
			lit = append(lit, s[i])
		}
	}
	return p, nil
}

// closeBrace finds the '}' that closes the parameter opening at i; the
// template parser already proved there is one.
func closeBrace(s string, i int) int {
	for i++; i < len(s); i++ {
		switch {
		case strings.HasPrefix(s[i:], "}}"), strings.HasPrefix(s[i:], "{{"):
			i++
		case s[i] == '}':
			return i
		}
	}
	return len(s) - 1
}

func parseParamName(s string) ppart {
	p := ppart{param: true}
	switch {
	case strings.HasPrefix(s, "**"):
		s, p.keepSlash = s[2:], true
	case strings.HasPrefix(s, "*"):
		s = s[1:]
	}
	if i := strings.IndexAny(s, ":="); i >= 0 {
		s = s[:i]
	}
	if strings.HasSuffix(s, "?") {
		s, p.optional = s[:len(s)-1], true
	}
	p.name = strings.ToLower(s)
	return p
}

// bind builds the escaped path. Like ASP.NET's binder: a parameter
// without a value leaves its segment out when it is alone in it and
// nothing follows; an optional one after a '.' drops the '.'; anything
// else without a value (text after an empty segment, a required part of a
// complex segment) fails, and YARP then sends the empty path, so bind
// returns "".
func (p *pattern) bind(vals map[string]string) string {
	var b strings.Builder
	empty := false
	for _, seg := range p.segs {
		var sb strings.Builder
		for j, part := range seg {
			if !part.param {
				sb.WriteString(part.literal)
				continue
			}
			v := vals[part.name]
			switch {
			case v != "":
				sb.WriteString(escapeRouteValue(v, part.keepSlash))
			case len(seg) == 1:
			case part.optional && j > 0 && !seg[j-1].param && seg[j-1].literal == ".":
				s := sb.String()
				sb.Reset()
				sb.WriteString(s[:len(s)-1])
			default:
				return ""
			}
		}
		if sb.Len() == 0 {
			empty = true
			continue
		}
		if empty {
			return ""
		}
		b.WriteByte('/')
		b.WriteString(sb.String())
	}
	return b.String()
}

// escapeValue percent-encodes v as .NET's UrlEncoder.Default does (every
// byte but ASCII letters, digits and !$()*,-.;@_~, upper-case hex), keeping
// '/' when keepSlash.
func escapeValue(v string, keepSlash bool) string { return escape(v, keepSlash, false) }

// escapeRouteValue is escapeValue for a route value: an encoded slash in
// it (route values keep the client's "%2F", as ASP.NET's do) stays "%2F"
// instead of becoming "%252F".
func escapeRouteValue(v string, keepSlash bool) string { return escape(v, keepSlash, true) }

func escape(v string, keepSlash, encodedSlash bool) string {
	const hex = "0123456789ABCDEF"
	clean := true
	for i := 0; i < len(v); i++ {
		if !unreserved(v[i]) && !(keepSlash && v[i] == '/') {
			clean = false
			break
		}
	}
	if clean {
		return v
	}
	var b strings.Builder
	b.Grow(len(v) + 8)
	for i := 0; i < len(v); i++ {
		c := v[i]
		switch {
		case unreserved(c), keepSlash && c == '/':
			b.WriteByte(c)
		case encodedSlash && c == '%' && i+2 < len(v) && v[i+1] == '2' && (v[i+2] == 'F' || v[i+2] == 'f'):
			b.WriteString("%2F")
			i += 2
		default:
			b.WriteByte('%')
			b.WriteByte(hex[c>>4])
			b.WriteByte(hex[c&15])
		}
	}
	return b.String()
}

func unreserved(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	return strings.IndexByte("!$()*,-.;@_~", c) >= 0
}
