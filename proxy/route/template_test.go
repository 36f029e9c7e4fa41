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
		{"int constraint allows .NET white space and sign", "/items/{id:int}", []string{"/items/ 7 ", "/items/+7", "/items/-2147483648", "/items/2147483647"}, []string{"/items/2147483648", "/items/- 7", "/items/7a", "/items/+"}},
		{"long constraint range", "/items/{id:long}", []string{"/items/-9223372036854775808", "/items/9223372036854775807"}, []string{"/items/9223372036854775808", "/items/1e3"}},
		{"bool constraint allows white space", "/flags/{on:bool}", []string{"/flags/ True "}, []string{"/flags/1", "/flags/truex"}},
		{"guid constraint with parentheses and white space", "/g/{id:guid}", []string{"/g/(0f8fad5b-d9cb-469f-a165-70867728950e)", "/g/ 0f8fad5bd9cb469fa16570867728950e "}, []string{"/g/(0f8fad5b-d9cb-469f-a165-70867728950e}"}},
		{"decimal constraint", "/p/{v:decimal}", []string{"/p/1.5", "/p/-0.25", "/p/1,000.5", "/p/5-", "/p/.5", "/p/79228162514264337593543950335"}, []string{"/p/1e3", "/p/abc", "/p/.", "/p/,1", "/p/79228162514264337593543950336", "/p/NaN"}},
		{"double constraint", "/p/{v:double}", []string{"/p/1.5", "/p/-1e-3", "/p/1E400", "/p/Infinity", "/p/-infinity", "/p/NaN", "/p/1,000"}, []string{"/p/1e", "/p/abc", "/p/0x10", "/p/5-"}},
		{"float constraint", "/p/{v:float}", []string{"/p/3.25", "/p/+2e5"}, []string{"/p/3.2.5", "/p/e5"}},
		{"datetime constraint", "/d/{**v:datetime}", []string{"/d/2026-01-02", "/d/2026-01-02T03:04:05Z", "/d/2026-01-02T03:04:05.123+01:00", "/d/2026-01-02 03:04", "/d/1/2/2026", "/d/12/31/2026 23:59:59", "/d/2024-02-29"}, []string{"/d/2026-13-01", "/d/2026-02-29", "/d/2026-01-02T24:00", "/d/2026-01-02T03:04:05+1", "/d/yesterday", "/d/2026", "/d/20260102"}},
		{"min constraint", "/a/{id:min(10)}", []string{"/a/10", "/a/999"}, []string{"/a/1", "/a/9", "/a/x"}},
		{"max constraint", "/a/{id:max(10)}", []string{"/a/10", "/a/-5"}, []string{"/a/11", "/a/x"}},
		{"range constraint", "/a/{id:range(1, 3)}", []string{"/a/1", "/a/3"}, []string{"/a/0", "/a/4", "/a/x"}},
		{"range constraint uses long", "/a/{id:range(-9223372036854775808,9223372036854775807)}", []string{"/a/-9223372036854775808"}, []string{"/a/9223372036854775808"}},
		{"length constraint", "/a/{s:length(3)}", []string{"/a/abc", "/a/%2F"}, []string{"/a/ab", "/a/abcd", "/a/%2F1"}},
		{"length range constraint", "/a/{s:length(2,3)}", []string{"/a/ab", "/a/abc"}, []string{"/a/a", "/a/abcd"}},
		{"length counts UTF-16 code units", "/a/{s:length(2)}", []string{"/a/\u00e9\u00e9", "/a/\U0001F600"}, []string{"/a/\u00e9", "/a/\U0001F600x"}},
		{"minlength constraint", "/a/{s:minlength(2)}", []string{"/a/ab", "/a/abc"}, []string{"/a/a"}},
		{"maxlength constraint", "/a/{s:maxlength(2)}", []string{"/a/a", "/a/ab"}, []string{"/a/abc"}},
		{"regex constraint is unanchored and case-insensitive", "/a/{s:regex(ab)}", []string{"/a/xABy", "/a/ab"}, []string{"/a/ba"}},
		{"regex constraint anchored by its pattern", "/a/{s:regex(^\\d+$)}", []string{"/a/123"}, []string{"/a/12x", "/a/x12"}},
		{"regex constraint with escaped braces", "/a/{id:regex(^\\d{{3}}$)}", []string{"/a/123"}, []string{"/a/12", "/a/1234", "/a/x"}},
		{"regex constraint with ':' '=' and parentheses", "/a/{s:regex(^(a|b)x:=c$)}", []string{"/a/bx:=c"}, []string{"/a/cx:=c"}},
		{"regex constraint argument keeps commas", "/a/{s:regex(^a{{1,2}}$)}", []string{"/a/aa"}, []string{"/a/aaa"}},
		{"file constraint", "/f/{**p:file}", []string{"/f/a.txt", "/f/x/a.b.c", "/f/.x"}, []string{"/f", "/f/a", "/f/a.d/b", "/f/a..", "/f/a.txt/"}},
		{"nonfile constraint", "/f/{**p:nonfile}", []string{"/f", "/f/a", "/f/a.d/b"}, []string{"/f/a.txt", "/f/x/a.b"}},
		{"several constraints all apply", "/a/{id:int:min(1):max(5)}", []string{"/a/1", "/a/5"}, []string{"/a/0", "/a/6", "/a/x"}},
		{"constraint names are case-insensitive", "/a/{id:INT:Min(2)}", []string{"/a/2"}, []string{"/a/1", "/a/x"}},
		{"constraints apply in complex segments", "/{name:alpha}.{ext:length(3)}", []string{"/abc.txt"}, []string{"/ab1.txt", "/abc.md"}},
		{"required catch-all needs a remainder", "/r/{**rest:required}", []string{"/r/a", "/r/a/b"}, []string{"/r", "/r/"}},
		{"constrained catch-all without a remainder does not match", "/r/{**rest:int}", []string{"/r/5"}, []string{"/r", "/r/x"}},
		{"constrained default is checked when absent", "/a/{id:int=abc}", []string{"/a/5"}, []string{"/a", "/a/x"}},
		{"optional constrained parameter may be absent", "/a/{id:min(5)?}", []string{"/a", "/a/5"}, []string{"/a/4"}},
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
		{"unknown constraint with arguments", "/{id:nope(1)}", "unknown constraint"},
		{"min needs an integer", "/{id:min(x)}", "is not an integer"},
		{"min needs an argument", "/{id:min}", "needs 1 integer"},
		{"max out of long range", "/{id:max(9223372036854775808)}", "is not an integer"},
		{"range needs two arguments", "/{id:range(1)}", "needs 2 integer"},
		{"range min above max", "/{id:range(5,1)}", "greater than max"},
		{"length with three arguments", "/{id:length(1,2,3)}", "needs 2 integer"},
		{"negative length", "/{id:length(-1)}", "lengths must be"},
		{"length min above max", "/{id:length(3,2)}", "lengths must be"},
		{"minlength needs an integer", "/{id:minlength(a)}", "is not an integer"},
		{"maxlength negative", "/{id:maxlength(-2)}", "lengths must be"},
		{"regex with a bad pattern", "/{id:regex(a(b)}", "invalid pattern"},
		{"regex without a pattern", "/{id:regex}", "needs a pattern"},
		{"regex with unclosed arguments", "/{id:regex(abc}", "missing ')'"},
		{"simple constraint with arguments", "/{id:int(5)}", "takes no arguments"},
		{"unescaped brace inside a parameter", "/{id:regex(a{2})}", "must be escaped"},
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
		"/{x:regex(^a{{2}}$)}", "/{id:int:min(1)}", "/{id:range(1,5)=3}",
		"/{s:length(2,4)}", "/{x:regex(^(a|b):c$):maxlength(9)}", "/{**rest:required}", "/{**p:nonfile}",
		"/{d:datetime}/{n:decimal}/{f:float}", "/{x:regex(a:)b:int}", "/{x:min(1}", "prefix:/a", "/a/*", "{", "}", "{{}}", "/{*}", "~/x"} {
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
	f.Add("/{id:int:min(1)}", "/5")
	f.Add("/{id:range(-3,3)}", "/-4")
	f.Add("/{s:regex(^\\d+$)}", "/123")
	f.Add("/{s:length(1,2)}", "/\U0001F600")
	f.Add("/{d:datetime}", "/2026-01-02T03:04:05.5+01:00")
	f.Add("/{n:double}", "/ -1,000.5e-3 ")
	f.Add("/{n:decimal}", "/79228162514264337593543950336")
	f.Add("/{**rest:required}", "/")
	f.Add("/{**p:file}", "/a/b.c")
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
		// A template taken to match every path does, and so does a
		// table of it alone (not indexed, no host read).
		if tpl.matchesAll() && !tpl.Match(path) {
			t.Fatalf("%q matchesAll, but not %q", template, path)
		}
		alone, errs := NewTable(map[string]*config.Route{"fuzz": {Match: config.RouteMatch{Path: template}}})
		if errs != nil {
			t.Fatalf("NewTable: %v", errs)
		}
		if got := alone.Match(r) != nil; got != tpl.Match(path) {
			t.Fatalf("alone: Match(%q) = %v, want %v", path, got, !got)
		}
	})
}

// Lone catch-alls without constraints match every path; anything else is
// walked.
func TestMatchesAll(t *testing.T) {
	for tmpl, want := range map[string]bool{
		"": true, "{**catch-all}": true, "/{*rest}": true, "/{**rest:required}": false, "/{**p=x}": true,
		"/{**p:int=5}": false, "/a/{**rest}": false, "/{x}": false, "prefix:/": true, "prefix:/a": false, "/{a}.{**b}": false,
	} {
		tpl, err := ParseTemplate(tmpl)
		if err != nil {
			continue // not a template this parser takes
		}
		if got := tpl.matchesAll(); got != want {
			t.Errorf("%q: matchesAll %v, want %v", tmpl, got, want)
		}
		if tpl.matchesAll() {
			for _, path := range []string{"/", "", "/a", "/a/", "//", "/a/b/c.d", "/%2F"} {
				if !tpl.Match(path) {
					t.Errorf("%q matchesAll, but not %q", tmpl, path)
				}
			}
		}
	}
}
