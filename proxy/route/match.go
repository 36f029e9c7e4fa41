package route

import (
	"fmt"
	"net/http"
	"net/textproto"
	"net/url"
	"slices"
	"strings"

	"github.com/tether-proxy/tether/proxy/config"
)

// hostPattern is one entry of Match.Hosts, as ASP.NET's HostMatcherPolicy
// reads it: "example.com", "*.example.com" (sub-domains only), "*" (any),
// each with an optional ":port".
type hostPattern struct {
	name     string // lower-case; for a wildcard the suffix ".example.com"
	wildcard bool
	any      bool
	port     int // 0: any port
}

func parseHost(s string) (hostPattern, error) {
	var h hostPattern
	name, port := splitHostPort(s)
	if port != "" {
		p, ok := parsePort(port)
		if !ok {
			return h, fmt.Errorf("invalid port %q in host %q", port, s)
		}
		h.port = p
	}
	name = strings.ToLower(name)
	switch {
	case name == "":
		return h, fmt.Errorf("empty host name in %q", s)
	case name == "*":
		h.any = true
	case strings.HasPrefix(name, "*."):
		h.wildcard, h.name = true, name[1:]
	default:
		h.name = name
	}
	if strings.Contains(h.name, "*") || (h.wildcard && len(h.name) < 2) {
		return h, fmt.Errorf("invalid host %q: a wildcard is only allowed as a leading \"*.\"", s)
	}
	return h, nil
}

// splitHostPort splits "host:port", "[v6]:port", "host" or "[v6]"; the
// brackets of an IPv6 literal are removed.
func splitHostPort(s string) (host, port string) {
	if strings.HasPrefix(s, "[") {
		end := strings.IndexByte(s, ']')
		if end < 0 {
			return s, ""
		}
		host, rest := s[1:end], s[end+1:]
		port, _ = strings.CutPrefix(rest, ":")
		return host, port
	}
	if strings.Count(s, ":") == 1 {
		host, port, _ = strings.Cut(s, ":")
		return host, port
	}
	return s, ""
}

// parsePort reads 1..65535 without allocating.
func parsePort(s string) (int, bool) {
	if s == "" || len(s) > 5 {
		return 0, false
	}
	n := 0
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, false
		}
		n = n*10 + int(s[i]-'0')
	}
	return n, n > 0 && n <= 65535
}

// requestHostPort is the request's host and port; without an explicit port
// the scheme's default is used, as ASP.NET does.
func requestHostPort(r *http.Request) (string, int) {
	h := r.Host
	if h == "" && r.URL != nil {
		h = r.URL.Host
	}
	host, port := splitHostPort(h)
	if p, ok := parsePort(port); ok {
		return host, p
	}
	if r.TLS != nil {
		return host, 443
	}
	return host, 80
}

func (e *entry) matchHost(host string, port int) bool {
	if len(e.hosts) == 0 {
		return true
	}
	for i := range e.hosts {
		h := &e.hosts[i]
		if h.port != 0 && h.port != port {
			continue
		}
		switch {
		case h.any,
			h.wildcard && hasSuffixFold(host, h.name),
			!h.wildcard && strings.EqualFold(host, h.name):
			return true
		}
	}
	return false
}

// Header and query parameter modes (YARP's names).
type mode int

const (
	modeExact mode = iota // ExactHeader / Exact
	modePrefix
	modeContains
	modeNotContains
	modeExists
	modeNotExists // headers only
)

var headerModes = map[string]mode{
	"":            modeExact,
	"exactheader": modeExact, "headerprefix": modePrefix, "contains": modeContains,
	"notcontains": modeNotContains, "exists": modeExists, "notexists": modeNotExists,
}

var queryModes = map[string]mode{
	"":      modeExact,
	"exact": modeExact, "prefix": modePrefix, "contains": modeContains,
	"notcontains": modeNotContains, "exists": modeExists,
}

// valueMatcher is what header and query matchers share.
type valueMatcher struct {
	name   string
	values []string
	mode   mode
	fold   bool // case-insensitive
}

func (m *valueMatcher) compile(name string, values []string, modeName string, caseSensitive bool, modes map[string]mode) *fieldErr {
	md, ok := modes[strings.ToLower(modeName)]
	switch {
	case !ok:
		var known []string
		for k := range modes {
			if k != "" {
				known = append(known, k)
			}
		}
		slices.Sort(known)
		return &fieldErr{".Mode", fmt.Sprintf("unknown mode %q (want one of %s, any case)", modeName, strings.Join(known, ", "))}
	case strings.TrimSpace(name) == "":
		return &fieldErr{".Name", "name is required"}
	case (md == modeExists || md == modeNotExists) && len(values) > 0:
		return &fieldErr{".Values", fmt.Sprintf("values must not be set with mode %s", modeName)}
	case md != modeExists && md != modeNotExists && len(values) == 0:
		return &fieldErr{".Values", "at least one value is required"}
	}
	*m = valueMatcher{name: name, values: slices.Clone(values), mode: md, fold: !caseSensitive}
	return nil
}

// test applies one expected value to one request value.
func (m *valueMatcher) test(got, want string) bool {
	switch m.mode {
	case modeExact:
		return got == want || m.fold && strings.EqualFold(got, want)
	case modePrefix:
		return strings.HasPrefix(got, want) || m.fold && hasPrefixFold(got, want)
	default:
		return strings.Contains(got, want) || m.fold && containsFold(got, want)
	}
}

func (m *valueMatcher) testAny(got string) bool {
	for _, want := range m.values {
		if m.test(got, want) {
			return true
		}
	}
	return false
}

func containsFold(s, sub string) bool {
	for i := 0; i+len(sub) <= len(s); i++ {
		if strings.EqualFold(s[i:i+len(sub)], sub) {
			return true
		}
	}
	return false
}

// headerMatcher is YARP's header match.
type headerMatcher struct {
	valueMatcher
	sep byte // splits ExactHeader/HeaderPrefix values: ',' (';' for Cookie)
}

func compileHeader(h config.RouteHeader) (headerMatcher, *fieldErr) {
	var m headerMatcher
	if err := m.compile(h.Name, h.Values, h.Mode, h.IsCaseSensitive, headerModes); err != nil {
		return m, err
	}
	m.name = textproto.CanonicalMIMEHeaderKey(strings.TrimSpace(h.Name))
	m.sep = ','
	if m.name == "Cookie" {
		m.sep = ';'
	}
	return m, nil
}

func (e *entry) matchHeaders(r *http.Request) bool {
	for i := range e.headers {
		if !e.headers[i].match(r) {
			return false
		}
	}
	return true
}

// match follows YARP's HeaderMatcherPolicy: a header that is absent or has
// one empty value matches only NotExists (absent) and nothing else.
func (m *headerMatcher) match(r *http.Request) bool {
	vals, present := r.Header[m.name]
	if m.name == "Host" { // Go keeps Host out of r.Header
		vals, present = nil, r.Host != ""
		if present {
			vals = []string{r.Host}
		}
	}
	present = present && len(vals) > 0
	if m.mode == modeNotExists {
		return !present
	}
	if !present || len(vals) == 1 && vals[0] == "" {
		return false
	}
	switch m.mode {
	case modeExists:
		return true
	case modeExact, modePrefix:
		for _, v := range vals {
			for v != "" {
				var item string
				item, v = nextItem(v, m.sep)
				if m.testAny(item) {
					return true
				}
			}
		}
		return false
	default:
		found := false
		for _, v := range vals {
			if m.testAny(v) {
				found = true
				break
			}
		}
		return found == (m.mode == modeContains)
	}
}

// nextItem cuts the first item of a separated header value, ignoring
// separators inside quotes and removing one pair of surrounding quotes.
func nextItem(s string, sep byte) (item, rest string) {
	s = strings.TrimLeft(s, " ")
	inQuote := false
	end := len(s)
	for i := 0; i < len(s); i++ {
		if s[i] == '"' {
			inQuote = !inQuote
		} else if s[i] == sep && !inQuote {
			end = i
			break
		}
	}
	item = s[:end]
	if end < len(s) {
		rest = s[end+1:]
	}
	if len(item) > 1 && item[0] == '"' && item[len(item)-1] == '"' {
		item = item[1 : len(item)-1]
	}
	return item, rest
}

// queryMatcher is YARP's query parameter match; names compare
// case-insensitively, as ASP.NET's query collection does.
type queryMatcher struct{ valueMatcher }

func compileQuery(q config.RouteQueryParameter) (queryMatcher, *fieldErr) {
	var m queryMatcher
	if err := m.compile(q.Name, q.Values, q.Mode, q.IsCaseSensitive, queryModes); err != nil {
		return m, err
	}
	for _, v := range q.Values {
		if v == "" {
			return m, &fieldErr{".Values", "values must not be empty"}
		}
	}
	return m, nil
}

func (e *entry) matchQuery(rawQuery string) bool {
	for i := range e.query {
		if !e.query[i].match(rawQuery) {
			return false
		}
	}
	return true
}

// match follows YARP's QueryParameterMatcherPolicy: a parameter counts as
// present unless it is absent or appears once with an empty value;
// NotContains also matches an absent parameter.
func (m *queryMatcher) match(rawQuery string) bool {
	n, firstEmpty, found := 0, false, false
	for rawQuery != "" {
		var kv string
		kv, rawQuery, _ = strings.Cut(rawQuery, "&")
		k, v, _ := strings.Cut(kv, "=")
		if !strings.EqualFold(unescapeQuery(k), m.name) {
			continue
		}
		v = unescapeQuery(v)
		if n++; n == 1 {
			firstEmpty = v == ""
		}
		if !found && m.mode != modeExists && m.testAny(v) {
			found = true
		}
	}
	present := n > 1 || n == 1 && !firstEmpty
	switch m.mode {
	case modeExists:
		return present
	case modeNotContains:
		return !present || !found
	default:
		return present && found
	}
}

// unescapeQuery decodes only when needed, so plain queries cost nothing.
func unescapeQuery(s string) string {
	if !strings.ContainsAny(s, "%+") {
		return s
	}
	if u, err := url.QueryUnescape(s); err == nil {
		return u
	}
	return s
}
