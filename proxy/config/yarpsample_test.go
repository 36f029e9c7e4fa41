package config

import (
	"crypto/tls"
	"slices"
	"strings"
	"testing"
)

// YARP's own sample configuration, unchanged: samples/ReverseProxy.Config.Sample/
// appsettings.json of dotnet/yarp, at 32a606df (2025-03-19, the current one)
// and at 6cff486f (2025-02-14, with the misspelt "Authorization Policy",
// "MetaData" and "SSLProtocols" keys YARP's binder reads or ignores).
func TestYARPSampleConfigLoadsWithWarnings(t *testing.T) {
	noEnv := LoadOptions{LookupEnv: func(string) (string, bool) { return "", false }}
	for _, tc := range []struct {
		file  string
		warns []string // warnings expected, among others
	}{
		{"testdata/yarp-sample-appsettings.json", []string{
			"Urls https://localhost:5001: no certificate",
			"ReverseProxy.Clusters.allClusterProps.HealthCheck.AvailableDestinationsPolicy: accepted but not implemented by tether",
			"ReverseProxy.Clusters.allClusterProps.HttpClient.WebProxy: accepted but not implemented by tether",
			"ReverseProxy.Clusters.allClusterProps.HttpClient.RequestHeaderEncoding: accepted but not implemented by tether",
		}},
		{"testdata/yarp-sample-appsettings-2025-02.json", []string{
			"ReverseProxy.Routes.allRouteProps.Authorization Policy: unknown key; did you mean AuthorizationPolicy?",
		}},
	} {
		t.Run(tc.file, func(t *testing.T) {
			c, warns, err := LoadWith(tc.file, noEnv)
			if err != nil {
				t.Fatalf("YARP's sample does not load:\n%v", err)
			}
			for _, w := range warns {
				if strings.HasPrefix(w, "Logging") || strings.HasPrefix(w, "AllowedHosts") {
					t.Errorf("ASP.NET's boilerplate warned: %s", w)
				}
			}
			for _, w := range tc.warns {
				if !slices.ContainsFunc(warns, func(got string) bool { return strings.HasPrefix(got, w) }) {
					t.Errorf("missing warning %q in:\n%s", w, strings.Join(warns, "\n"))
				}
			}
			if len(c.Listeners) != 2 || c.Listeners[0].Address != "localhost:5000" || !c.Listeners[1].SelfSigned {
				t.Errorf("listeners from Urls: %+v", c.Listeners)
			}
			r := c.ReverseProxy.Routes["allRouteProps"]
			if r.CorsPolicy != "Disable" || r.Match.Headers[0].Mode != "ExactHeader" || len(r.Transforms) != 1 {
				t.Errorf("route allRouteProps: %+v", r)
			}
			cl := c.ReverseProxy.Clusters["allClusterProps"]
			if cl.HttpRequest.Version != Version20 || cl.HttpRequest.VersionPolicy != VersionOrLower ||
				cl.HttpClient.SslProtocols != (TLSVersions{Min: tls.VersionTLS13, Max: tls.VersionTLS13, Set: true}) ||
				cl.HttpClient.MaxConnectionsPerServer != 1024 || !cl.SessionAffinity.Enabled {
				t.Errorf("cluster allClusterProps: %+v", cl)
			}
		})
	}
}
