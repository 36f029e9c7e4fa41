package route

import (
	"maps"
	"net/http/httptest"
	"testing"
)

func TestTemplateValues(t *testing.T) {
	cases := []struct {
		desc     string
		template string
		path     string
		want     map[string]string // nil: no match
	}{
		{"YARP's PathPattern example binds plugin and remainder", "/api/{plugin}/stuff/{**remainder}", "/api/v1/stuff/more/stuff", map[string]string{"plugin": "v1", "remainder": "more/stuff"}},
		{"names are keyed lower-case", "/api/{Plugin}", "/api/x", map[string]string{"plugin": "x"}},
		{"catch-all keeps a trailing slash as ASP.NET does", "/a/{**rest}", "/a/b/c/", map[string]string{"rest": "b/c/"}},
		{"empty catch-all has no value", "/a/{**rest}", "/a", map[string]string{}},
		{"empty catch-all takes its default", "/a/{**rest=x/y}", "/a", map[string]string{"rest": "x/y"}},
		{"omitted optional parameter has no value", "/a/{id?}", "/a", map[string]string{}},
		{"omitted parameter takes its default", "/{controller=Home}/{action=Index}", "/Shop", map[string]string{"controller": "Shop", "action": "Index"}},
		{"complex segment binds each part", "/f/{name}.{ext}", "/f/report.final.pdf", map[string]string{"name": "report.final", "ext": "pdf"}},
		{"complex segment without its optional tail", "/f/{name}.{ext?}", "/f/readme", map[string]string{"name": "readme"}},
		{"complex segment with a literal prefix", "/v{major}-{minor}", "/v2-7", map[string]string{"major": "2", "minor": "7"}},
		{"encoded slash stays encoded in the value", "/a/{id}", "/a/x%2Fy", map[string]string{"id": "x%2Fy"}},
		{"decoded characters are decoded in the value", "/a/{id}", "/a/x%20y", map[string]string{"id": "x y"}},
		{"plain prefix has no named value", "prefix:/api", "/api/x", map[string]string{}},
		{"constraint rejection is no match", "/a/{id:int}", "/a/x", nil},
		{"literal mismatch is no match", "/a/{id}", "/b/x", nil},
	}
	for _, c := range cases {
		t.Run(c.desc, func(t *testing.T) {
			tp, err := ParseTemplate(c.template)
			if err != nil {
				t.Fatal(err)
			}
			r := httptest.NewRequest("GET", "http://h"+c.path, nil)
			got, ok := tp.Values(r)
			if ok != tp.Match(requestPath(r)) {
				t.Fatalf("Values ok=%v disagrees with Match", ok)
			}
			if c.want == nil {
				if ok {
					t.Fatalf("Values = %v, want no match", got)
				}
				return
			}
			if !ok || !maps.Equal(got, c.want) {
				t.Fatalf("Values = %v, %v; want %v", got, ok, c.want)
			}
		})
	}
}

// FuzzValuesAgreeWithMatch: Values binds exactly when Match matches, so a
// transform never sees values of a route that did not match.
func FuzzValuesAgreeWithMatch(f *testing.F) {
	f.Add("/api/{plugin}/stuff/{**remainder}", "/api/v1/stuff/a/b")
	f.Add("/f/{name}.{ext?}", "/f/a.b")
	f.Add("/v{major}-{minor:int}", "/v1-2")
	f.Add("/{controller=Home}/{action=Index}/{id?}", "/")
	f.Fuzz(func(t *testing.T, template, path string) {
		tp, err := ParseTemplate(template)
		if err != nil {
			return
		}
		_, ok := tp.bind(path)
		if ok != tp.Match(path) {
			t.Fatalf("template %q path %q: bind %v, Match %v", template, path, ok, !ok)
		}
	})
}
