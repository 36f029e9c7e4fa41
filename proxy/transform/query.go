package transform

import (
	"net/url"
	"strings"
)

// query is the outgoing query string as YARP's QueryTransformContext holds
// it once a query transform touches it: parameters in order of first
// appearance, names compared case-insensitively, values decoded.
type query struct {
	params  []qparam
	changed bool
}

type qparam struct {
	key  string
	vals []string
}

func parseQuery(raw string) *query {
	q := &query{}
	for raw != "" {
		var kv string
		kv, raw, _ = strings.Cut(raw, "&")
		if kv == "" {
			continue
		}
		k, v, _ := strings.Cut(kv, "=")
		k, v = unescapeQuery(k), unescapeQuery(v)
		if i := q.find(k); i >= 0 {
			q.params[i].vals = append(q.params[i].vals, v)
			continue
		}
		q.params = append(q.params, qparam{key: k, vals: []string{v}})
	}
	return q
}

// unescapeQuery decodes as ASP.NET's query parser does: '+' is a space, a
// bad escape is kept as it is.
func unescapeQuery(s string) string {
	if !strings.ContainsAny(s, "%+") {
		return s
	}
	s = strings.ReplaceAll(s, "+", " ")
	if u, err := url.PathUnescape(s); err == nil {
		return u
	}
	return s
}

func (q *query) find(k string) int {
	for i := range q.params {
		if strings.EqualFold(q.params[i].key, k) {
			return i
		}
	}
	return -1
}

func (q *query) set(k, v string) {
	q.changed = true
	if i := q.find(k); i >= 0 {
		q.params[i].vals = []string{v}
		return
	}
	q.params = append(q.params, qparam{key: k, vals: []string{v}})
}

func (q *query) append(k, v string) {
	q.changed = true
	if i := q.find(k); i >= 0 {
		q.params[i].vals = append(q.params[i].vals, v)
		return
	}
	q.params = append(q.params, qparam{key: k, vals: []string{v}})
}

func (q *query) remove(k string) {
	if i := q.find(k); i >= 0 {
		q.params = append(q.params[:i], q.params[i+1:]...)
		q.changed = true
	}
}

// encode is ASP.NET's QueryBuilder: name=value pairs joined by '&', both
// encoded by .NET's UrlEncoder.Default. A parameter without a value is
// written "name=".
func (q *query) encode() string {
	var b strings.Builder
	for _, p := range q.params {
		for _, v := range p.vals {
			if b.Len() > 0 {
				b.WriteByte('&')
			}
			b.WriteString(escapeValue(p.key, false))
			b.WriteByte('=')
			b.WriteString(escapeValue(v, false))
		}
	}
	return b.String()
}
