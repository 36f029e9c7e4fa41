package h1wire

import (
	"net/url"
	"reflect"
	"testing"
)

// TestPlainRequestURI: a target read without url.Parse gives
// the URL url.ParseRequestURI gives; any other is left to it.
func TestPlainRequestURI(t *testing.T) {
	for _, uri := range []string{
		"/", "/x", "/a/b-c_d.e~f", "/a?b=c&d=e", "/a?", "/a??", "/a?b c", "/a?b\tc", "/a?\x7f",
		"/a%20b", "/a b", "//host/x", "/a#frag", "*", "", "x", "/a?é", "/a;b=c,d", "/$&+:@=",
	} {
		var u url.URL
		plain := PlainRequestURI(uri, &u)
		want, err := url.ParseRequestURI(uri)
		if !plain {
			continue
		}
		if err != nil {
			t.Errorf("%q: read as plain, url.ParseRequestURI: %v", uri, err)
		} else if !reflect.DeepEqual(&u, want) {
			t.Errorf("%q: %#v, url.ParseRequestURI %#v", uri, u, *want)
		}
	}
}

func FuzzPlainRequestURI(f *testing.F) {
	f.Add("/a?b=c")
	f.Add("/a?")
	f.Fuzz(func(t *testing.T, uri string) {
		var u url.URL
		if !PlainRequestURI(uri, &u) {
			return
		}
		want, err := url.ParseRequestURI(uri)
		if err != nil {
			t.Fatalf("%q: read as plain, url.ParseRequestURI: %v", uri, err)
		}
		if !reflect.DeepEqual(&u, want) {
			t.Fatalf("%q: %#v, url.ParseRequestURI %#v", uri, u, *want)
		}
	})
}

// Every byte plainPath takes is one url.URL.EscapedPath leaves as it is,
// and every other is escaped or makes the path "*": AppendRequestHead
// writes a plain path without EscapedPath's look.
func TestPlainPathIsItsEscapedPath(t *testing.T) {
	for c := 0; c < 256; c++ {
		p := "/a" + string([]byte{byte(c)}) + "b"
		u := &url.URL{Path: p}
		if plain, same := plainPath(p), u.EscapedPath() == p; plain && !same {
			t.Errorf("plainPath(%q), but EscapedPath gives %q", p, u.EscapedPath())
		}
	}
	if u := (&url.URL{Path: "*"}); plainPath("*") {
		t.Errorf("plainPath(\"*\"), EscapedPath gives %q", u.EscapedPath())
	}
}
