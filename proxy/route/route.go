package route

import (
	"cmp"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/tether-proxy/tether/proxy/config"
)

// Table matches requests to routes. Safe for concurrent use; immutable.
type Table struct {
	// Every list is in priority order: Match returns the first that matches.
	all []*entry
	// byFirst indexes routes by their first path segment when it is an
	// ASCII literal (lower-cased); each list also holds every route of
	// other, so one list is all a request needs to walk.
	byFirst map[string][]*entry
	other   []*entry // routes whose first segment is not an ASCII literal
	// hosts: a route matches hosts, so Match reads the request's.
	hosts bool
}

// entry is one compiled route.
type entry struct {
	route *config.Route
	id    string
	path  *Template
	// anyPath: path matches every request path (a lone catch-all without
	// constraints), so Match need not walk it.
	anyPath bool
	hosts   []hostPattern
	methods []string
	headers []headerMatcher
	query   []queryMatcher
}

// NewTable compiles routes (keyed by route id). Every problem is returned
// with its JSON path ("ReverseProxy.Routes.<id>.Match.Path: ..."); the
// Table is nil then. Nil routes are skipped.
func NewTable(routes map[string]*config.Route) (*Table, config.Errors) {
	var errs config.Errors
	t := &Table{}
	for id, r := range routes {
		if r == nil {
			continue
		}
		e, es := compile(id, r)
		errs = append(errs, es...)
		if len(es) == 0 {
			t.all = append(t.all, e)
		}
	}
	if len(errs) > 0 {
		slices.SortStableFunc(errs, func(a, b config.FieldError) int { return cmp.Compare(a.Path, b.Path) })
		return nil, errs
	}
	slices.SortFunc(t.all, compareEntries)
	t.byFirst = map[string][]*entry{}
	for _, e := range t.all {
		t.hosts = t.hosts || len(e.hosts) > 0
		if k := e.path.firstLiteral(); k != "" {
			t.byFirst[k] = nil
		}
	}
	for _, e := range t.all {
		k := e.path.firstLiteral()
		if k == "" {
			t.other = append(t.other, e)
		}
		for key, list := range t.byFirst {
			if k == "" || k == key {
				t.byFirst[key] = append(list, e)
			}
		}
	}
	return t, nil
}

// Match returns the route for r, or nil when none matches.
func (t *Table) Match(r *http.Request) *config.Route {
	if t == nil || len(t.all) == 0 {
		return nil
	}
	path := requestPath(r)
	var host string
	var port int
	if t.hosts {
		host, port = requestHostPort(r)
	}
	for _, e := range t.candidates(path) {
		if e.matchMethod(r.Method) && e.matchHost(host, port) && (e.anyPath || e.path.Match(path)) &&
			e.matchHeaders(r) && e.matchQuery(r.URL.RawQuery) {
			return e.route
		}
	}
	return nil
}

// candidates narrows the routes by the request's first path segment.
func (t *Table) candidates(path string) []*entry {
	if len(t.byFirst) == 0 {
		return t.other // every route's, none indexed
	}
	seg := strings.TrimPrefix(path, "/")
	if i := strings.IndexByte(seg, '/'); i >= 0 {
		seg = seg[:i]
	}
	var buf [64]byte
	if len(seg) > len(buf) {
		return t.all
	}
	for i := 0; i < len(seg); i++ {
		c := seg[i]
		if c >= 0x80 {
			return t.all // Unicode case folding: leave it to EqualFold
		}
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		buf[i] = c
	}
	if list, ok := t.byFirst[string(buf[:len(seg)])]; ok {
		return list
	}
	return t.other
}

// compareEntries orders routes lower Order first, then most specific; see
// doc.go. ASP.NET's precedence numbers compare as digit strings where a
// missing digit is 0; since every digit is at least 1, that is
// slices.Compare.
func compareEntries(a, b *entry) int {
	none := func(n int) int { return min(1, 1-n) } // 0 when set, 1 when not
	return cmp.Or(
		cmp.Compare(a.route.Order, b.route.Order),
		slices.Compare(a.path.prec, b.path.prec),
		cmp.Compare(none(len(a.methods)), none(len(b.methods))),
		cmp.Compare(none(len(a.hosts)), none(len(b.hosts))),
		cmp.Compare(len(b.headers), len(a.headers)),
		cmp.Compare(len(b.query), len(a.query)),
		strings.Compare(a.id, b.id),
	)
}

func compile(id string, r *config.Route) (*entry, config.Errors) {
	var errs config.Errors
	at := "ReverseProxy.Routes." + id + ".Match."
	fail := func(field, format string, args ...any) {
		errs = append(errs, config.FieldError{Path: at + field, Message: fmt.Sprintf(format, args...)})
	}
	e := &entry{route: r, id: id}
	if r.RouteId != "" {
		e.id = r.RouteId
	}
	m := &r.Match
	var err error
	if e.path, err = ParseTemplate(m.Path); err != nil {
		fail("Path", "invalid route template %q: %v", m.Path, err)
	} else {
		e.anyPath = e.path.matchesAll()
	}
	for i, h := range m.Hosts {
		hp, err := parseHost(h)
		if err != nil {
			fail(fmt.Sprintf("Hosts[%d]", i), "%v", err)
		}
		e.hosts = append(e.hosts, hp)
	}
	for i, meth := range m.Methods {
		switch {
		case strings.TrimSpace(meth) == "":
			fail(fmt.Sprintf("Methods[%d]", i), "empty method")
		case slices.ContainsFunc(e.methods, func(x string) bool { return strings.EqualFold(x, meth) }):
			fail(fmt.Sprintf("Methods[%d]", i), "duplicate method %q", meth)
		}
		e.methods = append(e.methods, meth)
	}
	for i, h := range m.Headers {
		hm, err := compileHeader(h)
		if err != nil {
			fail(fmt.Sprintf("Headers[%d]", i)+err.field, "%s", err.msg)
		}
		e.headers = append(e.headers, hm)
	}
	for i, q := range m.QueryParameters {
		qm, err := compileQuery(q)
		if err != nil {
			fail(fmt.Sprintf("QueryParameters[%d]", i)+err.field, "%s", err.msg)
		}
		e.query = append(e.query, qm)
	}
	return e, errs
}

// fieldErr is a problem in one header or query matcher; field is the
// sub-path (".Mode") or empty.
type fieldErr struct{ field, msg string }

func (e *entry) matchMethod(m string) bool {
	if len(e.methods) == 0 {
		return true
	}
	for _, x := range e.methods {
		if strings.EqualFold(x, m) {
			return true
		}
	}
	return false
}

// requestPath is the path as ASP.NET's Request.Path has it: decoded except
// for %2F, which stays encoded so that it never splits a segment.
func requestPath(r *http.Request) string {
	u := r.URL
	if u.RawPath == "" {
		// Go sets RawPath only when Path's own encoding differs from the
		// request's, as it does for any %2F: Path is what ASP.NET sees.
		if u.Path == "" {
			return "/"
		}
		return u.Path
	}
	return decodeKeepSlash(u.EscapedPath())
}

func decodeKeepSlash(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '%' && i+2 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+3], 16, 8); err == nil && v != '/' {
				b.WriteByte(byte(v))
				i += 2
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
