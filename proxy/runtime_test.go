package proxy

import (
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/tether-proxy/tether/proxy/config"
)

// TestParseReportsEveryErrorAtOnce: an invalid destination address no
// longer hides the route-template and transform errors that only the data
// path's compiler finds.
func TestParseReportsEveryErrorAtOnce(t *testing.T) {
	js := `{"ReverseProxy": {
	  "Routes": {"r": {"ClusterId": "c", "Match": {"Path": "/api/{id", "Hosts": ["a b.example"]},
	                   "Transforms": [{"X-Forwarded": "Sometimes"}]}},
	  "Clusters": {"c": {"HealthCheck": {"Active": {"Path": "healthz"}},
	                     "Destinations": {"d": {"Address": "10.0.0.1:80"}}}}}}`
	_, _, err := config.Parse([]byte(js), "json")
	var es config.Errors
	if !errors.As(err, &es) {
		t.Fatalf("err = %v", err)
	}
	want := []string{
		"ReverseProxy.Clusters.c.Destinations.d.Address",
		"ReverseProxy.Routes.r.Match.Path",
		"ReverseProxy.Routes.r.Match.Hosts[0]",
		"ReverseProxy.Routes.r.Transforms[0].X-Forwarded",
		"ReverseProxy.Clusters.c.HealthCheck.Active.Path",
	}
	seen := map[string]int{}
	for _, e := range es {
		seen[e.Path]++
	}
	for _, p := range want {
		if seen[p] != 1 {
			t.Errorf("%s reported %d times, want once; errors:\n%v", p, seen[p], es)
		}
	}
}

// FuzzParseAndCompile feeds arbitrary config files through config.Parse,
// which runs the data path's compiler on them too: never a panic, and every
// error names its path (or says the file as a whole is not JSON).
func FuzzParseAndCompile(f *testing.F) {
	if app, err := os.ReadFile("config/testdata/appsettings.json"); err == nil {
		f.Add(app)
	}
	f.Add([]byte(simpleConfig(map[string]string{"d": "http://127.0.0.1:1"}, `"SessionAffinity": {"Enabled": true, "Policy": "Cookie", "AffinityKeyName": "k"}`,
		`"Transforms": [{"Forwarded": "for,by", "ForFormat": "IpAndPort"}, {"X-Forwarded": "Append", "HeaderPrefix": "X-A-"}]`, `"TrustedProxies": ["10.0.0.0/8"]`)))
	f.Add([]byte(`{"ReverseProxy": {"Routes": {"r": {"ClusterId": "C", "Match": {"Path": "/{**x}/{y}"}}}, "Clusters": {"c": {"Destinations": {"d": {"Address": "http://[::1"}}}}}}`))
	f.Add([]byte(`{"ReverseProxy": {"Routes": {"r": null}, "Clusters": {"c": null}}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		_, _, err := config.Parse(data, "json")
		if err == nil {
			return
		}
		var es config.Errors
		if !errors.As(err, &es) {
			t.Fatalf("not Errors: %v", err)
		}
		for _, e := range es {
			// A JSON path, or the file as a whole that does not parse.
			whole := e.Path == "" && strings.Contains(e.Message, "invalid JSON: ")
			if (e.Path == "" && !whole) || strings.Contains(e.Message, "could not check further") {
				t.Fatalf("bad error %v", e)
			}
		}
	})
}
