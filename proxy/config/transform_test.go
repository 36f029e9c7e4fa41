package config

import (
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// TestYARPTransformsAreAccepted: every transform of YARP's transforms
// documentation (except X-Forwarded and Forwarded, which the forwarded
// headers code owns) loads without a warning, with its keys in canonical
// spelling whatever the case in the file.
func TestYARPTransformsAreAccepted(t *testing.T) {
	cases := []struct {
		desc string
		in   obj
		want map[string]string
	}{
		{"PathPattern", obj{"pathpattern": "/my/{plugin}/api/{**remainder}"}, map[string]string{"PathPattern": "/my/{plugin}/api/{**remainder}"}},
		{"QueryValueParameter", obj{"QueryValueParameter": "foo", "append": "bar"}, map[string]string{"QueryValueParameter": "foo", "Append": "bar"}},
		{"QueryValueParameter with an empty value", obj{"QueryValueParameter": "foo", "Set": ""}, map[string]string{"QueryValueParameter": "foo", "Set": ""}},
		{"QueryRouteParameter", obj{"QueryRouteParameter": "foo", "Set": "remainder"}, map[string]string{"QueryRouteParameter": "foo", "Set": "remainder"}},
		{"QueryRemoveParameter", obj{"QueryRemoveParameter": "foo"}, map[string]string{"QueryRemoveParameter": "foo"}},
		{"HttpMethodChange", obj{"HttpMethodChange": "PUT", "Set": "POST"}, map[string]string{"HttpMethodChange": "PUT", "Set": "POST"}},
		{"RequestHeaderRouteValue", obj{"RequestHeaderRouteValue": "X-Plugin", "Set": "plugin"}, map[string]string{"RequestHeaderRouteValue": "X-Plugin", "Set": "plugin"}},
		{"RequestHeadersAllowed", obj{"RequestHeadersAllowed": "Header1;header2"}, map[string]string{"RequestHeadersAllowed": "Header1;header2"}},
		{"RequestHeadersAllowed empty", obj{"RequestHeadersAllowed": ""}, map[string]string{"RequestHeadersAllowed": ""}},
		{"ClientCert", obj{"ClientCert": "X-Client-Cert"}, map[string]string{"ClientCert": "X-Client-Cert"}},
		{"ResponseHeadersCopy", obj{"ResponseHeadersCopy": "FALSE"}, map[string]string{"ResponseHeadersCopy": "false"}},
		{"ResponseHeadersAllowed", obj{"ResponseHeadersAllowed": "Content-Type"}, map[string]string{"ResponseHeadersAllowed": "Content-Type"}},
		{"ResponseTrailer", obj{"ResponseTrailer": "X-T", "Append": "v", "When": "always"}, map[string]string{"ResponseTrailer": "X-T", "Append": "v", "When": "Always"}},
		{"ResponseTrailerRemove", obj{"ResponseTrailerRemove": "X-T", "When": "Failure"}, map[string]string{"ResponseTrailerRemove": "X-T", "When": "Failure"}},
		{"ResponseTrailersCopy", obj{"ResponseTrailersCopy": "true"}, map[string]string{"ResponseTrailersCopy": "true"}},
		{"ResponseTrailersAllowed", obj{"ResponseTrailersAllowed": "grpc-status;grpc-message"}, map[string]string{"ResponseTrailersAllowed": "grpc-status;grpc-message"}},
	}
	for _, c := range cases {
		t.Run(c.desc, func(t *testing.T) {
			cfg := baseConfig()
			set(cfg, "ReverseProxy.Routes.r1.Transforms", []any{c.in})
			got, warns, err := Parse(mustJSON(t, cfg), "json")
			if err != nil {
				t.Fatal(err)
			}
			for _, w := range warns {
				if strings.Contains(w, "Transforms") && !strings.Contains(w, "ClientCert: no HTTPS listener asks") {
					t.Errorf("warning %q", w)
				}
			}
			if tf := got.ReverseProxy.Routes["r1"].Transforms[0]; !reflect.DeepEqual(tf, c.want) {
				t.Errorf("transform = %v, want %v", tf, c.want)
			}
		})
	}
}

func TestYARPTransformErrors(t *testing.T) {
	cases := []struct {
		desc, path, msg string
		in              obj
	}{
		{"QueryValueParameter needs Set or Append", "ReverseProxy.Routes.r1.Transforms[0]", "exactly one of Set, Append", obj{"QueryValueParameter": "foo"}},
		{"HttpMethodChange needs Set", "ReverseProxy.Routes.r1.Transforms[0]", "exactly one of Set", obj{"HttpMethodChange": "PUT"}},
		{"ResponseTrailer rejects an unknown key", "ReverseProxy.Routes.r1.Transforms[0].Bogus", "unknown key for transform ResponseTrailer", obj{"ResponseTrailer": "X", "Set": "v", "Bogus": "1"}},
		{"ResponseHeadersCopy wants a boolean", "ReverseProxy.Routes.r1.Transforms[0].ResponseHeadersCopy", "want true or false", obj{"ResponseHeadersCopy": "maybe"}},
		{"PathPattern needs a value", "ReverseProxy.Routes.r1.Transforms[0].PathPattern", "value required", obj{"PathPattern": ""}},
	}
	for _, c := range cases {
		t.Run(c.desc, func(t *testing.T) {
			cfg := baseConfig()
			set(cfg, "ReverseProxy.Routes.r1.Transforms", []any{c.in})
			_, _, err := Parse(mustJSON(t, cfg), "json")
			wantFieldError(t, err, c.path, c.msg)
		})
	}
}

// TestClientCertWarnsWithoutCertificateListeners: the transform works, but
// only an HTTPS listener with ClientCertificateMode AllowCertificate asks
// clients for a certificate; without one the operator is told the header
// will only ever be removed.
func TestClientCertWarnsWithoutCertificateListeners(t *testing.T) {
	dir := certFiles(t)
	pem := `{"Path": "` + filepath.Join(dir, "cert.pem") + `", "KeyPath": "` + filepath.Join(dir, "key.pem") + `"}`
	want := "ReverseProxy.Routes.r1.Transforms[0].ClientCert: no HTTPS listener asks clients for a certificate " +
		"(Kestrel ClientCertificateMode AllowCertificate), so this transform only removes the header"
	cases := []struct {
		desc, top string
		warn      bool
	}{
		{"no HTTPS listener: warned", `"Urls": "http://127.0.0.1:1"`, true},
		{"HTTPS without AllowCertificate: warned", `"Kestrel": {"Endpoints": {"A": {"Url": "https://127.0.0.1:1", "Certificate": ` + pem + `}}}`, true},
		{"HTTPS with AllowCertificate: no warning", `"Kestrel": {"Endpoints": {"A": {"Url": "https://127.0.0.1:1", "ClientCertificateMode": "AllowCertificate", "Certificate": ` + pem + `}}}`, false},
	}
	for _, c := range cases {
		t.Run(c.desc, func(t *testing.T) {
			js := `{` + c.top + `, "ReverseProxy": {
			  "Routes": {"r1": {"ClusterId": "c1", "Match": {"Path": "/"}, "Transforms": [{"ClientCert": "X-Client-Cert"}]}},
			  "Clusters": {"c1": {"Destinations": {"d1": {"Address": "http://a.example"}}}}}}`
			_, warns, err := Parse([]byte(js), "json")
			if err != nil {
				t.Fatal(err)
			}
			if got := slices.Contains(warns, want); got != c.warn {
				t.Errorf("warned %v, want %v: %q", got, c.warn, warns)
			}
		})
	}
}
