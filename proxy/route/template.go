package route

import (
	"errors"
	"fmt"
	"strings"
)

// Template is a compiled YARP (ASP.NET Core) route template, or a plain
// prefix. It is immutable; Match is safe for concurrent use.
type Template struct {
	segs []segment
	// prec holds one ASP.NET inbound precedence digit per segment.
	prec []byte
}

// segment is one '/'-separated piece of a template: a single literal or
// parameter, or a complex segment such as "{name}.{ext?}".
type segment struct{ parts []part }

type part struct {
	literal string // set when the part is literal text (already unescaped)

	param      bool
	name       string
	optional   bool   // {name?}
	catchAll   bool   // {*name} or {**name}
	hasDefault bool   // {name=value}
	def        string // the default value
	checks     []constraint
}

// ParseTemplate compiles a route template. Besides YARP's syntax it accepts
// two plain-prefix forms: "prefix:/a/b" and "/a/b/*", both meaning "/a/b"
// and anything below it (segment-wise, case-insensitive). The empty string
// matches every path.
func ParseTemplate(s string) (*Template, error) {
	if s == "" {
		return &Template{segs: []segment{{parts: []part{{param: true, catchAll: true}}}}, prec: []byte{5}}, nil
	}
	if p, ok := strings.CutPrefix(s, "prefix:"); ok {
		return parsePrefix(p)
	}
	if p, ok := strings.CutSuffix(s, "/*"); ok {
		return parsePrefix(p)
	}
	if strings.HasPrefix(s, "~/") {
		s = s[1:]
	} else if strings.HasPrefix(s, "~") {
		return nil, errors.New("a template may start with \"~/\" but not with \"~\" alone")
	}
	s = strings.TrimPrefix(s, "/")
	t := &Template{}
	names := map[string]bool{} // lower-cased, as ASP.NET compares them
	var seg segment
	var lit []byte // literal text of the current part, braces unescaped
	for i := 0; i <= len(s); i++ {
		switch {
		case i == len(s) || s[i] == '/':
			if err := seg.addLiteral(&lit); err != nil {
				return nil, err
			}
			if len(seg.parts) == 0 {
				if i < len(s) {
					return nil, errors.New("the separator '/' cannot appear twice in a row")
				}
				continue // an empty template, or one trailing '/'
			}
			if err := t.addSegment(seg); err != nil {
				return nil, err
			}
			seg = segment{}
		case strings.HasPrefix(s[i:], "{{"), strings.HasPrefix(s[i:], "}}"):
			lit = append(lit, s[i])
			i++
		case s[i] == '}':
			return nil, fmt.Errorf("unbalanced '}' in %q", s)
		case s[i] == '{':
			end := paramEnd(s, i)
			if end == -2 {
				return nil, fmt.Errorf("in %q, a '{' inside a parameter must be escaped as \"{{\"", s)
			}
			if end < 0 {
				return nil, fmt.Errorf("unbalanced '{' in %q", s)
			}
			p, err := parseParam(s[i+1 : end])
			if err != nil {
				return nil, err
			}
			if names[strings.ToLower(p.name)] {
				return nil, fmt.Errorf("parameter name %q appears more than once", p.name)
			}
			names[strings.ToLower(p.name)] = true
			if err := seg.addLiteral(&lit); err != nil {
				return nil, err
			}
			if n := len(seg.parts); n > 0 && seg.parts[n-1].param {
				return nil, errors.New("a segment cannot contain two consecutive parameters")
			}
			seg.parts = append(seg.parts, p)
			i = end
		default:
			lit = append(lit, s[i])
		}
	}
	return t, nil
}

// paramEnd is the index of the '}' closing the parameter that opens at i,
// -1 when there is none, or -2 for an unescaped '{' inside it. Inside a
// parameter "{{" and "}}" are escaped braces (regex constraints), as in
// ASP.NET's RoutePatternParser.
func paramEnd(s string, i int) int {
	for i++; i < len(s); i++ {
		switch s[i] {
		case '}':
			if !strings.HasPrefix(s[i:], "}}") {
				return i
			}
			i++
		case '{':
			if !strings.HasPrefix(s[i:], "{{") {
				return -2
			}
			i++
		}
	}
	return -1
}

func (seg *segment) addLiteral(lit *[]byte) error {
	if len(*lit) == 0 {
		return nil
	}
	if strings.IndexByte(string(*lit), '?') >= 0 {
		return fmt.Errorf("literal %q cannot contain '?'", *lit)
	}
	seg.parts = append(seg.parts, part{literal: string(*lit)})
	*lit = (*lit)[:0]
	return nil
}

func (t *Template) addSegment(seg segment) error {
	if n := len(t.segs); n > 0 && t.segs[n-1].parts[0].catchAll {
		return errors.New("a catch-all parameter must be the last segment")
	}
	for i, p := range seg.parts {
		if len(seg.parts) > 1 && p.catchAll {
			return errors.New("a catch-all parameter must be alone in its segment")
		}
		if len(seg.parts) > 1 && p.optional && (i != len(seg.parts)-1 || i < 2 || seg.parts[i-1].literal != ".") {
			return errors.New("an optional parameter in a complex segment must be last and follow a '.'")
		}
	}
	t.segs = append(t.segs, seg)
	t.prec = append(t.prec, seg.precedence())
	return nil
}

func parsePrefix(p string) (*Template, error) {
	if strings.ContainsAny(p, "{}") {
		return nil, errors.New("a plain prefix cannot contain '{' or '}'")
	}
	t := &Template{}
	for _, lit := range strings.Split(strings.Trim(p, "/"), "/") {
		if lit == "" {
			if len(t.segs) == 0 {
				break // the root prefix: only the catch-all
			}
			return nil, errors.New("the separator '/' cannot appear twice in a row")
		}
		t.segs = append(t.segs, segment{parts: []part{{literal: lit}}})
		t.prec = append(t.prec, 1)
	}
	t.segs = append(t.segs, segment{parts: []part{{param: true, catchAll: true}}})
	t.prec = append(t.prec, 5)
	return t, nil
}

func parseParam(s string) (part, error) {
	p := part{param: true}
	raw := s
	s = strings.ReplaceAll(strings.ReplaceAll(s, "}}", "}"), "{{", "{")
	if strings.HasPrefix(s, "**") {
		p.catchAll, s = true, s[2:]
	} else if strings.HasPrefix(s, "*") {
		p.catchAll, s = true, s[1:]
	}
	if strings.HasSuffix(s, "?") {
		p.optional, s = true, s[:len(s)-1]
	}
	end := strings.IndexAny(s, ":=")
	if end < 0 {
		end = len(s)
	}
	p.name, s = s[:end], s[end:]
	if p.name == "" || strings.ContainsAny(p.name, "{}/?*") {
		return p, fmt.Errorf("parameter {%s}: name must be non-empty and contain none of {}/?*", raw)
	}
	texts, rest := splitConstraints(s)
	for _, text := range texts {
		c, err := newConstraint(text)
		if err != nil {
			return p, fmt.Errorf("parameter {%s}: %v", raw, err)
		}
		p.checks = append(p.checks, c)
	}
	if def, ok := strings.CutPrefix(rest, "="); ok {
		p.hasDefault, p.def = true, def
	}
	switch {
	case p.catchAll && p.optional:
		return p, fmt.Errorf("parameter {%s}: a catch-all cannot be optional", raw)
	case p.optional && p.hasDefault:
		return p, fmt.Errorf("parameter {%s}: an optional parameter cannot have a default", raw)
	}
	return p, nil
}

// splitConstraints splits ":c1:c2(args)=default" into the constraint texts
// and the rest ("=default" or ""), as ASP.NET's RouteParameterParser does:
// inside parentheses a ':' or '=' belongs to the arguments when a ')'
// follows somewhere, and a ')' closes them only when the text ends there or
// continues with ':' or '='.
func splitConstraints(s string) (texts []string, rest string) {
	for strings.HasPrefix(s, ":") {
		s = s[1:]
		i := 0
	scan:
		for ; i < len(s); i++ {
			switch s[i] {
			case ':', '=':
				break scan
			case '(':
				j, ok := argsEnd(s, i+1)
				if !ok {
					i = j
					break scan
				}
				i = j - 1 // s[j] ends the constraint: the loop stops there
			}
		}
		if i > 0 { // ASP.NET skips empty names ("{id::int}")
			texts = append(texts, s[:i])
		}
		s = s[i:]
	}
	return texts, s
}

// argsEnd scans constraint arguments starting at i (after the '('). It
// returns the index just past the closing ')' and true, or the index of the
// ':' or '=' (or the end) where the unclosed arguments stop, and false.
func argsEnd(s string, i int) (int, bool) {
	for ; i < len(s); i++ {
		switch s[i] {
		case ')':
			if i+1 == len(s) || s[i+1] == ':' || s[i+1] == '=' {
				return i + 1, true
			}
		case ':', '=':
			if strings.IndexByte(s[i+1:], ')') < 0 {
				return i, false
			}
		}
	}
	return i, false
}

// precedence is ASP.NET's inbound precedence digit: 1 literal, 2
// constrained parameter or complex segment, 3 parameter, 4 constrained
// catch-all, 5 catch-all.
func (s *segment) precedence() byte {
	if len(s.parts) > 1 {
		return 2
	}
	p := &s.parts[0]
	if !p.param {
		return 1
	}
	d := byte(3)
	if p.catchAll {
		d = 5
	}
	if len(p.checks) > 0 {
		d--
	}
	return d
}

// firstLiteral is the template's first segment, lower-cased, when that is
// a plain ASCII literal; otherwise "".
func (t *Template) firstLiteral() string {
	if len(t.segs) == 0 || len(t.segs[0].parts) > 1 || t.segs[0].parts[0].param {
		return ""
	}
	lit := t.segs[0].parts[0].literal
	for i := 0; i < len(lit); i++ {
		if lit[i] >= 0x80 {
			return ""
		}
	}
	return strings.ToLower(lit)
}

// Match reports whether path (as ASP.NET's Request.Path: decoded, except
// that %2F stays encoded) matches the template. One trailing '/' is ignored.
func (t *Template) Match(path string) bool {
	full := strings.TrimPrefix(path, "/")
	rest, more := full, full != ""
	if more {
		rest = strings.TrimSuffix(rest, "/")
	}
	for i := range t.segs {
		s := &t.segs[i]
		if p := &s.parts[0]; p.catchAll {
			if !more {
				return p.absent()
			}
			// As in ASP.NET, the catch-all's value keeps the trailing '/'.
			return p.check(full[len(full)-len(rest)-(len(path)-len(strings.TrimSuffix(path, "/"))):])
		}
		if !more {
			if p := &s.parts[0]; len(s.parts) == 1 && p.param && (p.optional || p.hasDefault && p.check(p.def)) {
				continue
			}
			return false
		}
		var seg string
		if j := strings.IndexByte(rest, '/'); j >= 0 {
			seg, rest = rest[:j], rest[j+1:]
		} else {
			seg, rest, more = rest, "", false
		}
		if !s.match(seg) {
			return false
		}
	}
	return !more
}

// matchesAll: Match is true for every path, as for a lone catch-all
// without constraints.
func (t *Template) matchesAll() bool {
	if len(t.segs) != 1 || len(t.segs[0].parts) != 1 {
		return false
	}
	p := &t.segs[0].parts[0]
	return p.catchAll && len(p.checks) == 0
}

// check applies every constraint of the parameter to its value.
func (p *part) check(v string) bool {
	for i := range p.checks {
		if !p.checks[i].ok(v) {
			return false
		}
	}
	return true
}

// absent reports whether an empty catch-all matches: it takes its default
// value if it has one; otherwise it has no value, which ASP.NET's
// constraints reject (all but nonfile), "required" included.
func (p *part) absent() bool {
	if p.hasDefault {
		return p.check(p.def)
	}
	for i := range p.checks {
		if !p.checks[i].absentOK {
			return false
		}
	}
	return true
}

func (s *segment) match(v string) bool {
	if len(s.parts) == 1 {
		p := &s.parts[0]
		if !p.param {
			return strings.EqualFold(p.literal, v)
		}
		return v != "" && p.check(v)
	}
	if matchComplex(s.parts, v) {
		return true
	}
	// "{name}.{ext?}" also matches without its optional tail, unless the
	// segment ends with the '.'.
	n := len(s.parts)
	return s.parts[n-1].optional && !strings.HasSuffix(v, ".") && matchComplex(s.parts[:n-2], v)
}

// matchComplex matches a segment of several parts right to left, as
// ASP.NET does: each literal is found by its last occurrence, and every
// parameter takes the (non-empty) text between its neighbouring literals.
func matchComplex(parts []part, v string) bool { return scanComplex(parts, v, nil) }

// boundValue is one parameter's text in a complex segment.
type boundValue struct{ name, v string }

// scanComplex is matchComplex; when found is not nil it also records each
// parameter's text (Values), so Match and Values share one algorithm.
func scanComplex(parts []part, v string, found *[]boundValue) bool {
	end := len(v) // v[:end] is still unmatched
	for i := len(parts) - 1; i >= 0; i-- {
		p := &parts[i]
		if !p.param {
			if i == len(parts)-1 {
				if !hasSuffixFold(v, p.literal) {
					return false
				}
				end -= len(p.literal)
				continue
			}
			// The parameter after this literal needs at least one byte. As
			// in ASP.NET, a leading literal is found by its last occurrence
			// too, so "v{n}" does not match "vav1".
			if end < 1 {
				return false
			}
			j := lastIndexFold(v[:end-1], p.literal)
			if j < 0 {
				return false
			}
			pv := v[j+len(p.literal) : end]
			if !parts[i+1].check(pv) {
				return false
			}
			if found != nil {
				*found = append(*found, boundValue{parts[i+1].name, pv})
			}
			end = j
			continue
		}
		if i == 0 {
			if end <= 0 || !p.check(v[:end]) {
				return false
			}
			if found != nil {
				*found = append(*found, boundValue{p.name, v[:end]})
			}
			return true
		}
	}
	return end == 0
}

func hasSuffixFold(s, suffix string) bool {
	return len(s) >= len(suffix) && strings.EqualFold(s[len(s)-len(suffix):], suffix)
}

func hasPrefixFold(s, prefix string) bool {
	return len(s) >= len(prefix) && strings.EqualFold(s[:len(prefix)], prefix)
}

func lastIndexFold(s, sub string) int {
	for i := len(s) - len(sub); i >= 0; i-- {
		if strings.EqualFold(s[i:i+len(sub)], sub) {
			return i
		}
	}
	return -1
}
