package h1wire

import (
	"net/url"
	"strings"
)

// PlainRequestURI fills u as url.ParseRequestURI would from an
// origin-form target ("/" first) whose path needs no escaping (letters,
// digits and "-._~/$&+,:;=@") and whose query holds printable ASCII only,
// without its allocation; false for any other target, which
// url.ParseRequestURI then reads. Both servers use it: HTTP/1.1's
// request-target and HTTP/2's :path.
func PlainRequestURI(uri string, u *url.URL) bool {
	if uri == "" || uri[0] != '/' {
		return false
	}
	path, query, hasQuery := strings.Cut(uri, "?")
	if !plainPath(path) {
		return false
	}
	for i := 0; i < len(query); i++ {
		if b := query[i]; b <= ' ' || b >= 0x7f {
			return false
		}
	}
	*u = url.URL{Path: path, RawQuery: query}
	if hasQuery && query == "" {
		u.ForceQuery = true // "/a?": as url.parse, a lone "?" at the end
	}
	return true
}

// plainPath: path's every byte is one PlainRequestURI takes in a path,
// none of which url.URL.EscapedPath escapes, so that without a RawPath it
// returns path itself (TestPlainPathIsItsEscapedPath).
func plainPath(path string) bool {
	for i := 0; i < len(path); i++ {
		if !plainPathByte[path[i]] {
			return false
		}
	}
	return true
}

var plainPathByte = func() (t [256]bool) {
	for c := 'a'; c <= 'z'; c++ {
		t[c], t[c-'a'+'A'] = true, true
	}
	for c := '0'; c <= '9'; c++ {
		t[c] = true
	}
	for _, c := range "-._~/$&+,:;=@" {
		t[c] = true
	}
	return t
}()
