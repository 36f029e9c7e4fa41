package route

import (
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/tether-proxy/tether/proxy/config"
)

func TestTemplateMatch(t *testing.T) {
	cases := []struct {
		desc     string
		template string
		match    []string
		noMatch  []string
	}{
		{"empty path matches everything", "", []string{"/", "", "/a", "/a/b/c"}, nil},
		{"root template matches only the root", "/", []string{"/", ""}, []string{"/a"}},
		{"literal segments are case-insensitive", "/api/Users", []string{"/api/users", "/API/USERS", "/api/users/"}, []string{"/api", "/api/users/1", "/api/user"}},
		{"template without leading slash", "api/{id}", []string{"/api/1"}, []string{"/api"}},
		{"template with ~/ prefix", "~/api", []string{"/api"}, []string{"/"}},
		{"parameter matches one non-empty segment", "/api/{id}", []string{"/api/1", "/api/abc/"}, []string{"/api", "/api/", "/api/1/2", "/api//"}},
		{"optional parameter may be omitted", "/api/{id?}", []string{"/api", "/api/", "/api/7"}, []string{"/api/7/8"}},
		{"parameter with default may be omitted", "/{controller=Home}/{action=Index}", []string{"/", "/x", "/x/y"}, []string{"/x/y/z"}},
		{"catch-all {*x} matches the rest", "/files/{*path}", []string{"/files", "/files/", "/files/a", "/files/a/b/c"}, []string{"/file", "/other/a"}},
		{"catch-all {**x} matches the rest", "{**catch-all}", []string{"/", "/a/b"}, nil},
		{"catch-all after parameter", "/{tenant}/{**rest}", []string{"/t", "/t/a/b"}, []string{"/"}},
		{"int constraint", "/items/{id:int}", []string{"/items/42", "/items/-3"}, []string{"/items/x", "/items/99999999999"}},
		{"long constraint", "/items/{id:long}", []string{"/items/99999999999"}, []string{"/items/1.5"}},
		{"bool constraint", "/flags/{on:bool}", []string{"/flags/true", "/flags/FALSE"}, []string{"/flags/yes"}},
		{"alpha constraint", "/n/{name:alpha}", []string{"/n/abcXYZ"}, []string{"/n/ab1"}},
		{"guid constraint", "/g/{id:guid}", []string{"/g/0f8fad5b-d9cb-469f-a165-70867728950e", "/g/0f8fad5bd9cb469fa16570867728950e", "/g/{0f8fad5b-d9cb-469f-a165-70867728950e}"}, []string{"/g/0f8fad5b-d9cb-469f-a165-70867728950", "/g/zf8fad5b-d9cb-469f-a165-70867728950e"}},
		{"optional constrained parameter", "/a/{id:int?}", []string{"/a", "/a/5"}, []string{"/a/x"}},
		{"constraint with argument is accepted", "/a/{id:min(3)}", []string{"/a/1"}, nil},
		{"regex constraint with escaped braces", "/a/{id:regex(^\\d{{3}}$)}", []string{"/a/x"}, nil},
		{"complex segment", "/{file}.{ext}", []string{"/a.txt", "/a.b.txt"}, []string{"/a", "/.txt", "/a."}},
		{"complex segment with optional extension", "/{file}.{ext?}", []string{"/a.txt", "/a"}, []string{"/", "/a."}},
		{"complex segment with leading literal", "/v{version}", []string{"/v1", "/V2"}, []string{"/v", "/x1", "/vav1"}},
		{"escaped braces in literal", "/a{{b}}", []string{"/a{b}"}, []string{"/ab"}},
		{"percent-encoded slash stays in its segment", "/a/{id}", []string{"/a/x%2Fy"}, []string{"/a/x/y"}},
		{"plain prefix with prefix:", "prefix:/api", []string{"/api", "/API/x/y"}, []string{"/apix", "/"}},
		{"plain prefix with /*", "/static/*", []string{"/static", "/static/css/a.css"}, []string{"/stat"}},
		{"root prefix matches everything", "prefix:/", []string{"/", "/a"}, nil},
	}
	for _, tc := range cases {
		t.Run(tc.desc, func(t *testing.T) {
			tpl, err := ParseTemplate(tc.template)
			if err != nil {
				t.Fatalf("ParseTemplate(%q): %v", tc.template, err)
			}
			for _, p := range tc.match {
				if !tpl.Match(p) {
					t.Errorf("%q should match %q", tc.template, p)
				}
			}
			for _, p := range tc.noMatch {
				if tpl.Match(p) {
					t.Errorf("%q should not match %q", tc.template, p)
				}
			}
		})
	}
}

func TestParseTemplateErrors(t *testing.T) {
	cases := []struct {
		desc, template, want string
	}{
		{"unbalanced open brace", "/a/{id", "unbalanced '{'"},
		{"unbalanced close brace", "/a/id}", "unbalanced '}'"},
		{"empty parameter name", "/a/{}", "name must be non-empty"},
		{"empty catch-all name", "/{**}", "name must be non-empty"},
		{"catch-all not last", "/{**rest}/a", "catch-all parameter must be the last"},
		{"catch-all in complex segment", "/a{*rest}", "catch-all parameter must be alone"},
		{"duplicate parameter names", "/{id}/{ID}", "appears more than once"},
		{"consecutive separators", "/a//b", "twice in a row"},
		{"consecutive trailing separators", "/a//", "twice in a row"},
		{"consecutive parameters", "/{a}{b}", "two consecutive parameters"},
		{"optional catch-all", "/{*rest?}", "catch-all cannot be optional"},
		{"optional with default", "/{id?=3}", "name must be non-empty"},
		{"optional parameter with default", "/{id=3?}", "cannot have a default"},
		{"unknown constraint", "/{id:nope}", "unknown constraint"},
		{"question mark in literal", "/a?b", "cannot contain '?'"},
		{"tilde without slash", "~a", "\"~/\""},
		{"braces in a plain prefix", "prefix:/a/{id}", "plain prefix cannot contain"},
		{"optional not last in complex segment", "/{a?}.{b}", "must be last"},
	}
	for _, tc := range cases {
		t.Run(tc.desc, func(t *testing.T) {
			_, err := ParseTemplate(tc.template)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("ParseTemplate(%q) = %v, want error containing %q", tc.template, err, tc.want)
			}
		})
	}
}

func FuzzParseTemplate(f *testing.F) {
	for _, s := range []string{"", "/", "/api/{id}", "{**catch-all}", "/{a}.{b?}", "/{id:int=5}",
		"/{x:regex(^a{{2}}$)}", "prefix:/a", "/a/*", "{", "}", "{{}}", "/{*}", "~/x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		tpl, err := ParseTemplate(s)
		if err == nil {
			tpl.Match(s)
			tpl.Match("/")
		}
	})
}

func FuzzMatch(f *testing.F) {
	f.Add("/api/{id}", "/api/1")
	f.Add("/{a}.{b?}", "/x.y.z")
	f.Add("/v{n}-{m}", "/v-1-2-")
	f.Add("{**rest}", "//")
	f.Add("/{id:guid}", "/{0f8fad5b-d9cb-469f-a165-70867728950e}")
	f.Fuzz(func(t *testing.T, template, path string) {
		tpl, err := ParseTemplate(template)
		if err != nil {
			return
		}
		tpl.Match(path)
		// The table's first-segment index must not change the answer.
		tbl, errs := NewTable(map[string]*config.Route{
			"fuzz": {Match: config.RouteMatch{Path: template}},
			"lit":  {Match: config.RouteMatch{Path: "/a/b"}},
			"par":  {Match: config.RouteMatch{Path: "/{x}/b"}},
		})
		if errs != nil {
			t.Fatalf("NewTable: %v", errs)
		}
		var want *config.Route
		for _, e := range tbl.all {
			if e.path.Match(path) {
				want = e.route
				break
			}
		}
		r := httptest.NewRequest("GET", "/", nil)
		r.URL.Path = path
		if got := tbl.Match(r); got != want {
			t.Fatalf("Match(%q) = %v, want %v", path, got, want)
		}
	})
}
